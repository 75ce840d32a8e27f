"""The documentation's runnable examples, read from its pages (Markdown, MyST) as a user would follow
them, in order:

- a code block with a file name as its caption (```` ```{code-block} python ```` and
  ``:caption: handlers.py``) is a file the user writes: it is written;
- a ``console`` block is typed: each ``$ command`` runs in a shell (continued by a trailing
  backslash or a heredoc), and the lines under it are what it prints (``...`` stands for any
  text in a line, or for any lines on a line of its own). A read (``kubectl get``/``describe``/``explain``/
  ``events``, ``curl``) is repeated until it prints that, as a user would look again; ``kopf run`` starts
  the operator in the background (stopping the one before, as Ctrl-C would) and its lines are
  waited for in its log;
- a ``text`` block of class ``operator-log`` (``:class: operator-log``) is what the running
  operator logs next: its lines are waited for, in order, after those matched before.

``sh`` blocks are shown, never run (installing, building images); other code blocks are only
checked to be valid Python or YAML (``test_snippets.py``).
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

DOCS = Path(__file__).parents[2] / "docs"
FENCE = re.compile(r"^(?P<fence>`{3,}|~{3,})(?P<info>.*)$")
READS = ("kubectl get", "kubectl describe", "kubectl events", "kubectl explain", "curl")


@dataclasses.dataclass(frozen=True)
class Block:
    """A fenced block of a page: its language, caption and class, where it starts, and its text."""

    page: str
    line: int
    language: str
    caption: str | None
    classes: tuple[str, ...]
    text: str

    @property
    def where(self) -> str:
        return f"docs/{self.page}:{self.line}"


@dataclasses.dataclass(frozen=True)
class File:
    block: Block
    path: str


@dataclasses.dataclass(frozen=True)
class Command:
    block: Block
    command: str
    expected: tuple[str, ...]

    @property
    def is_read(self) -> bool:
        return self.command.startswith(READS)

    @property
    def is_operator(self) -> bool:
        return self.command.startswith("kopf run ")


@dataclasses.dataclass(frozen=True)
class Log:
    block: Block
    expected: tuple[str, ...]


Step = File | Command | Log


def blocks(page: Path) -> list[Block]:
    """The page's fenced blocks (directives' options parsed: ``:caption:``, ``:class:``)."""
    lines = page.read_text().splitlines()
    found: list[Block] = []
    index = 0
    while index < len(lines):
        opening = FENCE.match(lines[index])
        if not opening:
            index += 1
            continue
        fence, info = opening["fence"], opening["info"].strip()
        start = index + 1
        end = start
        while end < len(lines) and not lines[end].startswith(fence):
            end += 1
        body = lines[start:end]
        options: dict[str, str] = {}
        language = info
        directive = re.match(r"\{(code-block|code)\}\s*(\S*)", info)
        if directive:
            language = directive[2]
            while body and re.match(r"^:[\w-]+:", body[0]):
                key, _, value = body.pop(0)[1:].partition(":")
                options[key] = value.strip()
        elif info.startswith("{"):
            index = end + 1
            continue  # another directive (a toctree, the reference's): not an example
        name = page.relative_to(DOCS).as_posix() if page.is_relative_to(DOCS) else page.name
        found.append(Block(page=name, line=start, language=language,
                           caption=options.get("caption"), classes=tuple(options.get("class", "").split()),
                           text="\n".join(body) + "\n"))
        index = end + 1
    return found


def commands(block: Block) -> list[Command]:
    """A console block's commands, each with the lines printed under it."""
    out: list[Command] = []
    lines = block.text.splitlines()
    index = 0
    while index < len(lines):
        line = lines[index]
        if not line.startswith("$ "):
            raise ValueError(f"{block.where}: a console block's text must start with '$ ': {line!r}")
        command = [line[2:]]
        heredoc = re.search(r"<<-?\s*'?\"?(\w+)'?\"?", line)
        index += 1
        while command[-1].endswith("\\") and index < len(lines):
            command.append(lines[index])
            index += 1
        if heredoc:
            while index < len(lines) and lines[index].strip() != heredoc[1]:
                command.append(lines[index])
                index += 1
            command.append(lines[index] if index < len(lines) else heredoc[1])
            index += 1
        expected = []
        while index < len(lines) and not lines[index].startswith("$ "):
            expected.append(lines[index])
            index += 1
        printed = tuple(line for line in expected if line.strip())
        out.append(Command(block=block, command="\n".join(command), expected=printed))
    return out


def steps(page: Path) -> list[Step]:
    """What a user does following the page, in order."""
    out: list[Step] = []
    for block in blocks(page):
        if block.caption and re.fullmatch(r"[\w./-]+\.\w+", block.caption):
            out.append(File(block=block, path=block.caption))
        elif block.language == "console":
            out += commands(block)
        elif "operator-log" in block.classes:
            out.append(Log(block=block, expected=tuple(line for line in block.text.splitlines() if line.strip())))
    return out


def runnable_pages() -> list[Path]:
    """The pages with something to run: a console block."""
    return sorted(page for page in DOCS.rglob("*.md")
                  if any(step for step in steps(page) if not isinstance(step, File)))


def _pattern(line: str) -> re.Pattern[str]:
    parts = [re.escape(" ".join(part.split())) for part in line.split("...")]
    return re.compile("^" + ".*".join(parts) + "$")


def matches(expected: tuple[str, ...], actual: list[str]) -> bool:
    """Whether a command's output is what the page shows: line by line, whitespace runs as one
    space, blank lines left out; ``...`` is any text in a line, or any lines on a line of its own."""
    def match(wanted: list[str], got: list[str]) -> bool:
        if not wanted:
            return not got
        if wanted[0].strip() == "...":
            return any(match(wanted[1:], got[skip:]) for skip in range(len(got) + 1))
        return bool(got) and bool(_pattern(wanted[0]).match(got[0])) and match(wanted[1:], got[1:])
    return match(list(expected), [" ".join(line.split()) for line in actual if line.strip()])


def found_in_log(expected: tuple[str, ...], log: list[str], start: int) -> int | None:
    """Where in the log (from ``start``) the expected lines end, each found in order, else None."""
    normal = [" ".join(line.split()) for line in log]
    position = start
    for line in expected:
        if line.strip() == "...":
            continue
        pattern = _pattern(line)
        while position < len(normal) and not pattern.match(normal[position]):
            position += 1
        if position >= len(normal):
            return None
        position += 1
    return position
