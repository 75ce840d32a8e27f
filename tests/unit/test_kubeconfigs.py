"""Kubeconfig files as `login_with_kubeconfig` reads them: with the core's YAML parser, to the
same values as PyYAML's (which Kopf uses), and a clear error for a broken file."""

from __future__ import annotations

from pathlib import Path

import kopf
import pytest
import yaml
from kopf import _engine
from kopf._connecting.credentials import login_with_kubeconfig

KUBECONFIG = """\
apiVersion: v1
kind: Config
preferences: {}
current-context: dev
clusters:
- name: dev
  cluster:
    server: "https://127.0.0.1:6443"
    certificate-authority-data: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg==
    insecure-skip-tls-verify: false
- cluster: {server: 'http://other:8080', proxy-url: "socks5://proxy:1080"}
  name: other
contexts:
- context:
    cluster: dev
    namespace: team-a
    user: dev-user
  name: dev
users:
- name: dev-user
  user:
    token: "0123456789"
    client-certificate: /etc/keys/cert.pem
    client-key-data: S0VZ
    exec: null
    auth-provider:
      name: oidc
      config:
        access-token: abc.def.ghi
        extra-scopes: [a, b]
        idp-issuer-url: https://issuer.example.com  # a comment
"""


def test_a_kubeconfig_reads_as_pyyaml_reads_it() -> None:
    assert _engine.parse_kubeconfig(KUBECONFIG) == yaml.safe_load(KUBECONFIG)
    assert _engine.parse_kubeconfig("") is None


def test_a_broken_kubeconfig_fails_the_login_naming_the_file_not_its_lines(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "config"
    path.write_text("users:\n- name: a\n  user:\n    token: SECRET-TOKEN\n    x: [unclosed\n")
    monkeypatch.setenv("KUBECONFIG", str(path))
    with pytest.raises(ValueError) as error:
        login_with_kubeconfig(settings=kopf.OperatorSettings())
    # Where, but none of the file's lines: they hold tokens and keys, and errors are logged.
    assert str(error.value) == f"The kubeconfig '{path}' is not valid YAML: line 5 column 8: unclosed bracket '['"


def test_the_current_context_gives_the_connection(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "config"
    path.write_text(KUBECONFIG)
    monkeypatch.setenv("KUBECONFIG", str(path))
    info = login_with_kubeconfig(settings=kopf.OperatorSettings())
    assert info is not None
    assert info.server == "https://127.0.0.1:6443"
    assert info.token == "0123456789" and info.default_namespace == "team-a"
    assert info.insecure is False
