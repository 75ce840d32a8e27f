"""``kopf rbac record``: a command (the operator, or a test suite that runs it) with every client
of its processes pointed at the core's recording proxy, which forwards their requests with the
current credentials and journals them; then the rules that the run needed, the requests the API
server refused, and how they compare with an RBAC file.

The clients find the proxy in a kubeconfig of its own (``$KUBECONFIG``: the engine, kubectl,
``kubernetes``, ``kubernetes_asyncio``, pykube-ng, kr8s, lightkube alike), or, for clients that
only log in as in a pod, in the files of a service account written to a folder of the user's
(``--in-cluster``: ``ca.crt``, ``token``, ``namespace``, and ``$KUBERNETES_SERVICE_HOST/PORT``).
Users need no access to the API server's audit log."""

from __future__ import annotations

import base64
import dataclasses
import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kopf._bridge import services
from kopf._handling.handlers import OperatorRegistry
from kopf._operating.rbac import granting
from kopf._operating.rbac.commands import _connect
from kopf._operating.rbac.rendering import render
from kopf._operating.rbac.rules import Plan
from kopf._structures.settings import OperatorSettings

REFUSED = (401, 403)
EXAMPLE = 120  # characters of a request shown as an example


@dataclasses.dataclass
class Run:
    """What a recorded run showed."""
    exit_code: int
    entries: list[dict[str, Any]]  # the proxy's journal

    def rules(self) -> dict[tuple[str | None, str, str], dict[str, list[dict[str, Any]]]]:
        """The requests by rule: (namespace, group, resource[/subresource]) -> verb -> entries."""
        found: dict[tuple[str | None, str, str], dict[str, list[dict[str, Any]]]] = {}
        for entry in self.entries:
            resource = entry.get('resource')
            if not resource:
                continue
            plural = resource['resource'] + (f"/{resource['subresource']}" if resource['subresource'] else '')
            key = (resource['namespace'], resource['group'], plural)
            found.setdefault(key, {}).setdefault(entry['verb'], []).append(entry)
        return found

    def refused(self) -> list[dict[str, Any]]:
        return [entry for entry in self.entries if entry['code'] in REFUSED]

    def elsewhere(self) -> list[dict[str, Any]]:
        """Requests outside the resources: discovery, /version, /openapi (allowed to every account)."""
        return [entry for entry in self.entries if not entry.get('resource')]


def kubeconfig(port: int, cert_pem: bytes, namespace: str | None) -> str:
    """A kubeconfig of the proxy: its address and CA, no credentials (the proxy has them)."""
    context: dict[str, Any] = {'cluster': 'kopf-rbac-record', 'user': 'kopf-rbac-record'}
    if namespace:
        context['namespace'] = namespace
    config = {
        'apiVersion': 'v1', 'kind': 'Config', 'current-context': 'kopf-rbac-record',
        'clusters': [{'name': 'kopf-rbac-record', 'cluster': {
            'server': f"https://127.0.0.1:{port}",
            'certificate-authority-data': base64.b64encode(cert_pem).decode()}}],
        'users': [{'name': 'kopf-rbac-record', 'user': {}}],
        'contexts': [{'name': 'kopf-rbac-record', 'context': context}],
    }
    return json.dumps(config, indent=2)  # JSON is YAML: every client reads it


def _agent(text: str) -> str:
    return text.split(' ', 1)[0] or 'an unnamed client'


def _who(entries: Sequence[dict[str, Any]]) -> list[str]:
    by_agent: dict[str, list[dict[str, Any]]] = {}
    for entry in entries:
        by_agent.setdefault(_agent(entry['agent']), []).append(entry)
    found = []
    for agent, items in sorted(by_agent.items()):
        count = sum(item['count'] for item in items)
        example = items[0]['example']
        example = example if len(example) <= EXAMPLE else example[:EXAMPLE - 3] + '...'
        codes = sorted({str(item['code']) for item in items})
        found.append(f"{agent}: {count} request{'s' if count != 1 else ''}, answered {'/'.join(codes)} "
                     f"(e.g. {example})")
    return found


def plan_of(run: Run, *, account: str, account_namespace: str) -> Plan:
    """The rules the run needed, as `kopf rbac generate` writes them."""
    result = Plan(account=account, account_namespace=account_namespace)
    for (namespace, group, resource), verbs in run.rules().items():
        for verb, entries in verbs.items():
            for who in _who(entries):
                result.need(group, resource, [namespace], [verb], who)
    return result


@dataclasses.dataclass
class Comparison:
    """A run against an RBAC file: what it needed and the file does not grant; what the file
    grants and the run did not use."""
    missing: list[str]
    unused: list[str]


def compare(run: Run, grants: Sequence[granting.Grant]) -> Comparison:
    missing = []
    needed: list[tuple[str | None, str, str, str]] = []
    for (namespace, group, resource), verbs in sorted(run.rules().items(), key=lambda item: _order(item[0])):
        for verb, entries in sorted(verbs.items()):
            needed.append((namespace, group, resource, verb))
            if not granting.allowed(grants, namespace, group, resource, verb):
                place = f"in the namespace {namespace!r}" if namespace else "cluster-wide"
                missing.append(f"{verb} {resource} ({group or 'core'}) {place}: {'; '.join(_who(entries))}")
    unused = []
    for grant in grants:
        for namespace, group, resource, verb in grant.keys():
            single = dataclasses.replace(grant, groups=frozenset({group}), resources=frozenset({resource}),
                                         verbs=frozenset({verb}))
            if not any(single.allows(*request) for request in needed):
                place = f"in the namespace {namespace!r}" if namespace else "cluster-wide"
                unused.append(f"{verb} {resource} ({group or 'core'}) {place} ({grant.role})")
    return Comparison(missing=missing, unused=sorted(set(unused)))


def _order(key: tuple[str | None, str, str]) -> tuple[str, str, str]:
    namespace, group, resource = key
    return namespace or '', group, resource


async def start(registry: OperatorRegistry, port: int) -> tuple[Any, str | None]:
    """The proxy, forwarding with the current login; and the login's default namespace."""
    connection = await _connect(registry, OperatorSettings())
    recording = await services.start_recording(connection, port)
    return recording, json.loads(connection).get('default_namespace')


def run(command: Sequence[str], *, recording: Any, namespace: str | None, in_cluster: Path | None,
        stdout: Any) -> Run:
    """Run the command with its clients pointed at the proxy; its journal once it has exited.
    SIGINT and SIGTERM are passed on to it (Ctrl-C stops the operator, then the report follows)."""
    with tempfile.TemporaryDirectory(prefix='kopf-rbac-record-') as folder:
        path = Path(folder) / 'kubeconfig'
        path.write_text(kubeconfig(recording.port, recording.cert_pem, namespace))
        env = {**os.environ, 'KUBECONFIG': str(path)}
        if in_cluster is not None:  # as in a pod: the service account's files, no kubeconfig
            del env['KUBECONFIG']
            in_cluster.mkdir(parents=True, exist_ok=True)
            (in_cluster / 'ca.crt').write_bytes(recording.cert_pem)
            (in_cluster / 'token').write_text('recorded-by-kopf-rbac-record')  # (the proxy sends its own)
            (in_cluster / 'namespace').write_text(namespace or 'default')
            env.update(KUBERNETES_SERVICE_HOST='127.0.0.1', KUBERNETES_SERVICE_PORT=str(recording.port))
        try:
            process = subprocess.Popen(list(command), env=env, stdout=stdout)
        except OSError as e:
            recording.stop()
            raise RecordingError(f"The command {command[0]!r} cannot be started: {e}") from None
        previous = {number: signal.signal(number, lambda n, _: process.send_signal(n))
                    for number in (signal.SIGINT, signal.SIGTERM)}
        try:
            code = process.wait()
        finally:
            for number, handler in previous.items():
                signal.signal(number, handler)
    entries = json.loads(recording.entries())
    recording.stop()
    return Run(exit_code=code, entries=entries)


class RecordingError(Exception):
    """The recorded command cannot be run."""


def grants_of(rbac: Path) -> tuple[Path, list[granting.Grant]]:
    """An RBAC file to compare a run with, read before the run (a bad one fails at once)."""
    try:
        return rbac, granting.read(rbac.read_text(), source=str(rbac))
    except OSError as e:
        raise ValueError(f"The RBAC file {rbac} cannot be read: {e}") from None


def report(run: Run, *, command: Sequence[str], account: str, account_namespace: str,
           rbac: tuple[Path, list[granting.Grant]] | None) -> tuple[str, list[str], bool]:
    """The YAML of the needed rules, the lines about the run (refusals, the comparison), and
    whether anything is wrong (refused, or not granted by the file)."""
    text = render(plan_of(run, account=account, account_namespace=account_namespace),
                  source=f"the run of `{' '.join(command)}`", heading=(
                      "by `kopf rbac record` (kopf-rs): the requests that the run made.",
                      f"Outside the resources (discovery, /version): {sum(e['count'] for e in run.elsewhere())} "
                      "requests, allowed to every authenticated account."))
    lines = []
    for entry in run.refused():
        resource = entry.get('resource') or {}
        plural = resource.get('resource', entry.get('path') or '?') + \
            (f"/{resource['subresource']}" if resource.get('subresource') else '')
        place = f"in the namespace {resource['namespace']!r}" if resource.get('namespace') else "cluster-wide"
        lines.append(f"Refused ({entry['code']}): {entry['verb']} {plural} ({resource.get('group') or 'core'}) "
                     f"{place}: {'; '.join(_who([entry]))}")
    wrong = bool(lines)
    if rbac is not None:
        path, grants = rbac
        comparison = compare(run, grants)
        lines += [f"Not granted by {path}: {line}" for line in comparison.missing]
        lines += [f"Granted by {path}, not used in this run: {line}" for line in comparison.unused]
        wrong = wrong or bool(comparison.missing)
    return text, lines, wrong


def end_by_signal(number: int) -> None:
    """End this process by the signal that ended the command (its default action)."""
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    signal.signal(number, signal.SIG_DFL)
    os.kill(os.getpid(), number)


def stdout_of(output: Path | None) -> Any:
    """Where the command's own output goes: ours, or our stderr when the rules go to stdout."""
    return None if output is not None else sys.stderr
