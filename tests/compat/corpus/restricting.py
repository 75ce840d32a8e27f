"""Our runs of the corpus' operators as they would be deployed with the RBAC that
`kopf rbac generate` gives them: a ServiceAccount with exactly its output, the account's token
the operator's only credentials (a token kubeconfig, or a pod's files), and the run recorded by
`kopf rbac record` against that output (what was refused, what the output grants unused).
Kopf's runs keep the admin's credentials: the two outcomes are compared as before."""

from __future__ import annotations

import dataclasses
import json
import re
import socket
import subprocess
from collections.abc import Callable
from pathlib import Path

import yaml
from support import request_sites
from support.operators import account_kubeconfig, api_server

RULES = Path(__file__).parent / "rbac"  # kopf.rbac declarations of what an operator's code hides
# `kopf rbac record`'s lines after the run (not the operator's: they are not compared with Kopf's log).
REPORT = re.compile(r"^(Refused \(\d+\): |Not granted by |Granted by \S+, not used in this run: )")
WARNING = re.compile(r"^Warning: (.*)$", re.MULTILINE)

Rule = tuple[str | None, str, str, str]  # namespace (None: cluster-wide), group, resource, verb


@dataclasses.dataclass
class Restriction:
    """The account of one run: its rules as generated and as recorded, and what the run showed."""
    account: str
    namespace: str
    generated: Path
    recorded: Path  # (both in the run's folder, removed with it: their texts are kept when it ends)
    warnings: list[str]
    silent: list[str]  # the client's request methods in its code that neither a rule nor a warning names
    sites: int  # the client's request methods in its code, found apart from the generator
    report: list[str] = dataclasses.field(default_factory=list)
    generated_text: str = ""
    recorded_text: str = ""
    port: int = 0  # the recording proxy's: the API server as the operator sees it

    def refused(self) -> list[str]:
        return [line for line in self.report if not line.startswith("Granted by ")]

    def unused(self) -> list[str]:
        return [line.split(": ", 1)[1] for line in self.report if line.startswith("Granted by ")]


def generate(*, venv: Path, args: list[str], namespace: str, workdir: Path, name: str,
             wrap: Callable[[list[str]], tuple[list[str], dict[str, str]]], env: dict[str, str]) -> Restriction:
    """The rules of `kopf rbac generate` for the operator (with its declarations, if any),
    applied: a ServiceAccount in the run's namespace. `wrap` makes the command see what the
    operator sees (a pod's files for those that log in as in a pod)."""
    account = f"corpus-{name}"
    declared = RULES / f"{name}.py"
    command = [str(venv / "bin" / "kopf"), "rbac", "generate", *args, *([str(declared)] if declared.exists() else []),
               "--name", account, "--account-namespace", namespace]
    argv, extra = wrap(command)
    result = subprocess.run(argv, cwd=workdir, env={**env, **extra}, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise AssertionError(f"kopf rbac generate {' '.join(args)} failed:\n{result.stderr[-5000:]}")
    generated = workdir / "generated-rbac.yaml"
    generated.write_text(result.stdout)
    subprocess.run(["kubectl", "apply", "-f", str(generated)], check=True, capture_output=True)
    warnings = WARNING.findall(result.stderr)
    # Every request method its code names, found apart from the generator: said by it, or not.
    # (In the same surroundings as the command: what `wrap` put before it, once made.)
    scan = [*argv[:len(argv) - len(command)], str(venv / "bin" / "python"), request_sites.__file__, *command[3:]]
    scanned = subprocess.run(scan, cwd=workdir, env={**env, **extra}, capture_output=True, text=True, check=False)
    if scanned.returncode != 0:
        raise AssertionError(f"the scan of the request methods failed:\n{scanned.stderr[-5000:]}")
    found = [tuple(site) for site in json.loads(scanned.stdout)]
    return Restriction(account=account, namespace=namespace, generated=generated,
                       recorded=workdir / "recorded-rbac.yaml", warnings=warnings, port=_free_port(),
                       silent=request_sites.silent(found, result.stdout, warnings),  # type: ignore[arg-type]
                       sites=len(found))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def credentials(restriction: Restriction, workdir: Path) -> Path:
    """A kubeconfig with the account's token: for `kopf rbac record`'s own login (and the
    operator's where it reads a kubeconfig)."""
    return account_kubeconfig(restriction.account, workdir, restriction.namespace)


def recorded(restriction: Restriction, venv: Path, argv: list[str], in_cluster: Path | None) -> list[str]:
    """The command under `kopf rbac record`, compared with the generated rules."""
    return [str(venv / "bin" / "kopf"), "rbac", "record", "-q", "--rbac", str(restriction.generated),
            "--output", str(restriction.recorded), "--name", restriction.account, "--port", str(restriction.port),
            "--account-namespace", restriction.namespace,
            *(["--in-cluster", str(in_cluster)] if in_cluster is not None else []), "--", *argv]


def finish(output: str, restriction: Restriction) -> str:
    """The operator's own output, without the recorder's report (kept in the restriction, with
    the rules generated and recorded), and with the API server's address where the proxy's is
    (clients that log their requests' URLs); the account's cluster-wide roles removed."""
    restriction.generated_text = restriction.generated.read_text()
    restriction.recorded_text = restriction.recorded.read_text() if restriction.recorded.exists() else ""
    subprocess.run(["kubectl", "delete", "clusterrole,clusterrolebinding", restriction.account, "--ignore-not-found"],
                   capture_output=True, check=False)
    host, port = api_server()
    output = output.replace(f"127.0.0.1:{restriction.port}", f"{host}:{port}")
    kept = []
    for line in output.splitlines(keepends=True):
        if REPORT.match(line):
            restriction.report.append(line.rstrip("\n"))
        else:
            kept.append(line)
    return "".join(kept)


def rules_of(text: str) -> set[Rule]:
    """A file's rules as (namespace, group, resource, verb)."""
    found: set[Rule] = set()
    for document in yaml.safe_load_all(text):
        if document and document.get("kind") in ("Role", "ClusterRole"):
            namespace = document["metadata"].get("namespace") if document["kind"] == "Role" else None
            found |= {(namespace, group, resource, verb) for rule in document.get("rules") or []
                      for group in rule["apiGroups"] for resource in rule["resources"] for verb in rule["verbs"]}
    return found


def verbs(rules: set[Rule]) -> set[tuple[str, str, str]]:
    """The rules as (group, resource, verb), wherever they are granted."""
    return {(group, resource, verb) for _, group, resource, verb in rules}


def sources(text: str) -> dict[str, set[Rule]]:
    """The generated rules by where they come from, read from their comments: the engine's own,
    introspection (a client's call `at file:line`), or a `kopf.rbac` declaration."""
    found: dict[str, set[Rule]] = {"engine": set(), "introspection": set(), "declaration": set()}
    for document in yaml.safe_load_all(text):
        if not document or document.get("kind") not in ("Role", "ClusterRole"):
            continue
        namespace = document["metadata"].get("namespace") if document["kind"] == "Role" else None
        comments = _comments(text, document)
        for rule, reasons in zip(document.get("rules") or [], comments, strict=True):
            for reason in reasons:
                verbs, _, who = reason.partition(": ")
                origin = "declaration" if who.startswith("kopf.rbac.") else \
                    "introspection" if re.search(r" at \S+:\d+, from ", who) else "engine"
                for verb in verbs.split(", "):
                    found[origin] |= {(namespace, group, resource, verb)
                                      for group in rule["apiGroups"] for resource in rule["resources"]}
    return found


def _comments(text: str, document: dict[str, object]) -> list[list[str]]:
    """Each rule's comment lines of one role in the file (roles are written one per document)."""
    meta = document["metadata"]
    assert isinstance(meta, dict)
    for chunk in text.split("\n---\n"):
        if f"kind: {document['kind']}\n" in chunk and f'name: "{meta["name"]}"' in chunk and \
                (document["kind"] == "ClusterRole" or f'namespace: "{meta.get("namespace")}"' in chunk):
            rules: list[list[str]] = []
            pending: list[str] = []
            for line in chunk.splitlines():
                if line.startswith("  # "):
                    pending.append(line[4:])
                elif line.startswith("  - apiGroups:"):
                    rules.append(pending)
                    pending = []
            return rules
    raise AssertionError(f"no {document['kind']} {meta['name']} in the generated file")

