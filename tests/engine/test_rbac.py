"""`kopf rbac generate`, `verify` and `record` on the real control plane: the generated account
runs the operator, its handlers' children included (their requests read from the handlers'
code, or declared); without one of its rules, `verify` names it, so does the operator's error,
and so does a recording of the run, which also names what the account has and did not use."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml
from support.cluster import EXAMPLES, kubectl
from support.operators import OperatorProcess, account_kubeconfig, eventually, refused, write_script

CHILDREN = EXAMPLES / "children" / "operator.py"

HANDLERS = """
    import kopf

    @kopf.on.create('greetings')
    def create_fn(spec, **_):
        return {'greeted': spec.get('who')}

    @kopf.on.event('greetings')
    def seen(name, logger, **_):
        logger.info(f"seen {name}")

    @kopf.timer('greetings', interval=0.5)
    def tick(patch, **_):
        patch.status['ticked'] = True

    @kopf.index('greetings')
    def by_name(name, **_):
        return {name: True}
"""


def rbac(*args: str, kubeconfig: Path | None = None) -> subprocess.CompletedProcess[str]:
    kopf = Path(sys.executable).with_name("kopf")
    env = {**os.environ, "KUBECONFIG": str(kubeconfig)} if kubeconfig is not None else None
    return subprocess.run([str(kopf), "rbac", *args], capture_output=True, text=True, check=False,
                          timeout=60, env=env)


def greeting(name: str, namespace: str) -> str:
    return json.dumps({"apiVersion": "demo.kopf.dev/v1", "kind": "Greeting",
                       "metadata": {"name": name, "namespace": namespace}, "spec": {"who": name}})


def test_generated_rules_run_the_operator_and_a_missing_one_is_named(
        crd: None, namespace: str, tmp_path: Path) -> None:
    script = write_script(tmp_path, HANDLERS)
    account = f"op-{namespace}"
    options = ["-n", namespace, "--name", account, "--standalone", str(script)]
    generated = rbac("generate", *options)
    assert generated.returncode == 0, generated.stderr
    documents = [d for d in yaml.safe_load_all(generated.stdout) if d]
    kinds = [d["kind"] for d in documents]
    assert kinds == ["ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"], kinds
    role = next(d for d in documents if d["kind"] == "Role")
    rules = {(r["apiGroups"][0], r["resources"][0]): r["verbs"] for r in role["rules"]}
    assert rules == {("demo.kopf.dev", "greetings"): ["list", "patch", "watch"],
                     ("demo.kopf.dev", "greetings/status"): ["patch"],
                     ("", "events"): ["create"]}
    cluster_role = next(d for d in documents if d["kind"] == "ClusterRole")
    assert [(r["resources"], r["verbs"]) for r in cluster_role["rules"]] == \
        [(["customresourcedefinitions"], ["list", "watch"])]
    assert "# list, watch: index 'by_name' (the watch-stream)" in generated.stdout
    assert "# patch: timer 'tick' (results and patches of status)" in generated.stdout

    kubectl("apply", "-f", "-", input=generated.stdout)
    try:
        kubeconfig = account_kubeconfig(account, tmp_path, namespace)
        verified = rbac("verify", *options, kubeconfig=kubeconfig)
        assert verified.returncode == 0, verified.stdout + verified.stderr
        assert "All the permissions that the handlers need are granted." in verified.stdout

        operator = OperatorProcess(["run", "-n", namespace, "--standalone", str(script)], cwd=tmp_path,
                                   env={"KUBECONFIG": str(kubeconfig)})
        try:
            kubectl("create", "-f", "-", input=greeting("r1", namespace))
            operator.wait_for(r"Handler 'create_fn' succeeded")
            operator.wait_for(r"Timer 'tick' succeeded", count=2)
            operator.wait_for(r"seen r1")
        finally:
            assert operator.stop() == 0
        assert not refused(operator.output), operator.output
        status = json.loads(kubectl("get", "greeting", "r1", "-n", namespace, "-o", "json"))["status"]
        assert status["create_fn"] == {"greeted": "r1"} and status["ticked"] is True

        # Without the patching of the objects: verify names the rule and who needs it.
        trimmed: dict[str, Any] = {**role, "rules": [r if r["resources"] != ["greetings"] else
                                                     {**r, "verbs": ["list", "watch"]} for r in role["rules"]]}
        kubectl("apply", "-f", "-", input=json.dumps(trimmed))
        verified = rbac("verify", *options, kubeconfig=kubeconfig)
        assert verified.returncode == 1, verified.stdout + verified.stderr
        missing = [line for line in verified.stdout.splitlines() if line.startswith("Missing: ")]
        assert missing == [f"Missing: patch greetings (demo.kopf.dev) in the namespace {namespace!r}: needed by "
                           "handler 'create_fn' (finalizers, progress, results, its patches); "
                           "on.event handler 'seen' (finalizers, progress, results, its patches); "
                           "timer 'tick' (finalizers, progress, results, its patches)"], verified.stdout

        # ... and so does the operator's error (the API server's words, with the request).
        operator = OperatorProcess(["run", "-n", namespace, "--standalone", str(script)], cwd=tmp_path,
                                   env={"KUBECONFIG": str(kubeconfig)})
        try:
            kubectl("create", "-f", "-", input=greeting("r2", namespace))
            operator.wait_for(r'PATCH \S+/greetings/r2 -> .*cannot patch resource \\?"greetings\\?" '
                              r'in API group \\?"demo.kopf.dev\\?" in the namespace', timeout=60)
        finally:
            operator.stop()
    finally:
        kubectl("delete", "clusterrole,clusterrolebinding", account, "--ignore-not-found")


def test_the_operating_example_gets_its_rules(crd: None) -> None:
    example = Path(__file__).parents[2] / "examples" / "operating" / "operator.py"
    generated = rbac("generate", "-A", "--name", "greeter", "--standalone", str(example))
    assert generated.returncode == 0, generated.stderr
    documents = [d for d in yaml.safe_load_all(generated.stdout) if d]
    assert [d["kind"] for d in documents] == ["ServiceAccount", "ClusterRole", "ClusterRoleBinding"]
    assert documents[0]["metadata"] == {"name": "greeter", "namespace": "default"}
    rules = {(r["apiGroups"][0], r["resources"][0]): r["verbs"] for r in documents[1]["rules"]}
    assert rules[("demo.kopf.dev", "greetings")] == ["list", "patch", "watch"]
    assert rules[("", "events")] == ["create"]
    for handler in ("handler 'greet'", "handler 'regreet/spec.who'", "timer 'remind'"):
        assert f"# list, watch: {handler} (the watch-stream)" in generated.stdout, generated.stdout


def test_strict_fails_while_a_warning_stands(crd: None, tmp_path: Path) -> None:
    script = write_script(tmp_path, """
        import kopf
        import kubernetes

        @kopf.on.create('greetings')
        def create_fn(spec, namespace, **_):
            api = kubernetes.client.CoreV1Api()
            getattr(api, f"read_namespaced_{spec['kind']}")('x', namespace)
    """)
    lenient = rbac("generate", "-A", "--standalone", str(script))
    strict = rbac("generate", "-A", "--standalone", "--strict", str(script))
    assert lenient.returncode == 0, lenient.stderr
    assert strict.returncode == 1, strict.stderr
    assert strict.stdout == lenient.stdout  # (the rules are printed all the same)
    assert "Warning: handlers.py:8 (in create_fn): a method of a client chosen at run time" in strict.stderr
    assert "Error: 1 warning(s) with --strict" in strict.stderr
    verified = rbac("verify", "-A", "--standalone", "--strict", str(script))  # (the admin has it all)
    assert verified.returncode == 1, verified.stdout + verified.stderr
    assert "All the permissions that the handlers need are granted." in verified.stdout


def config_map(name: str, namespace: str) -> dict[str, Any] | None:
    found = kubectl("get", "configmap", name, "-n", namespace, "-o", "json", "--ignore-not-found")
    return json.loads(found) if found.strip() else None


def test_an_operator_with_children_runs_under_its_generated_rules(crd: None, namespace: str, tmp_path: Path) -> None:
    account = f"lantern-{namespace}"
    options = ["-n", namespace, "--name", account, "--standalone", str(CHILDREN)]
    generated = rbac("generate", *options)
    assert generated.returncode == 0, generated.stderr
    assert "Warning:" not in generated.stderr, generated.stderr  # (the hidden request is declared)
    role = next(d for d in yaml.safe_load_all(generated.stdout) if d and d["kind"] == "Role")
    rules = {(r["apiGroups"][0], r["resources"][0]): r["verbs"] for r in role["rules"]}
    assert rules[("", "configmaps")] == ["create", "patch"]
    assert rules[("", "secrets")] == ["get"]
    assert "# create: CoreV1Api.create_namespaced_config_map at examples/children/operator.py:31, " \
           "from handler 'light'" in generated.stdout, generated.stdout
    assert "# get: kopf.rbac.needs(any_name='secrets', verbs=['get']) at examples/children/operator.py:44 " \
           "for handler 'light'" in generated.stdout, generated.stdout

    kubectl("apply", "-f", "-", input=generated.stdout)
    kubeconfig = account_kubeconfig(account, tmp_path, namespace)
    verified = rbac("verify", *options, kubeconfig=kubeconfig)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    kubectl("create", "secret", "generic", "greeters-signature", "-n", namespace)
    kubectl("label", "secret", "greeters-signature", "-n", namespace, "by=the-lanterns")
    operator = OperatorProcess(["run", "-n", namespace, "--standalone", str(CHILDREN)], cwd=tmp_path,
                               env={"KUBECONFIG": str(kubeconfig)})
    try:
        kubectl("create", "-f", "-", input=greeting("l1", namespace))
        operator.wait_for(r"Handler 'light' succeeded")
        glow = eventually(lambda: config_map("l1-glow", namespace), what="the child ConfigMap")
        assert glow["data"] == {"message": "Hello, l1! -- the-lanterns"}
        kubectl("patch", "greeting", "l1", "-n", namespace, "--type=merge", "-p", '{"spec": {"who": "again"}}')
        operator.wait_for(r"Handler 'relight/spec.who' succeeded")
        assert config_map("l1-glow", namespace)["data"] == {"message": "Hello again, again!"}  # type: ignore[index]
    finally:
        assert operator.stop() == 0
    assert not refused(operator.output), operator.output


def test_a_recording_names_the_refused_requests_and_the_unused_rules(crd: None, namespace: str,
                                                                    tmp_path: Path) -> None:
    account = f"lantern-{namespace}"
    generated = rbac("generate", "-n", namespace, "--name", account, "--standalone", str(CHILDREN))
    assert generated.returncode == 0, generated.stderr
    # The account without the children's creation: the run needs it, the API server refuses it.
    documents = [d for d in yaml.safe_load_all(generated.stdout) if d]
    for document in documents:
        if document["kind"] == "Role":
            document["rules"] = [{**r, "verbs": [v for v in r["verbs"] if v != "create"]}
                                 if r["resources"] == ["configmaps"] else r for r in document["rules"]]
    trimmed = tmp_path / "rbac.yaml"
    trimmed.write_text(yaml.safe_dump_all(documents))
    # `verify` finds it missing in the file too, without a cluster's account.
    verified = rbac("verify", "-n", namespace, "--standalone", "--rbac", str(trimmed), str(CHILDREN))
    assert verified.returncode == 1, verified.stdout + verified.stderr
    assert verified.stdout.splitlines() == [
        f"Missing in {trimmed}: create configmaps (core) in the namespace {namespace!r}: needed by "
        f"CoreV1Api.create_namespaced_config_map at examples/children/operator.py:31, from handler 'light'"]
    kubectl("apply", "-f", str(trimmed))
    kubeconfig = account_kubeconfig(account, tmp_path, namespace)
    recorded = tmp_path / "recorded.yaml"
    kopf = str(Path(sys.executable).with_name("kopf"))
    recording = OperatorProcess(["rbac", "record", "--rbac", str(trimmed), "--output", str(recorded),
                                 "--name", account, "--", kopf, "run", "-n", namespace, "--standalone",
                                 str(CHILDREN)], cwd=tmp_path, env={"KUBECONFIG": str(kubeconfig)})
    try:
        kubectl("create", "-f", "-", input=greeting("l2", namespace))
        recording.wait_for(r"Handler 'light' failed")
        recording.wait_for(r"403")
    finally:
        assert recording.stop() == 1  # the operator stopped cleanly; the recording found refusals
    lines = [line for line in recording.output.splitlines()
             if line.startswith(("Refused", "Not granted", "Granted by"))]
    assert f"Refused (403): create configmaps (core) in the namespace {namespace!r}: " \
           f"OpenAPI-Generator/37.0.2/python: " in "\n".join(lines), recording.output[-3000:]
    assert any(line.startswith(f"Not granted by {trimmed}: create configmaps (core) in the namespace "
                               f"{namespace!r}") for line in lines), lines
    # The update handler never ran: its patch of the children is granted and was not used.
    assert f"Granted by {trimmed}, not used in this run: patch configmaps (core) in the namespace " \
           f"{namespace!r} (Role {namespace}/{account})" in lines, lines
    # What the run needed, as rules: the engine's requests and the handler's, each with its client.
    rules = {(d["kind"], r["resources"][0]): r["verbs"] for d in yaml.safe_load_all(recorded.read_text())
             if d and d["kind"] in ("Role", "ClusterRole") for r in d["rules"]}
    assert rules[("Role", "configmaps")] == ["create"]
    assert rules[("Role", "greetings")] == ["list", "patch", "watch"]
    assert rules[("Role", "secrets")] == ["get"]
    assert rules[("ClusterRole", "customresourcedefinitions")] == ["list", "watch"]
    assert "kopf-rs/" in recorded.read_text() and "OpenAPI-Generator/" in recorded.read_text()


# The shapes of real operators that the generator once missed (issue 87): a client kept as a
# class attribute by a classmethod at startup and used from another function; a cached client
# factory; functions handed to a thread and to an executor; a namespace from the object's spec;
# an object that keeps the namespace its constructor was given.
SHAPES = """
    import asyncio
    import concurrent.futures
    import functools

    import kopf
    import kubernetes

    EXECUTOR = concurrent.futures.ThreadPoolExecutor(max_workers=2)


    class Operator:
        core = None

        @classmethod
        async def setup(cls):
            kubernetes.config.load_kube_config()
            cls.core = kubernetes.client.CoreV1Api()


    @functools.lru_cache
    def apps():
        return kubernetes.client.AppsV1Api()


    class Marker:
        def __init__(self, namespace):
            self.namespace = namespace

        def mark(self, name):
            body = {'metadata': {'name': f'{name}-mark'}, 'data': {'by': 'marker'}}
            Operator.core.create_namespaced_config_map(self.namespace, body)


    def copy_to(target, name, data):
        body = {'metadata': {'name': f'{name}-copy'}, 'data': data}
        Operator.core.create_namespaced_config_map(target, body)


    def deployments(namespace):
        return [d.metadata.name for d in apps().list_namespaced_deployment(namespace).items]


    @kopf.on.startup()
    async def start(**_):
        await Operator.setup()


    @kopf.on.create('greetings')
    async def create_fn(name, namespace, spec, **_):
        await asyncio.to_thread(copy_to, spec['target'], name, {'who': spec.get('who', '')})
        found = await asyncio.get_running_loop().run_in_executor(EXECUTOR, deployments, namespace)
        Marker(namespace).mark(name)
        return {'deployments': len(found)}
"""


def test_real_operators_shapes_run_under_their_generated_rules(crd: None, namespace: str, tmp_path: Path) -> None:
    target = f"{namespace}-target"
    kubectl("create", "namespace", target)
    try:
        script = write_script(tmp_path, SHAPES)
        account = f"shapes-{namespace}"
        options = ["-n", namespace, "--name", account, "--standalone", str(script)]
        generated = rbac("generate", *options)
        assert generated.returncode == 0, generated.stderr
        # The namespace from the spec is granted everywhere, and said; nothing else is unknown.
        warnings = [line for line in generated.stderr.splitlines() if line.startswith("Warning:")]
        assert len(warnings) == 1 and "handlers.py:37 (in copy_to)" in warnings[0] and \
            "is read from the object's data: granted in every namespace" in warnings[0], generated.stderr
        kubectl("apply", "-f", "-", input=generated.stdout)
        kubeconfig = account_kubeconfig(account, tmp_path, namespace)
        operator = OperatorProcess(["run", "-n", namespace, "--standalone", str(script)], cwd=tmp_path,
                                   env={"KUBECONFIG": str(kubeconfig)})
        try:
            body = json.loads(greeting("s1", namespace))
            body["spec"]["target"] = target
            kubectl("create", "-f", "-", input=json.dumps(body))
            operator.wait_for(r"Handler 'create_fn' succeeded")
        finally:
            assert operator.stop() == 0
        assert not refused(operator.output), operator.output
        assert config_map("s1-copy", target)["data"] == {"who": "s1"}  # type: ignore[index]
        assert config_map("s1-mark", namespace)["data"] == {"by": "marker"}  # type: ignore[index]
    finally:
        kubectl("delete", "namespace", target, "--wait=false", check=False)
        kubectl("delete", "clusterrole,clusterrolebinding", f"shapes-{namespace}", "--ignore-not-found", check=False)
