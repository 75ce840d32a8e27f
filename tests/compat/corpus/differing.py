"""What differs between Kopf's run and ours, as lines; and which of them are accepted
(``accepted.toml``: each either Kopf's bug that we fix, or an engine detail that a user
cannot rely on, with the reason)."""

from __future__ import annotations

import collections
import dataclasses
import fnmatch
import json
import re
import tomllib
from pathlib import Path
from typing import Any

from .recording import Recording

ACCEPTED = Path(__file__).parent / "accepted.toml"
KINDS = frozenset({"kopf-bug", "engine-detail"})
EXIT_SLACK = 3.0  # seconds ours may take beyond Kopf's to stop before it is a difference


@dataclasses.dataclass(frozen=True)
class Acceptance:
    operator: str  # a corpus operator's name, or a shell-style pattern ("*": all)
    difference: re.Pattern[str]
    kind: str
    reason: str

    def covers(self, operator: str, line: str) -> bool:
        return fnmatch.fnmatchcase(operator, self.operator) and self.difference.search(line) is not None


def accepted() -> list[Acceptance]:
    entries = tomllib.loads(ACCEPTED.read_text()).get("accepted", [])
    found = []
    for entry in entries:
        if entry.get("kind") not in KINDS or not entry.get("reason"):
            raise ValueError(f"{ACCEPTED.name}: every entry needs a kind ({', '.join(sorted(KINDS))}) "
                             f"and a reason: {entry}")
        found.append(Acceptance(operator=entry.get("operator", "*"), difference=re.compile(entry["difference"]),
                                kind=entry["kind"], reason=entry["reason"]))
    return found


def _paths(value: Any, prefix: str = "") -> dict[str, Any]:
    """Leaves of a JSON value by their dotted paths (lists by index)."""
    if isinstance(value, dict) and value:
        found: dict[str, Any] = {}
        for key, item in value.items():
            found.update(_paths(item, f"{prefix}.{key}" if prefix else key))
        return found
    if isinstance(value, list) and value:
        found = {}
        for index, item in enumerate(value):
            found.update(_paths(item, f"{prefix}[{index}]"))
        return found
    return {prefix: value}


def _counts(title: str, kopf: collections.Counter[str], ours: collections.Counter[str]) -> list[str]:
    return [f"{title}: {key}: kopf={kopf[key]} ours={ours[key]}"
            for key in sorted(set(kopf) | set(ours)) if kopf[key] != ours[key]]


def differences(kopf: Recording, ours: Recording) -> list[str]:
    """Every difference a user could see, one line each."""
    lines: list[str] = []
    for what in sorted(set(kopf.timeouts) | set(ours.timeouts)):
        lines.append(f"timeout: {what}: kopf={what in kopf.timeouts} ours={what in ours.timeouts}")
    for step in list(dict.fromkeys([*kopf.snapshots, *ours.snapshots])):
        theirs, mine = kopf.snapshots.get(step, {}), ours.snapshots.get(step, {})
        for key in sorted(set(theirs) | set(mine)):
            if key not in mine or key not in theirs:
                lines.append(f"objects after {step}: {key}: only on {'kopf' if key in theirs else 'ours'}")
                continue
            left, right = _paths(theirs[key]), _paths(mine[key])
            for path in sorted(set(left) | set(right)):
                if left.get(path, ...) != right.get(path, ...):
                    shown = [json.dumps(side[path]) if path in side else "(absent)" for side in (left, right)]
                    lines.append(f"objects after {step}: {key} {path}: kopf={shown[0]} ours={shown[1]}")
    lines += _counts("writes", kopf.writes, ours.writes)
    lines += _counts("logs", kopf.logs, ours.logs)
    lines += _counts("events", kopf.events, ours.events)
    if kopf.exit_code != ours.exit_code:
        lines.append(f"exit code on {kopf.stop_signal}: kopf={kopf.exit_code} ours={ours.exit_code}")
    if ours.exit_seconds > kopf.exit_seconds + EXIT_SLACK:
        lines.append(f"exit time on {kopf.stop_signal}: kopf={kopf.exit_seconds:.1f}s ours={ours.exit_seconds:.1f}s")
    return lines


def unaccepted(operator: str, lines: list[str], acceptances: list[Acceptance]) -> list[str]:
    return [line for line in lines if not any(a.covers(operator, line) for a in acceptances)]
