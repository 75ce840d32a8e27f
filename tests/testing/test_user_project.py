"""A user's project outside the repository, as a user of the wheel has it: an operator file, a
test file that uses only the pytest plugin's fixtures (`kopf_cluster`, `kopf_namespace`) and
`KopfRunner`, and a `pytest.ini` naming the CRD. Its tests start a control plane of their own
(no KUBECONFIG given, none needed) and pass."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

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
