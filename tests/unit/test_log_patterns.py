"""Log handlers' patterns (`@kopf.on.log(regex=...)`) are matched by the core, in Rust:
for the syntax it takes, it matches the same lines as Python's `re` does, side by side; what it
cannot take is refused with its reason, not matched differently."""

import re

import pytest
from kopf import _engine

LINES = [
    "epoch 3: model accuracy is 97.25%",
    "model accuracy is high",
    "Traceback (most recent call last):",
    "  Traceback",
    "ERROR: disk full",
    "error: disk full",
    "WARN  retrying",
    "café au lait",
    "cafe",
    "all done",
    "done twice",
    "a\\Z",
    "tabs\tand  spaces",
    "",
    "日本語のログ 42",
    "[2026-01-02 03:04:05,678] kopf.objects [INFO] Handler 'x' succeeded.",
]

PATTERNS = [
    (r"model accuracy is (\d+\.\d+)%", 0),
    (r"^Traceback", 0),
    (r"(?P<level>ERROR|WARN)\b", 0),
    (r"error", re.IGNORECASE),
    (r"^\w+$", 0),
    (r"^\w+$", re.ASCII),
    (r"^\w+\s\w+\s\w+$", 0),
    (r"done\Z", 0),
    (r"a\\Z", 0),
    (r"\d{2}", 0),
    (r"\d{2,}$", 0),
    (r"[^\x00-\x7f]", 0),
    (r"^$", 0),
    (r".", 0),
    (r"succeeded\.$", 0),
    (r"\[(?P<time>[^\]]+)\] (\S+)\s+\[(INFO|WARNING)\s*\]", 0),
    (r"""
        accuracy \s is      # the words
        \s (\d+ \. \d+) %   # the figure
     """, re.VERBOSE),
    (r"tabs\s+and\s{2}spaces", 0),
    (r"CAFÉ", re.IGNORECASE),
    (r"(?i)warn", 0),
    (r"^a.*z$", re.DOTALL | re.MULTILINE),
]


@pytest.mark.parametrize('pattern, flags', PATTERNS)
def test_the_core_matches_the_lines_that_python_matches(pattern: str, flags: int) -> None:
    compiled = re.compile(pattern, flags)
    expected = [compiled.search(line) is not None for line in LINES]
    matched = _engine.log_pattern_matches(compiled.pattern, compiled.flags, [line.encode() for line in LINES])
    assert matched == expected


@pytest.mark.parametrize('pattern, reason', [
    (r"(?=x)y", "look-around"),
    (r"(?<!x)y", "look-around"),
    (r"(a)\1", "backreferences"),
])
def test_what_the_core_cannot_match_is_refused_with_its_reason(pattern: str, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        _engine.log_pattern_matches(pattern, re.compile(pattern).flags, [])


def test_lines_that_are_not_text_are_matched_as_they_are() -> None:
    assert _engine.log_pattern_matches(r"ok$", re.compile("ok$").flags, [b"\xff\xfe ok", b"not"]) == [True, False]
