"""A control plane in a state folder: etcd and kube-apiserver always; on request the
controller manager (garbage collection, namespaces' deletion, service accounts) and simulated
nodes (kube-scheduler and kwok: pods that run and log). Started, checked, stopped; a state
folder left by a killed run is found and cleaned.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import shutil
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

from kopf._operating.cluster import binaries, pki, processes

SERVICE_CIDR = "10.0.0.0/24"
POD_CIDR = "10.1.0.0/16"  # the simulated pods' IPs: apart from the services'
# Controllers that tests need: namespace deletion, ownerReference GC, the default service
# account (pods cannot be created without it), and Deployments' ReplicaSets and pods (an
# operator's children roll out and report their progress as in a real cluster).
CONTROLLERS = ("namespace-controller", "garbage-collector-controller", "serviceaccount-controller",
               "deployment-controller", "replicaset-controller")
KWOK_NODES = ("kwok-node-0", "kwok-node-1")
ORDER = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")


class ControlPlaneError(Exception):
    """The control plane cannot start; the message says what to do."""


@dataclasses.dataclass
class ControlPlane:
    """etcd and kube-apiserver (and on request the controller manager and the nodes) with their
    state in ``home``; the API server on ``port``, etcd on the two ports below it, kwok's kubelet
    API on the second above it."""

    home: Path
    port: int
    controller_manager: bool = False
    nodes: bool = False
    audit_policy: str | None = None
    feature_gates: tuple[str, ...] = ()
    controllers: tuple[str, ...] = CONTROLLERS  # the controller manager's
    say: object = None
    # Its processes end with the process that started them, however that ends (a test session
    # killed by a CI job's timeout); else they outlive it (``kopf testing cluster up``).
    tied: bool = False

    @property
    def components(self) -> tuple[str, ...]:
        wanted = {"etcd", "kube-apiserver"}
        if self.controller_manager or self.nodes:
            wanted.add("kube-controller-manager")  # (the nodes' pods need service accounts)
        if self.nodes:
            wanted |= {"kube-scheduler", "kwok"}
        return tuple(name for name in ORDER if name in wanted)

    @property
    def ports(self) -> dict[str, int]:
        ports = {"kube-apiserver": self.port, "etcd": self.port - 2, "etcd-peer": self.port - 1}
        return ports | ({"kwok": self.port + 2} if self.nodes else {})

    @property
    def kubeconfig(self) -> Path:
        return self.home / "kubeconfig"

    def _say(self, message: str) -> None:
        if callable(self.say):
            self.say(message)

    # -- state -----------------------------------------------------------------------

    @property
    def configuration(self) -> str:
        """What the running components were started with: another asks for a restart."""
        return json.dumps({"components": self.components, "port": self.port, "audit": self.audit_policy,
                           "gates": sorted(self.feature_gates), "controllers": list(self.controllers)},
                          sort_keys=True)

    def configured(self) -> bool:
        marker = self.home / "configuration"
        return marker.exists() and marker.read_text() == self.configuration

    def as_recorded(self) -> ControlPlane:
        """This control plane with the options its running components were started with (as
        they are, if nothing is recorded): for commands that use it without starting it."""
        try:
            options = json.loads((self.home / "configuration").read_text())
        except (OSError, ValueError):
            return self
        components = options.get("components", ())
        return dataclasses.replace(self, audit_policy=options.get("audit"),
                                   feature_gates=tuple(options.get("gates", ())),
                                   controllers=tuple(options.get("controllers", self.controllers)),
                                   nodes="kwok" in components,
                                   controller_manager="kube-controller-manager" in components)

    @property
    def audit_log(self) -> Path | None:
        return self.home / "logs" / "audit.log" if self.audit_policy is not None else None

    def running(self) -> dict[str, int | None]:
        return {name: processes.recorded_pid(self.home, name) for name in self.components}

    def healthy(self) -> bool:
        """All its components run, as configured now, and the API server is ready."""
        return self.configured() and all(self.running().values()) and self.get("/readyz")[0] == 200

    def stop(self) -> list[str]:
        return processes.stop(self.home, ORDER)

    # -- the API, without a client library --------------------------------------------

    def _context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.home / "pki" / "ca.crt"))
        context.load_cert_chain(str(self.home / "pki" / "admin.crt"), str(self.home / "pki" / "admin.key"))
        return context

    def get(self, path: str, timeout: float = 2) -> tuple[int, str]:
        url = f"https://127.0.0.1:{self.port}{path}"
        try:
            with urllib.request.urlopen(url, context=self._context(), timeout=timeout) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode(errors="replace")
        except (OSError, ssl.SSLError) as error:
            return 0, str(error)

    def kubectl(self, *args: str, input: str | None = None) -> str:
        kubectl = binaries.find(["kubectl"])["kubectl"]
        result = subprocess.run([str(kubectl), f"--kubeconfig={self.kubeconfig}", *args],
                                input=input, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise ControlPlaneError(f"kubectl {' '.join(args)} failed: {result.stderr.strip()}")
        return result.stdout

    # -- starting -----------------------------------------------------------------------

    def start(self) -> float:
        """Start what is not running (a stale state folder cleaned first); the seconds it took."""
        programs = binaries.find([*self.components, "kubectl"])
        if any(processes.pid_file(self.home, name).exists() for name in ORDER):
            self._say(f"found the state of an earlier run in {self.home}; stopping what is left of it")
            self.stop()
        processes.check_free(self.ports)
        for sub in ("logs", "pids"):
            (self.home / sub).mkdir(parents=True, exist_ok=True)
        pki.make(self.home / "pki")
        pki.kubeconfig(self.home, self.port)
        pki.kubeconfig(self.home, self.port, user="controller-manager")
        started = time.monotonic()
        try:
            # The API server is started at once: it waits for etcd itself (sooner ready by ~0.5 s).
            self._start_etcd(programs["etcd"])
            self._spawn("kube-apiserver", programs["kube-apiserver"], self.apiserver_args(self.port))
            processes.wait_until(self.home, "etcd", self._etcd_healthy, timeout=30)
            processes.wait_until(self.home, "kube-apiserver", lambda: self.get("/readyz")[0] == 200, timeout=90)
            if "kube-controller-manager" in self.components:
                self._start_controller_manager(programs["kube-controller-manager"])
            if self.nodes:
                self._start_nodes(programs["kube-scheduler"], programs["kwok"])
        except BaseException:
            self.stop()
            raise
        (self.home / "configuration").write_text(self.configuration)
        return time.monotonic() - started

    def _spawn(self, name: str, program: Path, args: list[str]) -> int:
        return processes.spawn(self.home, name, program, args, tied=self.tied)

    def _etcd_healthy(self) -> bool:
        try:
            url = f"http://127.0.0.1:{self.ports['etcd']}/health"
            with urllib.request.urlopen(url, timeout=1) as response:
                return bool(json.loads(response.read()).get("health") == "true")
        except (OSError, ValueError):
            return False

    def _start_etcd(self, program: Path) -> None:
        shutil.rmtree(self.home / "etcd-data", ignore_errors=True)  # every start is a fresh cluster
        url, peer = f"http://127.0.0.1:{self.ports['etcd']}", f"http://127.0.0.1:{self.ports['etcd-peer']}"
        self._spawn("etcd", program, [
            "--name=kopf-rs-test", f"--data-dir={self.home / 'etcd-data'}",
            f"--listen-client-urls={url}", f"--advertise-client-urls={url}",
            f"--listen-peer-urls={peer}", f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=kopf-rs-test={peer}", "--initial-cluster-state=new",
            "--unsafe-no-fsync",  # a throw-away test cluster: speed over durability
            "--log-level=warn",
        ])

    def apiserver_args(self, port: int) -> list[str]:
        keys = self.home / "pki"
        args = [
            f"--etcd-servers=http://127.0.0.1:{self.ports['etcd']}",
            "--bind-address=127.0.0.1", f"--secure-port={port}", "--advertise-address=127.0.0.1",
            "--endpoint-reconciler-type=none",  # no default route here: do not publish endpoints
            f"--tls-cert-file={keys / 'apiserver.crt'}", f"--tls-private-key-file={keys / 'apiserver.key'}",
            f"--client-ca-file={keys / 'ca.crt'}",
            # The nodes' kubelet API (kwok's): pods' logs are read from it, through the API server.
            f"--kubelet-certificate-authority={keys / 'ca.crt'}", "--kubelet-preferred-address-types=InternalIP",
            f"--token-auth-file={keys / 'tokens.csv'}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={keys / 'sa.pub'}",
            f"--service-account-signing-key-file={keys / 'sa.key'}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--authorization-mode=RBAC", "--allow-privileged=true", f"--cert-dir={keys}", "--profiling=false",
        ]
        if self.audit_policy is not None:
            (self.home / "audit-policy.yaml").write_text(self.audit_policy)
            (self.home / "logs" / "audit.log").unlink(missing_ok=True)
            args += [f"--audit-policy-file={self.home / 'audit-policy.yaml'}",
                     f"--audit-log-path={self.home / 'logs' / 'audit.log'}",
                     "--audit-log-maxsize=4096"]  # MB: no rotation in a test run
        if self.feature_gates:
            args.append(f"--feature-gates={','.join(f'{gate}=true' for gate in self.feature_gates)}")
        return args

    def _start_controller_manager(self, program: Path) -> None:
        keys = self.home / "pki"
        self._spawn("kube-controller-manager", program, [
            f"--kubeconfig={self.home / 'kubeconfig-controller-manager'}",
            f"--controllers={','.join(self.controllers)}",
            f"--service-account-private-key-file={keys / 'sa.key'}", f"--root-ca-file={keys / 'ca.crt'}",
            "--leader-elect=false", "--bind-address=127.0.0.1", "--secure-port=0", "--profiling=false",
        ])
        # Pods need the namespace's default service account: its presence shows the controllers work.
        processes.wait_until(
            self.home, "kube-controller-manager",
            lambda: self.get("/api/v1/namespaces/default/serviceaccounts/default")[0] == 200, timeout=60)

    def restart_controller_manager(self) -> None:
        """Restart the controller manager, if it runs, so that its garbage collector watches the
        CRDs installed since it started: it looks for new resources only every 30 seconds, and
        the children of a new CRD's objects were collected only after ~40 s (0.2 s later on)."""
        if "kube-controller-manager" not in self.components:
            return
        processes.stop(self.home, ["kube-controller-manager"])
        self._start_controller_manager(binaries.find(["kube-controller-manager"])["kube-controller-manager"])

    def _start_nodes(self, scheduler: Path, kwok: Path) -> None:
        keys = self.home / "pki"
        self._spawn("kube-scheduler", scheduler, [
            f"--kubeconfig={self.home / 'kubeconfig-controller-manager'}",
            "--leader-elect=false", "--bind-address=127.0.0.1", "--secure-port=0", "--profiling=false",
        ])
        crds = binaries.cache_dir("nodes")
        for crd in binaries.KWOK_CRDS:
            self.kubectl("apply", "-f", str(crds / crd))
        self.kubectl("wait", "--for=condition=Established", "--timeout=30s",
                     *[f"crd/{crd.removesuffix('.yaml').split('_', 1)[1]}.{crd.split('_', 1)[0]}"
                       for crd in binaries.KWOK_CRDS])
        port = self.ports["kwok"]
        self._spawn("kwok", kwok, [
            f"--kubeconfig={self.home / 'kubeconfig-controller-manager'}",
            f"--config={binaries.HERE / 'kwok.yaml'}",
            "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
            "--node-ip=127.0.0.1", f"--node-port={port}", f"--server-address=127.0.0.1:{port}",
            f"--tls-cert-file={keys / 'kwok.crt'}", f"--tls-private-key-file={keys / 'kwok.key'}",
            f"--cidr={POD_CIDR}", "--enable-crds=Logs",
        ])
        nodes = [{"apiVersion": "v1", "kind": "Node",
                  "metadata": {"name": name, "annotations": {"kwok.x-k8s.io/node": "fake"},
                               "labels": {"kubernetes.io/hostname": name, "type": "kwok"}}}
                 for name in KWOK_NODES]
        self.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": nodes}))

        def ready() -> bool:
            code, body = self.get("/api/v1/nodes?labelSelector=type%3Dkwok")
            items = json.loads(body).get("items", []) if code == 200 else []
            return sum(any(c["type"] == "Ready" and c["status"] == "True"
                           for c in node["status"].get("conditions", [])) for node in items) == len(KWOK_NODES)

        processes.wait_until(self.home, "kwok", ready, timeout=60)
        # The API server taints a new node not-ready; the node lifecycle controller (not run here:
        # it would also evict pods) lifts that when the node is ready. Lifted here instead.
        for name in KWOK_NODES:
            self.kubectl("patch", "node", name, "--type=merge", "-p", '{"spec": {"taints": null}}')


def persistent(**options: object) -> ControlPlane:
    """The control plane that outlives a command (``kopf testing cluster``): its state in
    ``$KOPF_CLUSTER_HOME`` (default ``~/.local/state/kopf-rs/cluster``), its API server on
    ``$KOPF_CLUSTER_PORT`` (default 16443); ``options`` are ``ControlPlane``'s others."""
    state = Path(os.environ.get("XDG_STATE_HOME", Path.home() / ".local" / "state"))
    home = Path(os.environ.get("KOPF_CLUSTER_HOME", state / "kopf-rs" / "cluster")).resolve()
    raw = os.environ.get("KOPF_CLUSTER_PORT", "16443")
    if not raw.isdigit() or not 1024 < int(raw) < 65536:
        raise ControlPlaneError(f"KOPF_CLUSTER_PORT={raw!r} is not a port number between 1025 and 65535.")
    return ControlPlane(home=home, port=int(raw), **options)  # type: ignore[arg-type]


def shell_lines(control: ControlPlane) -> str:
    """What to eval in a shell to use it: the kubeconfig, the audit log, kubectl on the PATH."""
    lines = [f"export KUBECONFIG={control.kubeconfig}"]
    if control.audit_log is not None:
        lines.append(f"export KOPF_CLUSTER_AUDIT_LOG={control.audit_log}")
    try:
        kubectl = binaries.find(["kubectl"])["kubectl"]
    except binaries.BinariesError:
        return "\n".join(lines)
    found = shutil.which("kubectl")
    if found is None or Path(found).resolve() != kubectl.resolve():
        lines.append(f'export PATH="{kubectl.parent}:$PATH"')
    return "\n".join(lines)


def report(control: ControlPlane) -> tuple[list[str], bool]:
    """What runs, where its API, kubeconfig, logs and programs are; and whether it is ready."""
    running = control.running()
    lines = [f"{name:24} {f'running, pid {pid}' if pid else 'not running'}" for name, pid in running.items()]
    ready = all(running.values()) and control.get("/readyz")[0] == 200
    lines.append(f"{'api':24} https://127.0.0.1:{control.port} {'ready' if ready else 'not ready'}")
    lines.append(f"{'kubeconfig':24} {control.kubeconfig}")
    lines.append(f"{'logs':24} {control.home / 'logs'}")
    for module, programs in binaries.MODULES.items():
        folder = binaries.cache_dir(module)
        built = all((folder / name).exists() for name in programs)
        lines.append(f"{'programs (' + module + ')':24} {folder}{'' if built else ' (not built yet)'}")
    return lines, ready


def free_port() -> int:
    """An API server port whose neighbours (etcd's two below, kwok's two above) are free too."""
    for _ in range(200):
        port = random.randint(20000, 60000)
        if all(processes.is_free(port + offset) for offset in (-2, -1, 0, 2)):
            return port
    raise ControlPlaneError("No free ports for the control plane in 20000-60000.")
