"""The object prefix of `kopf run`'s log lines: in this line's formatting only."""

import logging

from kopf._logs.loggers import LogFormat, make_formatter


def record(msg: str, ref: dict[str, str] | None) -> logging.LogRecord:
    made = logging.LogRecord('kopf.objects', logging.INFO, __file__, 1, msg, None, None)
    if ref is not None:
        made.k8s_ref = ref  # type: ignore[attr-defined]
    return made


def test_the_prefix_is_the_objects_namespace_and_name() -> None:
    formatter = make_formatter(LogFormat.PLAIN, log_prefix=True)
    assert formatter.format(record("Hello.", {'namespace': 'ns1', 'name': 'n1'})) == "[ns1/n1] Hello."
    assert formatter.format(record("Hello.", {'name': 'cluster-wide'})) == "[cluster-wide] Hello."
    assert formatter.format(record("Hello.", None)) == "Hello."


def test_other_handlers_get_the_record_unprefixed() -> None:
    line = record("Hello %s.", {'namespace': 'ns1', 'name': 'n1'})
    line.args = ('world',)
    assert make_formatter(LogFormat.PLAIN, log_prefix=True).format(line) == "[ns1/n1] Hello world."
    assert line.msg == "Hello %s."
    assert logging.Formatter('%(message)s').format(line) == "Hello world."
    assert make_formatter(LogFormat.PLAIN, log_prefix=False).format(line) == "Hello world."
