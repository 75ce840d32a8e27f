"""The default logins without importing the client libraries (kopf._connecting.piggybacking): the
credentials read without a client are those the client itself gives Kopf's login; what only
a client can read is left to it; and the ``kubernetes`` client is configured at its first import."""

from __future__ import annotations

import base64
import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import kopf
import pytest
from kopf._connecting import piggybacking as _piggybacking
from kopf._connecting.piggybacking import _plain_credentials

CA = "-----BEGIN CERTIFICATE-----\nQ0EK\n-----END CERTIFICATE-----\n"
CERT = "-----BEGIN CERTIFICATE-----\nQ0VSVAo=\n-----END CERTIFICATE-----\n"


def kubeconfig(directory: Path, user: str, *, namespace: str = "team-a") -> Path:
    (directory / "certs").mkdir(exist_ok=True)
    (directory / "certs" / "client.crt").write_text(CERT)
    path = directory / "config"
    path.write_text(textwrap.dedent(f"""\
        apiVersion: v1
        kind: Config
        current-context: dev
        clusters:
        - name: dev
          cluster:
            server: https://127.0.0.1:6443
            certificate-authority-data: {base64.b64encode(CA.encode()).decode()}
        contexts:
        - name: dev
          context: {{cluster: dev, user: dev, namespace: {namespace}}}
        users:
        - name: dev
          user:
        """) + textwrap.indent(user, "    "))
    return path


@pytest.fixture()
def no_service_account(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(_piggybacking, "SERVICE_ACCOUNT", str(tmp_path / "no-service-account"))


def materialized(info: dict[str, Any]) -> dict[str, Any]:
    """The core's form with files read: the clients write CA data to temporary files."""
    for path_key, data_key in [("ca_path", "ca_data"), ("certificate_path", "certificate_data")]:
        if info[path_key] is not None:
            info[data_key] = Path(info.pop(path_key)).read_text()
        else:
            info.pop(path_key)
    return info


@pytest.mark.usefixtures("no_service_account")
def test_a_plain_kubeconfig_reads_as_each_client_reads_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = kubeconfig(tmp_path, "token: SECRET\nclient-certificate: certs/client.crt\n")  # relative to the file
    monkeypatch.setenv("KUBECONFIG", str(path))
    # The client reads $KUBECONFIG when first imported (another test may have imported it).
    import kubernetes.config.kube_config
    monkeypatch.setattr(kubernetes.config.kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(path))
    settings = kopf.OperatorSettings()
    plain = _plain_credentials()
    assert plain is not None and not plain.in_cluster
    logger = logging.getLogger("test")

    # The clients' own readings, as Kopf's login gets them (this imports both here).
    by_client = _piggybacking.login_via_client(logger=logger, settings=settings)
    by_pykube = _piggybacking.login_via_pykube(logger=logger, settings=settings)
    assert by_client is not None and by_pykube is not None
    assert materialized(plain.as_client(settings).for_engine()) == materialized(by_client.for_engine())
    assert materialized(plain.as_pykube(settings).for_engine()) == materialized(by_pykube.for_engine())
    assert plain.as_pykube(settings).default_namespace == "team-a"


@pytest.mark.usefixtures("no_service_account")
@pytest.mark.parametrize("user", [
    "exec: {command: aws, apiVersion: client.authentication.k8s.io/v1beta1}\n",
    "auth-provider: {name: oidc, config: {id-token: abc}}\n",
    "username: admin\npassword: secret\n",
])
def test_credentials_that_only_a_client_can_read_are_left_to_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, user: str) -> None:
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig(tmp_path, user)))
    assert _plain_credentials() is None


@pytest.mark.usefixtures("no_service_account")
def test_merged_or_missing_kubeconfigs_are_left_to_the_clients(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = kubeconfig(tmp_path, "token: SECRET\n")
    monkeypatch.setenv("KUBECONFIG", f"{path}{os.pathsep}{path}")
    assert _plain_credentials() is None
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "absent"))
    assert _plain_credentials() is None
    path.write_text("current-context: nowhere\n")
    monkeypatch.setenv("KUBECONFIG", str(path))
    assert _plain_credentials() is None  # the clients' own errors then, as in Kopf


@pytest.mark.parametrize("host, server", [("10.0.0.1", "https://10.0.0.1:443"), ("fd00::1", "https://[fd00::1]:443")])
def test_the_service_account_reads_as_the_clients_read_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, host: str, server: str) -> None:
    monkeypatch.setattr(_piggybacking, "SERVICE_ACCOUNT", str(tmp_path))
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", host)
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    (tmp_path / "token").write_text("TOKEN")
    (tmp_path / "ca.crt").write_text(CA)
    assert _plain_credentials() is None  # no namespace file: pykube-ng would fail; left to it
    (tmp_path / "namespace").write_text("ns1")
    plain = _plain_credentials()
    assert plain is not None and plain.in_cluster
    settings = kopf.OperatorSettings()
    client = plain.as_client(settings)
    assert (client.server, client.scheme, client.token) == (server, "bearer", "TOKEN")
    assert client.ca_path == str(tmp_path / "ca.crt")
    pykube = plain.as_pykube(settings)
    assert (pykube.server, pykube.scheme, pykube.default_namespace) == (server, None, "ns1")
    monkeypatch.setenv("PYKUBE_KUBERNETES_SERVICE_HOST", "elsewhere")
    assert _plain_credentials() is None


def test_the_client_is_configured_at_its_first_import(tmp_path: Path) -> None:
    path = kubeconfig(tmp_path, "token: SECRET\n")
    script = textwrap.dedent("""
        import logging, sys
        import kopf
        from kopf._connecting import piggybacking as _piggybacking
        logging.basicConfig(level=logging.DEBUG, format='%(message)s', stream=sys.stdout)
        _piggybacking.SERVICE_ACCOUNT = '/nonexistent'
        logger = logging.getLogger('login')
        info = kopf.login_via_client(logger=logger, settings=kopf.OperatorSettings())
        info = kopf.login_via_client(logger=logger, settings=kopf.OperatorSettings())  # a re-login
        print('after the login:', info.server, info.scheme, 'kubernetes' in sys.modules)
        from kubernetes import client
        print('configured:', client.Configuration.get_default_copy().host)
        print('finders left:', sum(isinstance(f, _piggybacking._OnImport) for f in sys.meta_path))
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True,
                            env={**os.environ, "KUBECONFIG": str(path)})
    lines = result.stdout.splitlines()
    assert "after the login: https://127.0.0.1:6443 Bearer False" in lines
    assert lines.count("Client is configured via kubeconfig file.") == 1
    assert "configured: https://127.0.0.1:6443" in lines
    assert "finders left: 0" in lines
