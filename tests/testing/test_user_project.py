"""A user's project outside the repository, as a user of the wheel has it: an operator file, a
test file that uses only the pytest plugin's fixtures (`kopf_cluster`, `kopf_namespace`) and
`KopfRunner`, and a `pytest.ini` naming the CRD. Its tests start a control plane of their own
(no KUBECONFIG given, none needed) and pass; a test whose namespace stays empty passes too; a
session ended by SIGTERM leaves no control plane behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from kopf._operating.cluster import processes

ROOT = Path(__file__).parents[2]

OPERATOR = """
    import kopf

    @kopf.on.create('demo.kopf.dev', 'greetings')
    def greet(spec, **_):
        return {'message': f"Hello, {spec.get('who', 'world')}!"}
"""

TEST = """
    import json
    import time

    from kopf.testing import KopfRunner


    def test_a_greeting_is_answered(kopf_cluster, kopf_namespace):
        args = ['run', '--namespace', kopf_namespace, '--standalone', 'greeter.py']
        with KopfRunner(args) as runner:
            greeting = {'apiVersion': 'demo.kopf.dev/v1', 'kind': 'Greeting',
                        'metadata': {'name': 'hello'}, 'spec': {'who': 'Ada'}}
            kopf_cluster.kubectl('apply', '-n', kopf_namespace, '-f', '-', input=json.dumps(greeting))
            status = {}
            for _ in range(300):
                got = kopf_cluster.kubectl('get', 'greeting', 'hello', '-n', kopf_namespace, '-o', 'json')
                status = json.loads(got).get('status', {})
                if status:
                    break
                time.sleep(0.1)
        assert runner.exit_code == 0
        assert status == {'greet': {'message': 'Hello, Ada!'}}
"""


def test_a_users_project_tests_its_operator_on_a_control_plane_of_its_own(tmp_path: Path) -> None:
    (tmp_path / "crd.yaml").write_text((ROOT / "examples" / "crd.yaml").read_text())
    (tmp_path / "greeter.py").write_text(textwrap.dedent(OPERATOR))
    (tmp_path / "test_greeter.py").write_text(textwrap.dedent(TEST))
    (tmp_path / "pytest.ini").write_text("[pytest]\nkopf_crds = crd.yaml\n")
    env = {name: value for name, value in os.environ.items() if name not in ("KUBECONFIG", "PYTHONPATH")}
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"], cwd=tmp_path,
                            env=env, capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 passed" in result.stdout


WAITING = """
    import os
    import time


    def test_a_long_one(kopf_cluster, kopf_namespace):
        with open(os.environ['STARTED'], 'w') as file:
            file.write(f"{kopf_cluster.plane.port} {kopf_cluster.home}")
        time.sleep(120)


    def test_an_empty_namespace(kopf_namespace):
        pass
"""


def test_a_session_ended_by_sigterm_stops_its_control_plane(tmp_path: Path) -> None:
    """What a CI job's timeout sends: the fixtures are torn down as after Ctrl-C; the control
    plane's programs end and free their ports (and would even if pytest were killed)."""
    (tmp_path / "test_waiting.py").write_text(textwrap.dedent(WAITING))
    started = tmp_path / "started"
    env = {name: value for name, value in os.environ.items() if name not in ("KUBECONFIG", "PYTHONPATH")}
    session = subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", "long"],
                               cwd=tmp_path, env={**env, "STARTED": str(started)}, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 120
        while not started.exists() and session.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert started.exists(), session.communicate(timeout=10)[0]
        port_text, home = started.read_text().split(" ", 1)
        port = int(port_text)
        assert not processes.is_free(port)
        pids = [int(path.read_text()) for path in (Path(home) / "pids").glob("*.pid")]
        assert len(pids) == 2, "not etcd and kube-apiserver"
        session.send_signal(signal.SIGTERM)
        output = session.communicate(timeout=60)[0]
    finally:
        if session.poll() is None:
            session.kill()
    assert "KeyboardInterrupt" in output, output
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not all(processes.exited(pid) for pid in pids):
        time.sleep(0.1)
    assert all(processes.exited(pid) for pid in pids), output
    assert all(processes.is_free(port + offset) for offset in (-2, -1, 0)), output
    assert not Path(home).exists(), "the state folder is left"


def test_a_test_whose_namespace_stays_empty_passes(tmp_path: Path) -> None:
    (tmp_path / "test_waiting.py").write_text(textwrap.dedent(WAITING))
    env = {name: value for name, value in os.environ.items() if name not in ("KUBECONFIG", "PYTHONPATH")}
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", "empty"],
                            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 passed" in result.stdout and "error" not in result.stdout.lower()
