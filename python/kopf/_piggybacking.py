"""Piggybacking: the login handlers that borrow the credentials of the client libraries
an operator has installed (pykube-ng, ``kubernetes``, ``kubernetes_asyncio``), configuring
those clients for the handlers on the way, as Kopf does; and the choice of the fallbacks."""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable, Sequence
from typing import Any

from kopf._credentials import (
    PRIORITY_OF_ASYNC_CLIENT,
    PRIORITY_OF_CLIENT,
    PRIORITY_OF_PYKUBE,
    SERVICE_ACCOUNT,
    ConnectionInfo,
    login_with_kubeconfig,
    login_with_service_account,
)
from kopf._errors import LoginError


def login_via_pykube(*, logger: Any, settings: Any, **_: Any) -> ConnectionInfo | None:
    """Credentials as pykube-ng finds them: in-cluster, else the kubeconfig."""
    try:
        import pykube
    except ImportError:
        return None
    try:
        config = pykube.KubeConfig.from_service_account()
        logger.debug("Pykube is configured in cluster with service account.")
    except FileNotFoundError:
        try:
            config = pykube.KubeConfig.from_file()
            logger.debug("Pykube is configured via kubeconfig file.")
        except (pykube.PyKubeError, FileNotFoundError):
            raise LoginError("Cannot authenticate pykube neither in-cluster, nor via kubeconfig.") from None
    ca = config.cluster.get('certificate-authority')
    cert = config.user.get('client-certificate')
    key = config.user.get('client-key')
    return ConnectionInfo(
        server=config.cluster.get('server'),
        ca_path=ca.filename() if ca else None,
        insecure=config.cluster.get('insecure-skip-tls-verify'),
        username=config.user.get('username'),
        password=config.user.get('password'),
        token=config.user.get('token'),
        certificate_path=cert.filename() if cert else None,
        private_key_path=key.filename() if key else None,
        default_namespace=config.namespace,
        proxy_url=config.cluster.get('proxy-url'),
        trust_env=settings.networking.trust_env,
        priority=PRIORITY_OF_PYKUBE,
    )


def login_via_client(*, logger: Any, settings: Any, **_: Any) -> ConnectionInfo | None:
    """Credentials as the official ``kubernetes`` client finds them: in-cluster, else the kubeconfig."""
    try:
        import kubernetes.config
    except ImportError:
        return None
    try:
        kubernetes.config.load_incluster_config()
        logger.debug("Client is configured in cluster with service account.")
    except kubernetes.config.ConfigException:
        try:
            kubernetes.config.load_kube_config()
            logger.debug("Client is configured via kubeconfig file.")
        except kubernetes.config.ConfigException:
            raise LoginError("Cannot authenticate the client library "
                             "neither in-cluster, nor via kubeconfig.") from None
    config = kubernetes.client.Configuration.get_default_copy()
    return _from_client_config(config, settings, PRIORITY_OF_CLIENT, header=sync_client_header(config))


def sync_client_header(config: Any) -> str | None:
    """The Authorization header of the ``kubernetes`` client's configuration: the token is
    under ``BearerToken`` since kubernetes 36.0.1, under ``authorization`` before."""
    header: str | None = config.get_api_key_with_prefix('BearerToken') or \
        config.get_api_key_with_prefix('authorization')
    return header


async def login_via_async_client(*, logger: Any, settings: Any, **_: Any) -> ConnectionInfo | None:
    """Credentials as the ``kubernetes_asyncio`` client finds them: in-cluster, else the kubeconfig."""
    try:
        import kubernetes_asyncio.config
    except ImportError:
        return None
    try:
        kubernetes_asyncio.config.load_incluster_config()
        logger.debug("Async client is configured in cluster with service account.")
    except kubernetes_asyncio.config.ConfigException:
        try:
            await kubernetes_asyncio.config.load_kube_config()
            logger.debug("Async client is configured via kubeconfig file.")
        except kubernetes_asyncio.config.ConfigException:
            raise LoginError("Cannot authenticate the async client library "
                             "neither in-cluster, nor via kubeconfig.") from None
    config = kubernetes_asyncio.client.Configuration.get_default_copy()
    # Since kubernetes-asyncio 33.3, the key getter is a coroutine (auth-providers refresh in it).
    header = config.get_api_key_with_prefix('BearerToken')
    if inspect.isawaitable(header):
        header = await header
    return _from_client_config(config, settings, PRIORITY_OF_ASYNC_CLIENT, header=header, proxy_url=config.proxy)


def _from_client_config(
        config: Any, settings: Any, priority: int, *, header: str | None, proxy_url: str | None = None,
) -> ConnectionInfo:
    """The connection of an official client's configuration (sync or asyncio: the same fields),
    with the Authorization header its key getter gave (the getter differs between the two)."""
    parts: Sequence[str] = header.split(' ', 1) if header else []
    scheme, token = (None, None) if not parts else (None, parts[0]) if len(parts) == 1 else (parts[0], parts[1])
    return ConnectionInfo(
        server=config.host,
        ca_path=config.ssl_ca_cert,
        insecure=not config.verify_ssl,
        username=config.username or None,
        password=config.password or None,
        scheme=scheme,
        token=token,
        certificate_path=config.cert_file,
        private_key_path=config.key_file,
        proxy_url=proxy_url,
        trust_env=settings.networking.trust_env,
        priority=priority,
    )


def _installed(module: str) -> bool:
    import importlib.util
    return importlib.util.find_spec(module) is not None


def fallback_logins() -> list[Callable[..., Any]]:
    """The login handlers used when an operator has none of its own (as Kopf chooses them):
    plain functions or coroutine functions, each giving a ``ConnectionInfo`` or ``None``."""
    found: list[Callable[..., Any]] = []
    if _installed('pykube'):
        found.append(login_via_pykube)
    if _installed('kubernetes'):
        found.append(login_via_client)
    elif _installed('kubernetes_asyncio'):
        found.append(login_via_async_client)
    if not found and (os.environ.get('KUBECONFIG') or os.path.exists(os.path.expanduser('~/.kube/config'))):
        found.append(login_with_kubeconfig)
    if not found and os.path.exists(os.path.join(SERVICE_ACCOUNT, 'token')):
        found.append(login_with_service_account)
    return found
