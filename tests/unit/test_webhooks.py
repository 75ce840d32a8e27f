"""The webhook servers' options as the core gets them, and what cannot work refused at once
(no cluster needed)."""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path

import kopf
import pytest
from kopf._connecting import webhooks as _webhooks


def test_an_ssl_context_is_refused_with_what_to_use_instead() -> None:
    with pytest.raises(ValueError, match=r"context=\.\.\.\) is not supported.*certfile="):
        kopf.WebhookServer(context=ssl.create_default_context())


def test_urls_and_hosts_as_clients_reach_them() -> None:
    assert _webhooks._accessible(None) == "localhost"
    assert _webhooks._accessible("0.0.0.0") == "127.0.0.1"
    assert _webhooks._accessible("::") == "::1"
    assert _webhooks._accessible("10.0.0.1") == "10.0.0.1"
    assert _webhooks._url("https", "::1", 9443, "/hooks") == "https://[::1]:9443/hooks"
    assert _webhooks._url("https", "example.test", 443, "") == "https://example.test"


def test_options_name_the_certificate_hosts_and_client_cas(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("CA-1")
    (tmp_path / "cas").mkdir()
    (tmp_path / "cas" / "b.pem").write_text("CA-3")
    server = kopf.WebhookK3dServer(addr="0.0.0.0", port=1234, path="/x/", extra_sans=["extra.test"],
                                   verify_mode=ssl.CERT_REQUIRED, verify_cafile=ca,
                                   verify_capath=tmp_path / "cas", verify_cadata=b"CA-2")
    options = server._options()
    assert options["hostnames"] == ["host.k3d.internal", "127.0.0.1", "extra.test"]
    assert options["path"] == "/x" and options["port"] == 1234 and options["addr"] == "0.0.0.0"
    assert options["verify_mode"] == "required"
    assert options["verify_cas"] == ["CA-1", "CA-3", "CA-2"]


def test_the_ca_bundle_reported_to_the_apiserver(tmp_path: Path) -> None:
    cert = tmp_path / "cert.pem"
    cert.write_bytes(b"CERT")
    generated = kopf.WebhookServer()
    assert generated._cadata(b"GENERATED") == b"GENERATED"  # a self-signed one is its own CA
    given = kopf.WebhookServer(certfile=cert, pkeyfile=cert)
    assert given._cadata(b"CERT") == b"CERT"
    assert kopf.WebhookServer(certfile=cert, pkeyfile=cert, cadata=b"CA")._cadata(b"CERT") == b"CA"
    assert kopf.WebhookServer(insecure=True)._cadata(None) is None


def test_ngrok_without_pyngrok_says_what_to_install() -> None:
    async def fn(request: dict, **_: object) -> dict:  # type: ignore[type-arg]
        return {}
    tunnel = kopf.WebhookNgrokTunnel()

    async def first() -> None:
        async for _ in tunnel(fn):
            break
    with pytest.raises(ImportError, match="pip install pyngrok"):
        asyncio.run(first())
