"""Every page with a session to follow (``console`` blocks: see ``sessions.py``) is followed as a
user would, against the control plane: its files written, its commands typed in a shell, the
operator started with its ``kopf run`` line, and what the page says they print (the commands'
output, the operator's log) checked. So the pages cannot drift from the engine.

The pages work in the ``default`` namespace, as a reader's first cluster does; before and after
each page, what is there of the examples' Greetings is removed (finalizers first: the operator
is gone), and their Events.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sessions import DOCS, Command, File, Log, found_in_log, matches, runnable_pages, steps

ROOT = DOCS.parent
TIMEOUT = 60


class Operator:
    """The ``kopf run`` of a page, in the background as in a second terminal."""

    def __init__(self, command: str, cwd: Path, env: dict[str, str]) -> None:
        self.command = command
        self.log_path = cwd / "operator.log"
        self.log_file = self.log_path.open("w")
        self.process = subprocess.Popen(["bash", "-c", f"exec {command}"], cwd=cwd, env=env, stdout=self.log_file,
                                        stderr=subprocess.STDOUT, start_new_session=True)
        self.matched = 0  # where in the log the page's expectations have got to

    def lines(self) -> list[str]:
        return self.log_path.read_text(errors="replace").splitlines()

    def expect(self, expected: tuple[str, ...], where: str) -> None:
        deadline = time.monotonic() + TIMEOUT
        while (end := found_in_log(expected, self.lines(), self.matched)) is None:
            if self.process.poll() is not None or time.monotonic() > deadline:
                log = "\n".join(self.lines()[-40:])
                state = f"exited with {self.process.returncode}" if self.process.poll() is not None else "running"
                pytest.fail(f"{where}: the operator ({state}) did not log, in order:\n" + "\n".join(expected) +
                            f"\n--- its log (last lines) ---\n{log}", pytrace=False)
            time.sleep(0.2)
        self.matched = end

    def stop(self, where: str) -> None:
        """Ctrl-C, as the pages say: the operator must exit cleanly."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGINT)
        try:
            code = self.process.wait(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
            pytest.fail(f"{where}: `{self.command}` did not exit on Ctrl-C", pytrace=False)
        finally:
            self.log_file.close()
        assert code in (0, -signal.SIGINT), f"{where}: `{self.command}` exited with {code}:\n" + \
            "\n".join(self.lines()[-40:])


def run(step: Command, cwd: Path, env: dict[str, str]) -> None:
    deadline = time.monotonic() + (TIMEOUT if step.is_read else 0)
    while True:
        # (stderr with stdout, interleaved as a terminal shows them)
        result = subprocess.run(["bash", "-o", "pipefail", "-c", step.command], cwd=cwd, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=TIMEOUT,
                                check=False)
        printed = result.stdout.splitlines()
        if result.returncode == 0 and (not step.expected or matches(step.expected, printed)):
            return
        if time.monotonic() >= deadline:
            pytest.fail(f"{step.block.where}: `{step.command}` exited with {result.returncode} and printed:\n" +
                        "\n".join(printed) + "\n--- the page says ---\n" + "\n".join(step.expected), pytrace=False)
        time.sleep(0.5)


def clean(env: dict[str, str]) -> None:
    """What the page left of the examples' objects in ``default``: no operator to release them now."""
    names = subprocess.run(["kubectl", "get", "greetings", "-n", "default", "-o", "name"], env=env,
                           capture_output=True, text=True, check=False).stdout.split()
    for name in names:
        subprocess.run(["kubectl", "patch", "-n", "default", name, "--type=merge", "-p",
                        '{"metadata": {"finalizers": null}}'], env=env, capture_output=True, check=False)
    if names:
        subprocess.run(["kubectl", "delete", "-n", "default", *names, "--ignore-not-found", "--wait=false"],
                       env=env, capture_output=True, check=False)
    # Their Events outlive them (an hour): a reader's next try would see the old ones too.
    subprocess.run(["kubectl", "delete", "events", "-n", "default", "--field-selector", "involvedObject.kind=Greeting"],
                   env=env, capture_output=True, check=False)


@pytest.fixture
def shell(cluster: dict[str, str], tmp_path: Path) -> Iterator[dict[str, str]]:
    """The reader's shell: the cluster's kubeconfig, our `kopf` first on the PATH; the repository's
    examples/ beside the page's files (pages name them as in a clone of the repository)."""
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    tools = [Path(sys.executable).parent]
    if os.environ.get("KOPF_RS_HELM"):  # (built by checks/run; a reader installs helm as they like)
        tools.append(Path(os.environ["KOPF_RS_HELM"]).parent)
    env = {**os.environ, "PATH": os.pathsep.join([*map(str, tools), os.environ['PATH']]), "PYTHONUNBUFFERED": "1"}
    clean(env)  # (what an interrupted run left)
    yield env
    clean(env)


@pytest.mark.parametrize("page", runnable_pages(), ids=lambda page: page.relative_to(DOCS).as_posix())
def test_a_page_as_its_reader_follows_it(page: Path, shell: dict[str, str], tmp_path: Path) -> None:
    operator: Operator | None = None
    try:
        for step in steps(page):
            if isinstance(step, File):
                (tmp_path / step.path).parent.mkdir(parents=True, exist_ok=True)
                (tmp_path / step.path).write_text(step.block.text)
            elif isinstance(step, Command) and step.is_operator:
                if operator is not None:
                    operator.stop(step.block.where)
                operator = Operator(step.command, tmp_path, shell)
                operator.expect(step.expected, step.block.where)
            elif isinstance(step, Command):
                run(step, tmp_path, shell)
            elif isinstance(step, Log):
                assert operator is not None, f"{step.block.where}: an operator's log, but no `kopf run` before it"
                operator.expect(step.expected, step.block.where)
        if operator is not None:
            operator.stop(f"docs/{page.relative_to(DOCS)}")
            operator = None
    finally:
        if operator is not None and operator.process.poll() is None:
            os.killpg(operator.process.pid, signal.SIGKILL)
            operator.process.wait()
