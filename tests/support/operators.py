"""Running `kopf run` as a user does (a separate process), and waiting for what it logs."""

from __future__ import annotations

import base64
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from support.cluster import kubectl


class OperatorProcess:
    """`kopf run ARGS` in a subprocess with its output collected in a file."""

    def __init__(self, args: list[str], *, cwd: Path, env: dict[str, str] | None = None,
                 kopf: Path | None = None) -> None:
        """``kopf``: another engine's command (PyPI's Kopf); ours by default."""
        self.log_path = cwd / f"operator-{time.monotonic_ns()}.log"
        self._log = open(self.log_path, "wb")
        kopf = kopf or Path(sys.executable).with_name("kopf")
        # TMPDIR: the `kubernetes` client writes a kubeconfig's key and certificates into temporary
        # files, removed at exit but not when a test kills the process: here, not left in /tmp.
        self.process = subprocess.Popen(
            [str(kopf), *args], cwd=cwd, stdout=self._log, stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1", "TMPDIR": str(cwd), **(env or {})},
        )

    @property
    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_for(self, pattern: str, timeout: float = 30, count: int = 1) -> str:
        """Wait until the output matches the regexp (`count` times); return the output."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            output = self.output
            if len(re.findall(pattern, output)) >= count:
                return output
            if self.process.poll() is not None:
                raise AssertionError(f"the operator exited ({self.process.returncode}) before "
                                     f"{pattern!r} was logged:\n{output}")
            time.sleep(0.1)
        raise AssertionError(f"{pattern!r} was not logged in {timeout}s:\n{self.output}")

    def stop(self, sig: int = signal.SIGINT, timeout: float = 30) -> int:
        """Signal the operator and wait for its exit; one that does not exit in time fails the
        test and is killed, so that it cannot act in the tests after it."""
        if self.process.poll() is None:
            self.process.send_signal(sig)
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise AssertionError(f"the operator did not exit in {timeout}s after {signal.Signals(sig).name}; "
                                 f"killed:\n{self.output}") from None
        finally:
            self._log.close()

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self._log.close()


def write_script(directory: Path, source: str, name: str = "handlers.py") -> Path:
    path = directory / name
    path.write_text(textwrap.dedent(source))
    return path


def run_python(source: str, *, cwd: Path | None = None, env: dict[str, str] | None = None) -> str:
    """Run the code in a fresh interpreter of this virtualenv; its output, if it succeeded."""
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(source)], capture_output=True, text=True,
                            cwd=cwd, env={**os.environ, **(env or {})}, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    return result.stdout


def get(kind: str, name: str, namespace: str) -> dict[str, Any]:
    return json.loads(kubectl("get", kind, name, "-n", namespace, "-o", "json"))


def refused(output: str) -> bool:
    """Whether the output tells of a request the API server refused (403). Not a bare "403":
    timestamps' milliseconds and counters have it too."""
    return re.search(r"forbidden|HTTP 403|code: 403", output, re.IGNORECASE) is not None


def greeted_statuses(namespace: str, count: int, timeout: float = 60) -> dict[str, Any]:
    """Once `count` greetings all have `status.greet`: their names to it."""
    def statuses() -> dict[str, Any]:
        items = json.loads(kubectl("get", "greetings", "-n", namespace, "-o", "json"))["items"]
        return {i["metadata"]["name"]: i.get("status", {}).get("greet") for i in items}
    found: dict[str, Any] = eventually(lambda: len(s := statuses()) == count and all(s.values()) and s,
                                       timeout=timeout, what=f"{count} greetings greeted")
    return found


def eventually(check: Callable[[], Any], timeout: float = 30, what: str = "the condition") -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except (AssertionError, OSError) as e:  # OSError: e.g. a server that is not listening yet
            last = e
        else:
            if last:
                return last
        time.sleep(0.2)
    raise AssertionError(f"{what} did not happen in {timeout}s (last: {last!r})")


def yaml_documents(path: Path) -> list[dict[str, Any]]:
    """A multi-document YAML file as JSON objects (kubectl converts; no YAML library needed)."""
    result = subprocess.run(["kubectl", "create", "--dry-run=client", "-o", "json", "-f", str(path)],
                            capture_output=True, text=True, check=True)
    decoder, text, documents = json.JSONDecoder(), result.stdout.strip(), []
    while text:  # one JSON object per document, one after another
        document, end = decoder.raw_decode(text)
        documents.append(document)
        text = text[end:].strip()
    return documents


def account_kubeconfig(account: str, directory: Path, namespace: str = "default") -> Path:
    """A kubeconfig of the test cluster that logs in with a service account's token, as the
    account's pods would."""
    token = kubectl("create", "token", account, "-n", namespace).strip()
    admin = json.loads(Path(os.environ["KUBECONFIG"]).read_text())
    config = {**admin, "users": [{"name": account, "user": {"token": token}}],
              "contexts": [{"name": account, "context": {"cluster": admin["clusters"][0]["name"],
                                                         "user": account}}],
              "current-context": account}
    path = directory / f"{account}.kubeconfig"
    path.write_text(json.dumps(config))
    return path


def api_server() -> tuple[str, int]:
    """The test cluster's API server, as its admin kubeconfig names it: (host, port)."""
    admin = json.loads(Path(os.environ["KUBECONFIG"]).read_text())
    host, _, port = admin["clusters"][0]["cluster"]["server"].removeprefix("https://").partition(":")
    return host, int(port or 443)


def pod_secrets(account: str, directory: Path, *, account_namespace: str = "default",
                namespace: str | None = None) -> Path:
    """What a pod of the service account finds in /var/run/secrets/kubernetes.io/serviceaccount:
    its token, the cluster's CA and its namespace, readable by any user (as in a pod)."""
    token = kubectl("create", "token", account, "-n", account_namespace).strip()
    admin = json.loads(Path(os.environ["KUBECONFIG"]).read_text())
    ca = base64.b64decode(admin["clusters"][0]["cluster"]["certificate-authority-data"])
    directory.mkdir(mode=0o755)
    for name, content in {"token": token.encode(), "ca.crt": ca,
                          "namespace": (namespace or account_namespace).encode()}.items():
        (directory / name).write_bytes(content)
        (directory / name).chmod(0o644)
    return directory
