"""Credentials: ``kopf.ConnectionInfo`` and the rudimentary login handlers that find it
without a client library (the kubeconfig, the pod's service account)."""

from __future__ import annotations

import base64
import dataclasses
import datetime
import os
from collections.abc import Sequence
from typing import Any

from kopf._bridge import services
from kopf._structures.errors import LoginError

PRIORITY_OF_CLIENT = 10
PRIORITY_OF_ASYNC_CLIENT = 15
PRIORITY_OF_PYKUBE = 20
PRIORITY_OF_KUBECONFIG = 10
PRIORITY_OF_SERVICE_ACCOUNT = 20
SERVICE_ACCOUNT = '/var/run/secrets/kubernetes.io/serviceaccount'


def _timestamp(moment: datetime.datetime | None) -> float | None:
    """Seconds since the epoch; a naive moment is UTC (as Kopf takes it)."""
    if moment is None:
        return None
    return (moment if moment.tzinfo else moment.replace(tzinfo=datetime.UTC)).timestamp()


@dataclasses.dataclass(frozen=True)
class ConnectionInfo:
    """An API endpoint with its credentials, as returned by ``@kopf.on.login`` handlers."""

    server: str
    ca_path: str | None = None
    ca_data: str | bytes | None = None
    insecure: bool | None = None
    username: str | None = None
    password: str | None = None
    scheme: str | None = None
    token: str | None = None
    certificate_path: str | None = None
    certificate_data: str | bytes | None = None
    private_key_path: str | None = None
    private_key_data: str | bytes | None = None
    default_namespace: str | None = None
    proxy_url: str | None = None
    trust_env: bool = False
    priority: int = 0
    expiration: datetime.datetime | None = None

    def __post_init__(self) -> None:
        if self.ca_path and self.ca_data:
            raise ValueError("Both CA path & data are set. Need only one.")
        if self.certificate_path and self.certificate_data:
            raise ValueError("Both certificate path & data are set. Need only one.")
        if self.private_key_path and self.private_key_data:
            raise ValueError("Both private key path & data are set. Need only one.")

    def for_engine(self, token_path: str | None = None) -> dict[str, Any]:
        """The core's form: PEM texts (kubeconfigs keep them base64-encoded), paths as strings."""
        def pem(data: str | bytes | None) -> str | None:
            if data is None:
                return None
            text = data.decode('ascii') if isinstance(data, bytes) else data
            return text if text.startswith('-----BEGIN ') else base64.b64decode(text).decode('ascii')

        def path(value: Any) -> str | None:
            return os.fspath(value) if value is not None else None

        return {
            'server': self.server, 'ca_path': path(self.ca_path), 'ca_data': pem(self.ca_data),
            'insecure': self.insecure, 'username': self.username, 'password': self.password,
            # A token file (re-read as it rotates) replaces the token read once: kube prefers inline tokens.
            'scheme': self.scheme, 'token': None if token_path else self.token, 'token_path': token_path,
            'certificate_path': path(self.certificate_path), 'certificate_data': pem(self.certificate_data),
            'private_key_path': path(self.private_key_path), 'private_key_data': pem(self.private_key_data),
            'default_namespace': self.default_namespace,
            'proxy_url': self.proxy_url, 'trust_env': self.trust_env,
            'expiration': _timestamp(self.expiration),
        }


@dataclasses.dataclass(frozen=True, kw_only=True)
class AiohttpSession:
    """Kopf's custom ``aiohttp`` session from a login handler. This engine's core has its own
    HTTP client, so it cannot use one: returning it fails the login with what to do instead."""

    server: str
    priority: int = 0
    default_namespace: str | None = None
    expiration: datetime.datetime | None = None
    aiohttp_session: Any = None


def login_with_service_account(*, settings: Any, **_: Any) -> ConnectionInfo | None:
    """Credentials of the pod's service account, if running in a cluster."""
    token_path = os.path.join(SERVICE_ACCOUNT, 'token')
    if not os.path.exists(token_path):
        return None
    with open(token_path, encoding='utf-8') as f:
        token = f.read().strip()
    namespace: str | None = None
    ns_path = os.path.join(SERVICE_ACCOUNT, 'namespace')
    if os.path.exists(ns_path):
        with open(ns_path, encoding='utf-8') as f:
            namespace = f.read().strip()
    ca_path = os.path.join(SERVICE_ACCOUNT, 'ca.crt')
    return ConnectionInfo(
        server='https://kubernetes.default.svc',
        ca_path=ca_path if os.path.exists(ca_path) else None,
        token=token or None,
        default_namespace=namespace or None,
        trust_env=settings.networking.trust_env,
        priority=PRIORITY_OF_SERVICE_ACCOUNT,
    )


def login_with_kubeconfig(*, settings: Any, **_: Any) -> ConnectionInfo | None:
    """Credentials of the current context of ``$KUBECONFIG`` (or ``~/.kube/config``)."""
    kubeconfig = os.environ.get('KUBECONFIG')
    if not kubeconfig and os.path.exists(os.path.expanduser('~/.kube/config')):
        kubeconfig = '~/.kube/config'
    if not kubeconfig:
        return None
    paths = [os.path.expanduser(p.strip()) for p in kubeconfig.split(os.pathsep) if p.strip()]
    context, cluster, user = kubeconfig_entries(paths)
    provider_token = user.get('auth-provider', {}).get('config', {}).get('access-token')
    return ConnectionInfo(
        server=cluster.get('server'),
        ca_path=cluster.get('certificate-authority'),
        ca_data=cluster.get('certificate-authority-data'),
        insecure=cluster.get('insecure-skip-tls-verify'),
        certificate_path=user.get('client-certificate'),
        certificate_data=user.get('client-certificate-data'),
        private_key_path=user.get('client-key'),
        private_key_data=user.get('client-key-data'),
        username=user.get('username'),
        password=user.get('password'),
        token=user.get('token') or provider_token,
        default_namespace=context.get('namespace'),
        proxy_url=cluster.get('proxy-url'),
        trust_env=settings.networking.trust_env,
        priority=PRIORITY_OF_KUBECONFIG,
    )


def kubeconfig_entries(paths: Sequence[str]) -> tuple[Any, Any, Any]:
    """The current context of the kubeconfig files, with its cluster and user entries (dicts)."""
    current: str | None = None
    sections: dict[str, dict[str, Any]] = {'contexts': {}, 'clusters': {}, 'users': {}}
    inner = {'contexts': 'context', 'clusters': 'cluster', 'users': 'user'}
    for path in paths:  # the first file that names an item wins, as in kubectl
        with open(path, encoding='utf-8') as f:
            # The core's YAML parser (kube's), not PyYAML, whose import costs memory.
            try:
                config = services.parse_kubeconfig(f.read()) or {}
            except ValueError as e:  # (PyYAML's error would name the file too)
                raise ValueError(f"The kubeconfig {path!r} is not valid YAML: {e}") from e
        current = current if current is not None else config.get('current-context')
        for section, key in inner.items():
            for item in config.get(section) or []:
                sections[section].setdefault(item['name'], item.get(key) or {})
    if current is None:
        raise LoginError('Current context is not set in kubeconfigs.')
    context = sections['contexts'][current]
    return context, sections['clusters'][context['cluster']], sections['users'][context['user']]
