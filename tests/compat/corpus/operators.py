"""The corpus' operators: where each comes from, how it is started, which client it logs in
with, and its scenario (what its documentation says a user does with it)."""

from __future__ import annotations

import dataclasses
import json
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import environments
from .recording import Recording, Session, record, served

PEERING_CRDS = Path(__file__).parents[2].parent / "examples" / "peering.yaml"


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

    def source(self) -> Path:
        """Its source distribution from PyPI, unpacked: its CRDs and examples."""
        return environments.sdist(self.sdist)

    def record(self, engine: str, venv: Path, source: Path) -> Recording:
        """One run of its scenario on `engine`, in namespaces of its own."""
        return record(engine=engine, venv=venv, command=list(self.command), namespace=f"corpus-{self.name}-{engine}",
                      source=source, resources=self.resources, scenario=self.scenario, ready=self.ready,
                      alias=self.alias, peering=self.peering, stop_signal=self.stop_signal)

    def install_crds(self, source: Path) -> None:
        names: list[str] = []
        for path in self.crds:
            applied = subprocess.run(["kubectl", "apply", "-o", "name", "-f", str(source / path)],
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
)
