"""Standard modules loaded when first used (kopf._deferred): ssl, asyncio's TLS, hashlib.

Each case runs in a fresh interpreter: this one has imported asyncio (and ssl) long ago.
"""

import textwrap
from pathlib import Path

from support.operators import run_python


def test_kopf_loads_no_openssl_until_tls_or_hashes_are_used() -> None:
    output = run_python("""
        import sys, types
        import kopf, asyncio
        print(sorted(m for m in ('_ssl', '_hashlib') if m in sys.modules))
        import ssl, hashlib  # binding a name is not a use
        print(sorted(m for m in ('_ssl', '_hashlib') if m in sys.modules))
        context = ssl.create_default_context()
        print(context.verify_mode == ssl.CERT_REQUIRED, type(ssl) is types.ModuleType)
        print(asyncio.sslproto.SSLProtocol.__module__, asyncio.sslproto.ssl is ssl)
        from hashlib import sha256
        print(sha256(b'kopf').hexdigest() == hashlib.new('sha256', b'kopf').hexdigest())
        print(sorted(m for m in ('_ssl', '_hashlib') if m in sys.modules))
    """)
    assert output.splitlines() == [
        "[]",
        "[]",
        "True True",
        "asyncio.sslproto True",
        "True",
        "['_hashlib', '_ssl']",
    ]


def test_kopf_imports_no_file_and_archive_modules_for_its_logins() -> None:
    """The login handlers' import hook (kopf._connecting.piggybacking) needs none of importlib.abc's
    imports (importlib.resources, pathlib, tempfile, bz2, lzma: 1.6 MiB of every operator)."""
    output = run_python("""
        import sys
        import kopf
        print(sorted(m for m in ('importlib.abc', 'importlib.resources', 'tempfile', 'lzma') if m in sys.modules))
    """)
    assert output.splitlines() == ["[]"]


def test_the_json_log_format_loads_its_library_when_first_used() -> None:
    # python-json-logger, pathlib and PyYAML are not imported by `kopf` itself (~1.7 MiB of
    # an operator's memory outside a cluster). The JSON format works as it did.
    output = run_python("""
        import io, json, logging, sys
        import kopf, kopf._running.operator, kopf.cli
        print(sorted(m for m in ('pythonjsonlogger', 'pathlib', 'yaml') if m in sys.modules))
        from kopf._logs.loggers import LogFormat, make_formatter
        stream = io.StringIO()
        handler = logging.StreamHandler(stream)
        handler.setFormatter(make_formatter(LogFormat.JSON, log_prefix=None, log_refkey='ref'))
        logger = logging.getLogger('test.json')
        logger.addHandler(handler)
        logger.warning('hello', extra={'k8s_ref': {'name': 'n'}})
        record = json.loads(stream.getvalue())
        print(record['message'], record['ref'], record['severity'])
        print('pythonjsonlogger' in sys.modules)
        from kopf._logs.loggers import ObjectJsonFormatter
        print(ObjectJsonFormatter.__module__)
    """)
    assert output.splitlines() == ["[]", "hello {'name': 'n'} warn", "True", "kopf._logs.jsonlogging"]


def test_nothing_is_deferred_when_asyncio_came_first() -> None:
    output = run_python("""
        import sys, types, asyncio
        import kopf, ssl
        print('_ssl' in sys.modules, type(sys.modules['ssl']) is types.ModuleType)
    """)
    assert output.split() == ["True", "True"]


def test_threads_using_a_deferred_module_at_once_run_its_code_once(tmp_path: Path) -> None:
    (tmp_path / "slowly_loaded.py").write_text(textwrap.dedent("""
        import time
        print('executing', flush=True)
        time.sleep(0.3)
        VALUE = 42
    """))
    output = run_python("""
        import sys, threading
        sys.path.insert(0, '.')
        from kopf import _deferred
        print(_deferred.defer('slowly_loaded'))
        import slowly_loaded
        print('imported')
        seen = []
        threads = [threading.Thread(target=lambda: seen.append(slowly_loaded.VALUE)) for _ in range(8)]
        for thread in threads: thread.start()
        for thread in threads: thread.join()
        print(seen)
    """, cwd=tmp_path)
    assert output.splitlines() == ["True", "imported", "executing", str([42] * 8)]


def test_a_failing_deferred_module_fails_each_use_as_a_failed_import(tmp_path: Path) -> None:
    (tmp_path / "broken_module.py").write_text("raise ImportError('not here')\n")
    output = run_python("""
        import sys
        sys.path.insert(0, '.')
        from kopf import _deferred
        _deferred.defer('broken_module')
        import broken_module
        for _ in range(2):
            try:
                broken_module.anything
            except ImportError as e:
                print('ImportError:', e)
    """, cwd=tmp_path)
    assert output.splitlines() == ["ImportError: not here"] * 2
