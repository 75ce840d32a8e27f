"""The corpus' operators: where each comes from, how it is started, which client it logs in
with, and its scenario (what its documentation says a user does with it)."""

from __future__ import annotations

import dataclasses
import json
import re
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import environments
from .recording import Recording, Session, record, served

PEERING_CRDS = Path(__file__).parents[2].parent / "examples" / "peering.yaml"
CRDS = Path(__file__).parent / "crds"  # stand-ins for other projects' CRDs that an operator writes


@dataclasses.dataclass(frozen=True)
class Operator:
    name: str  # also its requirements file: requirements/<name>.txt
    what: str
    client: str  # the client library Kopf's fallback login uses, by Kopf's precedence
    sdist: str  # the PyPI source distribution with its CRDs and examples
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

    def source(self) -> Path:
        """Its source distribution from PyPI, unpacked: its CRDs and examples."""
        return environments.sdist(self.sdist)

    def record(self, engine: str, venv: Path, source: Path) -> Recording:
        """One run of its scenario on `engine`, in namespaces of its own."""
        return record(engine=engine, venv=venv, command=list(self.command), namespace=f"corpus-{self.name}-{engine}",
                      source=source, resources=self.resources, scenario=self.scenario, ready=self.ready,
                      alias=self.alias, peering=self.peering, stop_signal=self.stop_signal, pod=self.pod)

    def install_crds(self, source: Path) -> None:
        names: list[str] = []
        for path in [*(source / path for path in self.crds), *(CRDS / path for path in self.foreign_crds)]:
            applied = subprocess.run(["kubectl", "apply", "-o", "name", "-f", str(path)],
                                     check=True, capture_output=True, text=True)
            names += [line.rpartition("/")[2] for line in applied.stdout.split()]
        if self.peering:
            applied = subprocess.run(["kubectl", "apply", "-o", "name", "-f", str(PEERING_CRDS)],
                                     check=True, capture_output=True, text=True)
            names += [line.rpartition("/")[2] for line in applied.stdout.split()]
        # Only its own CRDs: other tests make and delete theirs meanwhile (some never established).
        subprocess.run(["kubectl", "wait", "--for=condition=Established", "--timeout=60s",
                        *(f"crd/{name}" for name in names)], check=True, capture_output=True)
        for name in names:
            served(name)


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
             "field handler",
        sdist="dask-kubernetes==2026.3.0",
        crds=tuple(f"dask_kubernetes/operator/deployment/helm/dask-kubernetes-operator/crds/{kind}.yaml"
                   for kind in ("daskcluster", "daskworkergroup", "daskjob", "daskautoscaler")),
        command=("{bin}/kopf", "run", "-m", "dask_kubernetes.operator.controller", "--namespace", "{namespace}"),
        resources=(f"daskclusters.{DASK}", f"daskworkergroups.{DASK}", "deployments", "services"),
        scenario=dask_scenario,
        alias=dask_alias,
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
        kopf_bug=(r"TypeError: '>=' not supported between instances of 'int' and 'str'",
                  "its startup sets settings.posting.level = 'INFO', a name; Kopf 1.45.2 compares it with a "
                  "number at the first object's log line and stops the operator; ours takes it as logging "
                  "does (tests/engine/test_posting_level.py)"),
    ),
)
