"""The documentation's code that is not run (``test_examples.py`` runs the sessions): every Python
block is valid Python, every YAML block valid YAML; every console block reads as a session; and
the reading of sessions itself (``sessions.py``: files, commands, heredocs, ``...``)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import yaml
from sessions import DOCS, Command, File, Log, blocks, commands, matches, runnable_pages, steps

PAGES = sorted(DOCS.rglob("*.md"))


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.relative_to(DOCS).as_posix())
def test_every_block_of_code_parses(page: Path) -> None:
    for block in blocks(page):
        if block.language == "python":
            try:
                ast.parse(block.text)
            except SyntaxError as e:
                pytest.fail(f"{block.where}: not valid Python: {e}", pytrace=False)
        elif block.language == "yaml":
            try:
                list(yaml.safe_load_all(block.text))
            except yaml.YAMLError as e:
                pytest.fail(f"{block.where}: not valid YAML: {e}", pytrace=False)
        elif block.language == "console":
            commands(block)  # (a console block that is not a session fails to read)


def test_the_pages_with_sessions_are_found() -> None:
    pages = {page.relative_to(DOCS).as_posix() for page in runnable_pages()}
    assert {"getting-started.md", "walkthrough.md"} <= pages, pages


def test_a_session_reads_as_a_user_follows_it(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("""# A page

```{code-block} python
:caption: handlers.py

import kopf
```

```console
$ kopf run --namespace default handlers.py --verbose
$ kubectl apply -f - <<'YAML'
kind: Greeting
YAML
$ kubectl get greeting hello \\
    -o name
greeting.demo.kopf.dev/hello
```

```{code-block} text
:class: operator-log

[...] Handler 'greet' succeeded.
```

```sh
pip install kopf-rs
```
""")
    found = steps(page)
    assert [type(step) for step in found] == [File, Command, Command, Command, Log]
    assert isinstance(found[0], File) and found[0].path == "handlers.py" and found[0].block.text == "\nimport kopf\n"
    operator, heredoc, read = found[1], found[2], found[3]
    assert isinstance(operator, Command) and operator.is_operator and operator.expected == ()
    assert isinstance(heredoc, Command) and heredoc.command.endswith("kind: Greeting\nYAML")
    assert not heredoc.is_read and heredoc.expected == ()
    assert isinstance(read, Command) and read.is_read and read.expected == ("greeting.demo.kopf.dev/hello",)
    assert isinstance(found[4], Log) and found[4].expected == ("[...] Handler 'greet' succeeded.",)


def test_printed_lines_match_as_the_page_shows_them() -> None:
    assert matches(("NAME   MESSAGE", "hello  Hello, Ada!"), ["NAME    MESSAGE", "hello   Hello, Ada!", ""])
    assert not matches(("hello",), ["hello", "another"])
    assert matches(("...", "hello ..."), ["a", "b", "hello there"])
    assert matches(("first", "...", "last"), ["first", "last"])
    assert not matches(("Hello, Ada!",), ["Hello, Bob!"])


def _engine_sources() -> str:
    """The package's and the core's source text, with literals split over lines joined again."""
    texts = [path.read_text() for pattern in ("python/kopf/**/*.py", "crates/**/*.rs", "src/**/*.rs")
             for path in DOCS.parent.glob(pattern)]
    joined = "\n".join(texts)
    joined = re.sub(r"""["']\s*\n\s*f?["']""", "", joined)  # Python's implicit concatenation
    return re.sub(r"\\\n\s*", "", joined)  # Rust's continued strings


def test_the_troubleshooting_messages_are_the_engines() -> None:
    """Each message that heads an entry of the troubleshooting page is still written by the engine:
    its every stretch of text between the `…` placeholders is in the package's or the core's code."""
    sources = _engine_sources()
    headings = [line for line in (DOCS / "troubleshooting.md").read_text().splitlines()
                if line.startswith("### `")]
    assert len(headings) >= 15, headings
    missing = []
    for heading in headings:
        for message in re.findall(r"`([^`]+)`", heading):
            for fragment in message.split("…"):
                fragment = fragment.strip(" '\"[]().:")
                if len(fragment) >= 8 and fragment not in sources:
                    missing.append(f"{fragment!r} (of {message!r})")
    assert missing == []
