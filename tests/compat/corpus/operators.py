"""The corpus' operators: where each comes from, how it is started, which client it logs in
with, and its scenario (what its documentation says a user does with it)."""

from __future__ import annotations

import base64
import dataclasses
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from support import kwok

from . import environments
from .recording import Recording, Session, record, served

PEERING_CRDS = Path(__file__).parents[2].parent / "examples" / "peering.yaml"
CRDS = Path(__file__).parent / "crds"  # stand-ins for other projects' CRDs that an operator writes
VENDORED = Path(__file__).parent / "vendored"  # operators published as repositories only, unchanged


@dataclasses.dataclass(frozen=True)
class Operator:
    name: str  # also its requirements file: requirements/<name>.txt
    what: str
    client: str  # the client library Kopf's fallback login uses, by Kopf's precedence
    # Where its code, CRDs and examples come from: a PyPI source distribution ("name==version"),
    # or, for one published as a repository only, its files in vendored/<name> (with SOURCE.md);
    # None for one published as a wheel alone (its requirements install it).
    sdist: str | None
    crds: tuple[str, ...]  # paths in its source, applied once for both runs
    command: tuple[str, ...]  # {bin}: the virtualenv's scripts, {namespace}: the run's namespace
    resources: tuple[str, ...]  # what is snapshotted after each step
    scenario: Callable[[Session], None]
    ready: str = "Initial authentication has finished"
    peering: str | None = None  # a KopfPeering to make in the run's namespace
    stop_signal: signal.Signals = signal.SIGTERM  # how a run ends: as Kubernetes, or Ctrl-C (SIGINT)
    # A name for an object whose own name is generated, the same in both runs; None: its own.
    alias: Callable[[dict[str, Any]], str | None] = lambda item: None
    foreign_crds: tuple[str, ...] = ()  # stand-ins in crds/ for CRDs it uses but does not ship
    pod: bool = False  # run as in a pod: a service account's token, no kubeconfig (recording.in_cluster)
    # Kopf's own failure with it (a pattern of Kopf's output, and why): its runs are not compared.
    kopf_bug: tuple[str, str] | None = None
    setup: Callable[[str], dict[str, str]] | None = None  # its surroundings, made anew for each run: its env
    namespaces: tuple[str, ...] = ()  # more namespaces of each run, `<namespace>-<suffix>` (recording.record)
    unmarked: tuple[str, ...] = ()  # cluster-scoped resources it handles everywhere (recording.record)
    # `kopf rbac generate`'s arguments for its handlers, as it is run ({namespace}, {source}): our
    # runs are under exactly the RBAC they give (with rbac/<name>.py's declarations, if any).
    rbac: tuple[str, ...] = ()

    def source(self) -> Path | None:
        """Its source distribution from PyPI, unpacked, or its vendored files: its CRDs and
        examples; None for one published as a wheel alone (its wheel is in its virtualenvs)."""
        if self.sdist:
            return environments.sdist(self.sdist)
        return VENDORED / self.name if (VENDORED / self.name).is_dir() else None

    def record(self, engine: str, venv: Path, source: Path | None) -> Recording:
        """One run of its scenario on `engine`, in namespaces of its own."""
        return record(engine=engine, venv=venv, command=list(self.command), namespace=f"corpus-{self.name}-{engine}",
                      source=source, resources=self.resources, scenario=self.scenario, ready=self.ready,
                      alias=self.alias, peering=self.peering, stop_signal=self.stop_signal, pod=self.pod,
                      setup=self.setup, namespaces=self.namespaces, unmarked=self.unmarked,
                      rbac=self.rbac if engine == "ours" else None, operator=self.name)

    def install_crds(self, source: Path | None) -> None:
        names: list[str] = []
        own = [source / path for path in self.crds] if source is not None else []
        for path in [*own, *(CRDS / path for path in self.foreign_crds)]:
            applied = subprocess.run(["kubectl", "apply", "-o", "name", "-f", str(path)],
                                     check=True, capture_output=True, text=True)
            names += [line.rpartition("/")[2] for line in applied.stdout.split()]
        if self.peering:
            applied = subprocess.run(["kubectl", "apply", "-o", "name", "-f", str(PEERING_CRDS)],
                                     check=True, capture_output=True, text=True)
            names += [line.rpartition("/")[2] for line in applied.stdout.split()]
        # Only its own CRDs: other tests make and delete theirs meanwhile (some never established).
        if names:
            established(names)
        for name in names:
            served(name)


def established(names: list[str]) -> None:
    """Wait until the CRDs are established. A plane busy beside a build (CI) once took more than
    60 s for four large ones; when it gives up, it says which CRD is not and its conditions."""
    waited = subprocess.run(["kubectl", "wait", "--for=condition=Established", "--timeout=180s",
                             *(f"crd/{name}" for name in names)], capture_output=True, text=True)
    if waited.returncode != 0:
        conditions = subprocess.run(
            ["kubectl", "get", "crd", *names, "-o",
             r'jsonpath={range .items[*]}{.metadata.name}: {.status.conditions}{"\n"}{end}'],
            capture_output=True, text=True)
        raise AssertionError(f"CRDs not established in 180 s: {waited.stderr.strip()}\n"
                             f"{conditions.stdout}{conditions.stderr}")


# -- fastflow: a workflow engine; Workflows make Tasks (children) and run them in-process ----


def fastflow_scenario(s: Session) -> None:
    assert s.source is not None
    # The example names itself by generateName: a fixed name makes the two runs comparable.
    manifest = (s.source / "examples" / "02-digraph" / "workflow.yaml").read_text()
    s.apply(manifest.replace("generateName: digraph", "name: digraph"))
    s.wait("the workflow completes",
           lambda: (s.get("workflows.fastflow.dev", "digraph") or {})["status"]["workflow_status"] == "complete")
    s.snapshot("completion")
    s.kubectl("delete", "workflows.fastflow.dev", "digraph", "--wait=false")
    s.wait("the workflow is gone", lambda: s.get("workflows.fastflow.dev", "digraph") is None)
    s.wait("its tasks are gone", lambda: not json.loads(s.kubectl("get", "tasks.fastflow.dev", "-o", "json"))["items"])
    s.snapshot("deletion")


def fastflow_alias(item: dict[str, Any]) -> str | None:
    """Tasks are named by generateName: the task's name in the DAG is in a label."""
    metadata = item["metadata"]
    local = metadata.get("labels", {}).get("task_local_name")
    return f"{metadata['generateName']}{local}" if local and metadata.get("generateName") else None


def _fastflow(name: str, client: str, stop_signal: signal.Signals = signal.SIGTERM) -> Operator:
    return Operator(
        name=name, client=client,
        what="fastflow 0.8.1: a workflow engine; a Workflow's DAG becomes Task children, run in-process; "
             "embeds kopf.operator() in a thread of its own click CLI; mandatory peering",
        sdist="python-fastflow==0.8.1",
        crds=("chart/crds/generated/Task.yaml", "chart/crds/generated/Workflow.yaml"),
        command=("{bin}/fastflow", "--namespace", "{namespace}", "--dev"),  # as its README runs it
        resources=("workflows.fastflow.dev", "tasks.fastflow.dev"),
        scenario=fastflow_scenario,
        peering="default",
        alias=fastflow_alias,
        stop_signal=stop_signal,
        rbac=("-m", "fastflow", "-n", "{namespace}", "-P", "default"),
    )


# -- dask-kubernetes: Dask clusters; a DaskCluster makes a scheduler and worker groups --------


DASK = "kubernetes.dask.org"


def dask_workers(s: Session) -> list[dict[str, Any]]:
    return json.loads(s.kubectl("get", "deployments", "-l", "dask.org/component=worker", "-o", "json"))["items"]


def dask_scenario(s: Session) -> None:
    assert s.source is not None
    s.apply(s.source / "dask_kubernetes" / "operator" / "controller" / "tests" / "resources" / "simplecluster.yaml")
    # Its phase is written by two handlers at once (the cluster's own, "Pending", and the
    # scheduler Service's, "Running", through kr8s): the last write wins, on either engine.
    s.wait("the scheduler's service is handled", lambda: s.logged("Handler 'handle_scheduler_service_status"))
    s.wait("its two workers exist", lambda: len(dask_workers(s)) == 2)
    s.snapshot("creation")
    s.kubectl("patch", f"daskclusters.{DASK}", "simple", "--type=merge", "-p", '{"spec":{"worker":{"replicas":3}}}')
    s.wait("a third worker exists", lambda: len(dask_workers(s)) == 3)
    s.snapshot("scaling up")
    s.kubectl("delete", f"daskclusters.{DASK}", "simple", "--wait=false")
    s.wait("the cluster is gone", lambda: s.get(f"daskclusters.{DASK}", "simple") is None)
    s.wait("its children are gone", lambda: not dask_workers(s) and s.get("services", "simple-scheduler") is None)
    s.snapshot("deletion")
    dask_job_scenario(s)


def dask_job_status(s: Session) -> str | None:
    job = s.get(f"daskjobs.{DASK}", "simple-job")
    return job.get("status", {}).get("jobStatus") if job else None


def dask_job_scenario(s: Session) -> None:
    """A DaskJob: a cluster and a runner pod; the pod's phase (kwok runs it) drives the job's
    status through `on.field` handlers on pods, and its end deletes the cluster."""
    assert s.source is not None
    s.apply(s.source / "dask_kubernetes" / "operator" / "controller" / "tests" / "resources" / "simplejob.yaml")
    s.wait("the job's runner pod runs", lambda: dask_job_status(s) == "Running")
    s.wait("its cluster's two workers exist", lambda: len(dask_workers(s)) == 2)
    s.snapshot("job running")
    s.kubectl("annotate", "pod", "simple-job-runner", f"{kwok.EXIT_CODE}=0")
    s.wait("the job succeeded", lambda: dask_job_status(s) == "Successful")
    s.wait("its cluster is gone", lambda: s.get(f"daskclusters.{DASK}", "simple-job") is None)
    s.wait("the cluster's children are gone", lambda: not dask_workers(s))
    s.snapshot("job done")


def dask_alias(item: dict[str, Any]) -> str | None:
    """Workers are named by a random uuid; all of a group's workers are alike: numbered."""
    labels = item["metadata"].get("labels", {})
    if labels.get("dask.org/component") == "worker" and "dask.org/workergroup-name" in labels:
        return f"{labels['dask.org/workergroup-name']}-worker-{{n}}"
    return None


# -- baler-operator: Haystack NLP pipelines as a ConfigMap, a Deployment and a Service each ------


HAYSTACK = """
apiVersion: pipelines.baler.gatecastle.com/v1
kind: Haystack
metadata: {{name: qa}}
spec:
  version: "1.25"
  components:
    - {{name: Retriever, type: BM25Retriever, params: {{top_k: {top_k}}}}}
    - {{name: Reader, type: FARMReader, params: {{model_name_or_path: deepset/roberta-base-squad2}}}}
  pipelines:
    - name: query
      nodes:
        - {{name: Retriever, inputs: [Query]}}
        - {{name: Reader, inputs: [Retriever]}}
"""


def baler_scenario(s: Session) -> None:
    haystack = "haystack.pipelines.baler.gatecastle.com"
    s.apply(HAYSTACK.format(top_k=3))
    # Its pods never get ready here (no nodes): the pipeline stays Pending, polled by its timer.
    s.wait("the pipeline is commissioned", lambda: (s.get(haystack, "qa") or {})["status"]["phase"] == "Pending")
    s.wait("its deployment exists", lambda: bool(json.loads(s.kubectl("get", "deployments", "-o", "json"))["items"]))
    # The timer's first run (at once) finds no status yet; its second (5 s later) polls the children.
    # The update waits for it: an update in the middle of that poll (it re-creates the children)
    # would make what the poll finds depend on the moment, on either engine.
    s.wait("the timer polls the children", lambda: s.log_text().count("Timer 'poll_pipeline_stasus' succeeded") >= 2)
    s.snapshot("creation")
    s.apply(HAYSTACK.format(top_k=5))
    s.wait("the update is handled", lambda: s.logged("Updating is processed"))
    s.snapshot("update")
    s.kubectl("delete", haystack, "qa")
    s.wait("its children are gone",
           lambda: not json.loads(s.kubectl("get", "deployments,services,configmaps", "-l",
                                            "pipelines.baler.gatecastle.com/owned-by=qa", "-o", "json"))["items"])
    s.snapshot("deletion")


# -- citadel-operator: a namespace's infrastructure (network policies, quota, limits) from a CRD ---


def citadel_scenario(s: Session) -> None:
    assert s.source is not None
    # Its documentation's "Full Namespace with Peers" example, for the run's own namespace.
    document = (s.source / "docs" / "crds" / "namespaceinfrastructure.md").read_text()
    example = next(block for block in re.findall(r"```yaml\n(.*?)```", document, re.DOTALL)
                   if "name: team-alpha-infra" in block)
    example = example.replace("namespace: citadel-system", f"namespace: {s.namespace}")
    s.apply(example.replace("targetNamespace: team-alpha", f"targetNamespace: {s.namespace}"))
    infra = "namespaceinfrastructures.citadel.dev"
    s.wait("the infrastructure is active", lambda: (s.get(infra, "team-alpha-infra") or {})
           .get("status", {}).get("phase") == "Active")
    s.snapshot("creation")
    s.apply(example.replace("targetNamespace: team-alpha", f"targetNamespace: {s.namespace}")
            .replace('cpu: "8"', 'cpu: "4"'))
    s.wait("the update is handled", lambda: s.logged("Updating is processed"))
    s.snapshot("update")
    s.kubectl("delete", infra, "team-alpha-infra", "--timeout=60s")
    s.wait("its quota is gone", lambda: not json.loads(s.kubectl("get", "resourcequotas", "-o", "json"))["items"])
    s.snapshot("deletion")


# -- kube-mcp-operator: annotated Deployments get an MCP sidecar injected and a Service ------------


MCP_DEPLOYMENT = """
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {name}
  labels: {{app: {name}}}
  annotations: {{mcp-server: "true"}}
spec:
  selector: {{matchLabels: {{app: {name}}}}}
  template:
    metadata: {{labels: {{app: {name}}}}}
    spec:
      containers: [{{name: app, image: nginx:1.27, ports: [{{containerPort: 80}}]}}]
"""
MCP_CONFIG = """
apiVersion: mcp.mycompany.com/v1
kind: MCPConfig
metadata: {name: api}
spec: {selector: {app: api}}
"""


def mcp_scenario(s: Session) -> None:
    def injected(name: str) -> bool:
        deployment = s.get("deployments", name) or {}
        containers = deployment.get("spec", {}).get("template", {}).get("spec", {}).get("containers", [])
        return any(c["name"] == "mcp-sidecar" for c in containers) and s.get("services", f"{name}-mcp") is not None

    s.apply(MCP_DEPLOYMENT.format(name="web"))
    s.wait("the sidecar is injected into web", lambda: injected("web"))
    s.snapshot("creation")
    # An MCPConfig selects the annotated Deployments by label: the one it finds is handled.
    s.apply(MCP_DEPLOYMENT.format(name="api"))
    s.wait("the sidecar is injected into api", lambda: injected("api"))
    s.apply(MCP_CONFIG)
    s.wait("the MCPConfig is handled", lambda: s.logged("Handler 'mcpconfig_created' succeeded."))
    s.snapshot("config")
    s.kubectl("delete", "deployments", "web", "api", "--timeout=60s")
    s.kubectl("delete", "mcpconfigs.mcp.mycompany.com", "api", "--timeout=60s")
    s.snapshot("deletion")


# -- pass-operator: Secrets decrypted from a `pass` store (a git repository of GnuPG files) --------


PASS_HOME = Path(tempfile.gettempdir()) / "kopf-rs-corpus-pass"  # the same paths in both runs' logs
PASS_SECRET = """
apiVersion: secrets.premiscale.com/v1alpha1
kind: PassSecret
metadata: {{name: mypasssecret}}
spec:
  encryptedData: {{mykey: premiscale/mydata}}
  managedSecret:
    metadata: {{name: {secret}, namespace: {namespace}}}
    type: Opaque
    immutable: false
"""


def _run_with_gnupg(gnupg: Path, home: Path, *args: str, cwd: Path, input: str | None = None) -> str:
    result = subprocess.run(args, cwd=cwd, input=input, capture_output=True, text=True, check=False,
                            env={**os.environ, "GNUPGHOME": str(gnupg), "HOME": str(home)})
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} (GNUPGHOME={gnupg}) failed: {result.stderr.strip()}")
    return result.stdout


def _stop_gpg_agent(gnupg: Path) -> None:
    """A gpg-agent left by a run keeps its sockets in the GnuPG home: it goes with the home."""
    if gnupg.is_dir():
        subprocess.run(["gpgconf", "--homedir", str(gnupg), "--kill", "gpg-agent"], capture_output=True, check=False)


def _pass_template() -> Path:
    """What its container's entrypoint leaves (a GnuPG key, `pass init`'s .gpg-id) and a password
    store in a git repository with one encrypted entry: made once per session (a key takes the
    agent a while and the entropy), in a folder of its own, copied for each run."""
    template = PASS_HOME.with_name(PASS_HOME.name + "-template")
    if (template / "complete").exists():
        return template
    home, repo, gnupg = template / "home", template / "store.git", template / "home" / ".gnupg"
    errors = []
    for _ in range(3):  # a key's generation failed once in ~8 fresh homes: a new home and a new try
        _stop_gpg_agent(gnupg)
        shutil.rmtree(template, ignore_errors=True)
        gnupg.mkdir(parents=True, mode=0o700)
        try:
            # A passphrase as its deployments give one (PASS_GPG_PASSPHRASE): with its default, an
            # empty one, python-gnupg 0.5.7 sends no data to gpg and every entry decrypts to "".
            _run_with_gnupg(gnupg, home, "gpg", "--batch", "--pinentry-mode", "loopback", "--passphrase", "corpus",
                     "--quick-gen-key", "corpus <corpus@example.invalid>", "future-default", "default", "never",
                     cwd=template)
            break
        except RuntimeError as e:
            errors.append(str(e))
    else:
        raise RuntimeError("no GnuPG key for pass-operator:\n" + "\n".join(errors))
    key = _run_with_gnupg(gnupg, home, "gpg", "--list-keys", "--with-colons", cwd=template) \
        .split("fpr:::::::::")[1].split(":")[0]
    (repo / "premiscale").mkdir(parents=True)
    (repo / ".gpg-id").write_text(key + "\n")
    _run_with_gnupg(gnupg, home, "gpg", "--batch", "--yes", "--trust-model", "always", "--encrypt", "-r", key, "-o",
             str(repo / "premiscale" / "mydata.gpg"), input="hunter2\n", cwd=template)
    for args in (["init", "-q", "-b", "main"], ["add", "."],
                 ["-c", "user.name=corpus", "-c", "user.email=corpus@example.invalid", "commit", "-q", "-m", "store"]):
        _run_with_gnupg(gnupg, home, "git", *args, cwd=repo)
    (home / ".password-store").mkdir()
    (home / ".password-store" / ".gpg-id").write_text(key + "\n")  # as `pass init` leaves it
    _stop_gpg_agent(gnupg)
    (template / "key").write_text(key)
    (template / "complete").touch()
    return template


def pass_setup(namespace: str) -> dict[str, str]:
    """Its surroundings, the same for each run under the same paths (they are in its logs)."""
    template = _pass_template()
    _stop_gpg_agent(PASS_HOME / "home" / ".gnupg")
    shutil.rmtree(PASS_HOME, ignore_errors=True)
    shutil.copytree(template, PASS_HOME, symlinks=True,
                    ignore=shutil.ignore_patterns("S.*", "*.lock", "key", "complete"))  # no agent's sockets
    key = (template / "key").read_text()
    return {"HOME": str(PASS_HOME / "home"), "PASS_GIT_URL": str(PASS_HOME / "store.git"), "PASS_GPG_KEY_ID": key,
            "OPERATOR_NAMESPACE": namespace, "PASS_GPG_PASSPHRASE": "corpus", "OPERATOR_POD_IP": "127.0.0.1",
            "OPERATOR_INITIAL_DELAY": "600"}  # its timer does not run within the scenario


def pass_scenario(s: Session) -> None:
    s.apply(PASS_SECRET.format(secret="mysecret", namespace=s.namespace))
    s.wait("the secret is made", lambda: (s.get("secrets", "mysecret") or {}).get("data", {}).get("mykey")
           == base64.b64encode(b"hunter2").decode())
    s.snapshot("creation")
    s.apply(PASS_SECRET.format(secret="othersecret", namespace=s.namespace))  # renamed: moved
    s.wait("the secret is moved", lambda: s.get("secrets", "othersecret") is not None
           and s.get("secrets", "mysecret") is None)
    s.snapshot("update")
    s.kubectl("delete", "passsecrets.secrets.premiscale.com", "mypasssecret", "--timeout=60s")
    s.wait("the secret is gone", lambda: s.get("secrets", "othersecret") is None)
    s.snapshot("deletion")


# -- synator: Secrets and ConfigMaps copied into other namespaces; pods restarted on changes -------


SYNATOR_SECRET = """
apiVersion: v1
kind: Secret
metadata:
  name: creds
  annotations: {{synator/sync: "yes", synator/include-namespaces: "{ns}-a,{ns}-b,{ns}-c"}}
stringData: {{password: {password}}}
"""
SYNATOR_CONFIGMAP = """
apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
  annotations: {{synator/sync: "yes", synator/include-namespaces: "{ns}-a"}}
data: {{level: info}}
"""
SYNATOR_POD = """
apiVersion: v1
kind: Pod
metadata:
  name: reader
  annotations: {synator/reload: "secret:creds"}
spec:
  containers: [{name: busybox, image: busybox, command: [sleep, 1h]}]
"""


def synator_setup(namespace: str) -> dict[str, str]:
    # As its README describes: the namespaces it watches, comma-separated (the other tests' not).
    # Its image sets no PYTHONUNBUFFERED: its handlers' print()s, from threads, are buffered; unbuffered,
    # two of them at once would mix their lines, differently in every run.
    return {"WATCH_NAMESPACE": ",".join([namespace, *(f"{namespace}-{suffix}" for suffix in "abc")]),
            "PYTHONUNBUFFERED": ""}


def synator_scenario(s: Session) -> None:
    def password(namespace: str) -> str | None:
        data = (s.get("secrets", "creds", namespace=namespace) or {}).get("data", {})
        return base64.b64decode(data["password"]).decode() if "password" in data else None

    ns = s.namespace
    # At its start, every namespace of the cluster is new to it, and each one's handler copies the
    # synced secrets that exist by then: the scenario starts when that is over.
    s.wait("the existing namespaces are handled", lambda: s.settled("Handler 'newNamespace' succeeded", 3))
    s.apply(SYNATOR_SECRET.format(ns=ns, password="one"))
    s.apply(SYNATOR_CONFIGMAP.format(ns=ns))
    # Into the namespaces it names that exist (it warns about the one that does not).
    s.wait("the secret is copied", lambda: password(f"{ns}-a") == password(f"{ns}-b") == "one")
    s.wait("the config map is copied", lambda: s.get("configmaps", "settings", namespace=f"{ns}-a") is not None)
    s.snapshot("creation")
    s.create_namespace("c")  # a new namespace gets the secrets that name it
    s.wait("the secret is copied into a new namespace", lambda: password(f"{ns}-c") == "one")
    s.snapshot("new namespace")
    s.apply(SYNATOR_POD, namespace=f"{ns}-a")  # restarted (deleted) when its secret changes
    s.apply(SYNATOR_SECRET.format(ns=ns, password="two"))
    s.wait("the copies are updated", lambda: all(password(f"{ns}-{suffix}") == "two" for suffix in "abc"))
    s.wait("the pod is restarted", lambda: s.get("pods", "reader", namespace=f"{ns}-a") is None)
    s.snapshot("update")


# -- ClusterSecret: a cluster-scoped secret copied into the namespaces its patterns match ---------


CLUSTER_SECRET = """
apiVersion: clustersecret.io/v1
kind: ClusterSecret
metadata:
  name: {ns}-creds
  labels: {{somelabel: somevalue}}
  annotations: {{someannotation: somevalue}}
matchNamespace: {match}
data: {{tls.crt: MTIzNDU2Cg==, tls.key: {key}}}
"""


def clustersecret_scenario(s: Session) -> None:
    csec, ns = "clustersecrets.clustersecret.io", s.namespace

    def synced() -> list[str]:
        return (s.get(csec, f"{ns}-creds") or {}).get("status", {}).get("create_fn", {}).get("syncedns", [])

    def key(suffix: str) -> str | None:
        return (s.get("secrets", f"{ns}-creds", namespace=f"{ns}-{suffix}") or {}).get("data", {}).get("tls.key")

    # Its README's example, for the run's namespaces (without avoidNamespaces: with it, it lists
    # the namespaces in a set's order, which differs from process to process).
    s.apply(CLUSTER_SECRET.format(ns=ns, match=[f"{ns}-a", f"{ns}-c"], key="Nzg5MTAxMTIxMgo="))
    s.wait("it is copied into the namespace it matches", lambda: synced() == [f"{ns}-a"] and key("a") is not None)
    s.snapshot("creation")
    s.create_namespace("c")
    s.wait("it is copied into a new namespace", lambda: synced() == [f"{ns}-a", f"{ns}-c"] and key("c") is not None)
    s.snapshot("new namespace")
    s.apply(CLUSTER_SECRET.format(ns=ns, match=[f"{ns}-a", f"{ns}-c"], key="b3RoZXIK"))
    s.wait("its copies are updated", lambda: key("a") == key("c") == "b3RoZXIK")
    s.snapshot("data")
    s.apply(CLUSTER_SECRET.format(ns=ns, match=[f"{ns}-a", f"{ns}-b", f"{ns}-c"], key="b3RoZXIK"))
    s.wait("it is copied into a namespace it now matches", lambda: key("b") == "b3RoZXIK" and len(synced()) == 3)
    s.snapshot("match")
    s.kubectl("delete", csec, f"{ns}-creds", "--timeout=60s")
    s.wait("its copies are gone", lambda: not any(key(suffix) for suffix in "abc"))
    s.snapshot("deletion")


# -- devserver-operator: developer machines; a DevServer makes a StatefulSet, Services, ConfigMaps ---


def devserver_setup(namespace: str) -> dict[str, str]:
    # Its background expiry check runs at start, then every minute: once in a run of either engine.
    return {"DEVSERVER_EXPIRATION_INTERVAL": "3600"}


def devserver_scenario(s: Session) -> None:
    """Its CLI's steps, as manifests: a default flavor, a user, a DevServer with SSH; then each
    deleted. Its cluster-scoped objects are named after the run (each run sees the others').
    (Its flavors' handlers are in a folder without __init__.py that nothing imports: they are
    never registered, on either engine.)"""
    ns, group = s.namespace, "devserver.io"
    flavor, user = f"{ns}-small", f"{ns}-alice"
    home = f"dev-{user}"  # the namespace it makes for the user (devserver.utils.users)
    s.apply(json.dumps({"apiVersion": f"{group}/v1", "kind": "DevServerFlavor", "metadata": {"name": flavor},
                        "spec": {"default": True, "resources": {"requests": {"cpu": "100m", "memory": "128Mi"},
                                                                 "limits": {"cpu": "1", "memory": "1Gi"}}}}))
    s.apply(json.dumps({"apiVersion": f"{group}/v1", "kind": "DevServerUser", "metadata": {"name": user},
                        "spec": {"username": user}}))
    s.wait("the user is ready", lambda: (s.get(f"devserverusers.{group}", user) or {})["status"]["phase"] == "Ready")
    s.wait("the user's account and role exist",
           lambda: all(s.get(kind, name, namespace=home) for kind, name in
                       [("serviceaccounts", f"{user}-sa"), ("roles", "devserver-user"),
                        ("rolebindings", "devserver-user")]))
    # (Its account, role and binding are checked, not snapshotted: ours runs under a generated
    # ServiceAccount and Role of its own in the run's namespace.)
    s.namespaces.append(home)  # snapshotted and deleted with the run's (the operator leaves it)
    s.apply(json.dumps({"apiVersion": f"{group}/v1", "kind": "DevServer", "metadata": {"name": "box"},
                        "spec": {"flavor": flavor, "enableSSH": True, "lifecycle": {"timeToLive": "4h"},
                                 "ssh": {"publicKey": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIB4k alice@laptop"}}}))
    # Its wheel lacks the startup scripts its handler reads after making the host keys: the
    # handler fails, to be retried in 60 s (on either engine); the deletion supersedes it.
    s.wait("the creation fails, to be retried",
           lambda: s.logged("Handler 'create_devserver' failed with an exception and will try again in 60 seconds"))
    # Its host keys are made anew by ssh-keygen in every run: checked here, not snapshotted.
    s.wait("its host keys are kept", lambda: len((s.get("secrets", "box-host-keys") or {})["data"]) == 6)
    s.snapshot("creation")
    s.kubectl("delete", f"devservers.{group}", "box", "--timeout=60s")
    s.wait("its host keys are collected", lambda: s.get("secrets", "box-host-keys") is None, timeout=90)
    s.snapshot("deletion")
    s.kubectl("delete", f"devserverusers.{group}", user, "--timeout=60s")
    s.wait("the user's account is gone", lambda: s.get("serviceaccounts", f"{user}-sa", namespace=home) is None)
    s.kubectl("delete", f"devserverflavors.{group}", flavor, "--timeout=60s")
    s.snapshot("user deletion")


OPERATORS: tuple[Operator, ...] = (
    _fastflow("fastflow", client="kubernetes 30.1.0 (and kubernetes_asyncio 30.3.1 for its own calls)"),
    _fastflow("fastflow-asyncio", client="kubernetes_asyncio 36.1.0 alone (its key getter is a coroutine)"),
    # Stopped by Ctrl-C: its CLI catches it in the main thread and sets the operator's stop flag.
    _fastflow("fastflow-asyncio-old", client="kubernetes_asyncio 30.3.1 alone (its key getter is a function)",
              stop_signal=signal.SIGINT),
    Operator(
        name="dask-kubernetes", client="pykube-ng 23.6.0 (also installed: kubernetes, kubernetes_asyncio, kr8s)",
        what="dask-kubernetes 2026.3.0: Dask clusters; a DaskCluster makes a scheduler Deployment and Service "
             "and a DaskWorkerGroup, which makes a Deployment per worker (kr8s as its own client); scaled by a "
             "field handler; a DaskJob's runner pod (run by kwok) drives the job's status by field handlers "
             "on pods' phases",
        sdist="dask-kubernetes==2026.3.0",
        crds=tuple(f"dask_kubernetes/operator/deployment/helm/dask-kubernetes-operator/crds/{kind}.yaml"
                   for kind in ("daskcluster", "daskworkergroup", "daskjob", "daskautoscaler")),
        command=("{bin}/kopf", "run", "-m", "dask_kubernetes.operator.controller", "--namespace", "{namespace}"),
        resources=(f"daskclusters.{DASK}", f"daskworkergroups.{DASK}", f"daskjobs.{DASK}", "deployments",
                   "services", "pods"),
        scenario=dask_scenario,
        alias=dask_alias,
        rbac=("-m", "dask_kubernetes.operator.controller", "-n", "{namespace}"),
    ),
    Operator(
        name="baler-operator", client="kubernetes 29.0.0",
        what="baler-operator 0.0.1.dev0: Haystack NLP pipelines; each pipeline of a Haystack becomes a ConfigMap, "
             "a Deployment and a Service; a timer (with when=) polls their health into the status; deletion "
             "decommissions them",
        sdist="baler-operator==0.0.1.dev0",
        crds=("charts/baler-operator/crds/pipelines.baler.gatecastle.com_v1_haystack.yaml",),
        command=("{bin}/kopf", "run", "-m", "baler_operator.app", "--namespace", "{namespace}"),
        resources=("haystack.pipelines.baler.gatecastle.com", "deployments", "services", "configmaps"),
        scenario=baler_scenario,
        rbac=("-m", "baler_operator.app", "-n", "{namespace}"),
    ),
    Operator(
        name="citadel-operator", client="kubernetes 37.0.2 (its own calls too, synchronous in its async handlers)",
        what="jaymd96-citadel-operator 0.2.0, its namespace-infrastructure operator: a NamespaceInfrastructure "
             "makes CiliumNetworkPolicies (default-deny, tenant, one per peer), a ResourceQuota and a LimitRange "
             "in its target namespace, and keeps its status (phase, conditions, a policy hash) with its own "
             "client; deletion removes them; a timer checks for drift",
        sdist="jaymd96-citadel-operator==0.2.0",
        crds=("crds/namespaceinfrastructure.yaml",),
        foreign_crds=("cilium.yaml",),
        command=("{bin}/kopf", "run", "--standalone", "-m", "citadel_operator.k3s.namespace_infra_operator",
                 "--namespace", "{namespace}"),
        resources=("namespaceinfrastructures.citadel.dev", "ciliumnetworkpolicies.cilium.io", "resourcequotas",
                   "limitranges"),
        scenario=citadel_scenario,
        # Its children are named after their target namespace: the run's own.
        alias=lambda item: item["metadata"]["name"].replace(item["metadata"].get("namespace") or "\0", "<ns>"),
        rbac=("--standalone", "-m", "citadel_operator.k3s.namespace_infra_operator", "-n", "{namespace}"),
    ),
    Operator(
        name="kube-mcp-operator", client="kubernetes 37.0.2, in-cluster: a service account's token (no kubeconfig)",
        what="mseep-kube-mcp-operator 0.1.0: Deployments annotated mcp-server=true get a sidecar container "
             "patched in and a Service made for it; an MCPConfig selects Deployments by label; its module loads "
             "the in-cluster configuration when imported, so it runs only as in a pod",
        sdist="mseep-kube-mcp-operator==0.1.0",
        crds=(),  # its MCPConfig CRD is in its chart, not in its distribution: crds/kube-mcp-operator.yaml
        foreign_crds=("kube-mcp-operator.yaml",),
        command=("{bin}/kopf", "run", "-m", "mcp_operator.mcp_operator", "--namespace", "{namespace}"),
        resources=("deployments", "services", "mcpconfigs.mcp.mycompany.com"),
        scenario=mcp_scenario,
        pod=True,
        rbac=("-m", "mcp_operator.mcp_operator", "-n", "{namespace}"),
        kopf_bug=(r"TypeError: '>=' not supported between instances of 'int' and 'str'",
                  "its startup sets settings.posting.level = 'INFO', a name; Kopf 1.45.2 compares it with a "
                  "number at the first object's log line and stops the operator; ours takes it as logging "
                  "does (tests/engine/test_posting_level.py)"),
    ),
    Operator(
        name="pass-operator", client="kubernetes 29.0.0, in-cluster: a service account's token (no kubeconfig)",
        what="pass-operator 0.4.8: a PassSecret makes a Secret of entries decrypted (GnuPG) from a pass store "
             "cloned from git; renaming it moves the Secret; deletion deletes it; its own CLI runs "
             "kopf.operator() in a thread beside a git-pull loop; its own finalizer and progress-annotation "
             "prefix; a sharp timer with initial_delay",
        sdist="pass-operator==0.4.8",
        crds=(),  # its PassSecret CRD is in its chart: crds/pass-operator.yaml
        foreign_crds=("pass-operator.yaml",),
        command=("{bin}/passoperator", "--log-stdout", "--log-level", "info"),
        resources=("passsecrets.secrets.premiscale.com", "secrets"),
        scenario=pass_scenario,
        ready="Successfully cloned repo",
        pod=True,
        setup=pass_setup,
        rbac=("--standalone", "-m", "passoperator.daemon", "-n", "{namespace}"),
    ),
    Operator(
        name="synator", client="kubernetes 37.0.2, in-cluster: a service account's token (no kubeconfig); "
                               "its handlers use the client that Kopf's login configured",
        what="synator (github.com/TheYkk/synator, 2021, vendored unchanged): Secrets and ConfigMaps annotated "
             "synator/sync are copied into the namespaces they name, and into new ones; pods annotated "
             "synator/reload are deleted when their Secret or ConfigMap changes; run as its image runs it "
             "(`kopf run handlers.py`, neither -A nor -n: cluster-wide with Kopf's warning)",
        sdist=None,
        crds=(),
        command=("{bin}/kopf", "run", "{source}/handlers.py"),
        resources=("secrets", "configmaps", "pods"),
        scenario=synator_scenario,
        pod=True,
        setup=synator_setup,
        namespaces=("a", "b"),
        unmarked=("namespaces",),
        rbac=("{source}/handlers.py",),
    ),
    Operator(
        name="clustersecret", client="kubernetes 19.15.0, in-cluster: a service account's token (no kubeconfig)",
        what="ClusterSecret (github.com/zakkg3/ClusterSecret, 2025, vendored unchanged): a cluster-scoped "
             "ClusterSecret is copied as a Secret into the namespaces its patterns match, new ones too "
             "(a namespace creation handler and an in-memory cache filled at startup); field handlers on its "
             "data and patterns; its status patched by its own client; a deletion handler; run as its image "
             "runs it (`kopf run --liveness=... -A`)",
        sdist=None,
        crds=("crds/clustersecret-crd.yaml",),
        command=("{bin}/kopf", "run", "--liveness=http://0.0.0.0:8080/healthz", "-A", "{source}/src/handlers.py"),
        resources=("clustersecrets.clustersecret.io", "secrets"),
        scenario=clustersecret_scenario,
        pod=True,
        namespaces=("a", "b"),
        unmarked=("namespaces",),
        rbac=("-A", "{source}/src/handlers.py"),
    ),
    Operator(
        name="devserver-operator", client="kubernetes 37.0.2 (its own calls too, in threads: asyncio.to_thread)",
        what="devserver-operator 0.0.1 (a wheel only): developer machines; a DevServer (with a cluster-scoped "
             "DevServerFlavor) makes a Secret of SSH host keys (ssh-keygen in a subprocess), then fails for "
             "want of scripts its wheel lacks (retried in 60 s; its deletion supersedes it); a cluster-scoped "
             "DevServerUser makes a "
             "namespace named from its spec, with a ServiceAccount, a Role and a RoleBinding in it; every "
             "request of its own through asyncio.to_thread; its startup handler changes settings "
             "(batching.worker_limit, posting.enabled) and starts a background task on the loop",
        sdist=None,
        crds=(),  # its wheel has no CRDs: crds/devserver-operator.yaml, from its CLI's manifests
        foreign_crds=("devserver-operator.yaml",),
        command=("{bin}/kopf", "run", "-m", "devserver.operator", "--namespace", "{namespace}"),
        resources=("devservers.devserver.io", "devserverflavors.devserver.io", "devserverusers.devserver.io",
                   "statefulsets", "services", "configmaps"),
        scenario=devserver_scenario,
        setup=devserver_setup,
        rbac=("-m", "devserver.operator", "-n", "{namespace}"),
    ),
)
