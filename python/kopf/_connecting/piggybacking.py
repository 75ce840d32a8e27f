"""Piggybacking: the login handlers that borrow the credentials of the client libraries
an operator has installed (pykube-ng, ``kubernetes``, ``kubernetes_asyncio``), configuring
those clients for the handlers on the way, as Kopf does; and the choice of the fallbacks.

Kopf imports each installed client at the login, whether the operator uses it or not: a
large part of every operator process with both installed (most operators get them as
dependencies of dependencies; docs/benchmarks.md, "Figures behind the code"). Here, a
client that the operator has not imported by the login is not imported for it: when its
credentials are plain (a token or a client certificate in one kubeconfig file, or the pod's
service account), they are read as the client would read them, and the ``kubernetes``
client is configured (``load_kube_config()`` or ``load_incluster_config()``, as Kopf calls
them) when something first imports it.
Anything else (exec plugins, auth-providers, merged kubeconfigs, a partial service
account) is left to the client itself, imported at the login as in Kopf.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import inspect
import os
import sys
import types
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, cast

from kopf._connecting.credentials import (
    PRIORITY_OF_ASYNC_CLIENT,
    PRIORITY_OF_CLIENT,
    PRIORITY_OF_PYKUBE,
    SERVICE_ACCOUNT,
    ConnectionInfo,
    kubeconfig_entries,
    login_with_kubeconfig,
    login_with_service_account,
)
from kopf._structures.errors import LoginError

if TYPE_CHECKING:
    import importlib.abc
    import importlib.machinery


def login_via_pykube(*, logger: Any, settings: Any, **_: Any) -> ConnectionInfo | None:
    """Credentials as pykube-ng finds them: in-cluster, else the kubeconfig."""
    plain = _plain_credentials() if 'pykube' not in sys.modules else None
    if plain is not None:  # pykube keeps no configuration of its own: nothing to do later
        logger.debug("Pykube is configured in cluster with service account." if plain.in_cluster else
                     "Pykube is configured via kubeconfig file.")
        return plain.as_pykube(settings)
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
    plain = _plain_credentials() if 'kubernetes' not in sys.modules else None
    if plain is not None and _installed('kubernetes'):
        _configure_on_import('kubernetes', lambda: _configure_client(logger))
        logger.debug("Client is not imported yet: it will be configured when first imported.")
        return plain.as_client(settings)
    try:
        import kubernetes.config
    except ImportError:
        return None
    _configure_client(logger, failing=True)
    config = kubernetes.client.Configuration.get_default_copy()
    return _from_client_config(config, settings, PRIORITY_OF_CLIENT, header=sync_client_header(config))


def _configure_client(logger: Any, *, failing: bool = False) -> None:
    """Configure the ``kubernetes`` client's default, as Kopf does at the login."""
    import kubernetes.config
    try:
        kubernetes.config.load_incluster_config()
        logger.debug("Client is configured in cluster with service account.")
    except kubernetes.config.ConfigException:
        try:
            # KUBECONFIG as it is now: the client's default is as it was when it was imported.
            kubernetes.config.load_kube_config(config_file=os.environ.get('KUBECONFIG') or None)
            logger.debug("Client is configured via kubeconfig file.")
        except kubernetes.config.ConfigException:
            if failing:
                raise LoginError("Cannot authenticate the client library "
                                 "neither in-cluster, nor via kubeconfig.") from None
            # At an import in a handler: the import goes on; the handler's calls will fail.
            logger.error("Cannot configure the client library neither in-cluster, nor via kubeconfig.")


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
            await kubernetes_asyncio.config.load_kube_config(config_file=os.environ.get('KUBECONFIG') or None)
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


@dataclasses.dataclass(frozen=True)
class _Plain:
    """Credentials that both clients would read the same, read without them."""

    in_cluster: bool
    server: str
    namespace: str | None
    ca_path: str | None = None
    ca_data: str | None = None
    insecure: bool | None = None
    token: str | None = None
    certificate_path: str | None = None
    certificate_data: str | None = None
    private_key_path: str | None = None
    private_key_data: str | None = None
    proxy_url: str | None = None

    def _info(self, settings: Any, **fields: Any) -> ConnectionInfo:
        return ConnectionInfo(
            server=self.server, ca_path=self.ca_path, ca_data=self.ca_data,
            certificate_path=self.certificate_path, certificate_data=self.certificate_data,
            private_key_path=self.private_key_path, private_key_data=self.private_key_data,
            trust_env=settings.networking.trust_env, **fields)

    def as_pykube(self, settings: Any) -> ConnectionInfo:
        """What ``login_via_pykube`` gives when it imports pykube-ng."""
        return self._info(settings, insecure=self.insecure, token=self.token, proxy_url=self.proxy_url,
                          default_namespace=self.namespace or 'default', priority=PRIORITY_OF_PYKUBE)

    def as_client(self, settings: Any) -> ConnectionInfo:
        """What ``login_via_client`` gives when it imports the client (which keeps no namespace
        and no proxy in Kopf's reading, and sends the token as a ``Bearer``)."""
        return self._info(settings, insecure=bool(self.insecure), token=self.token,
                          scheme=('bearer' if self.in_cluster else 'Bearer') if self.token else None,
                          priority=PRIORITY_OF_CLIENT)


# The kubeconfig user's keys that both clients read alike; any other (exec, auth-provider,
# username & password, token files) is for the client libraries themselves.
_PLAIN_USER_KEYS = frozenset({'token', 'client-certificate', 'client-certificate-data',
                              'client-key', 'client-key-data'})


def _plain_credentials() -> _Plain | None:
    """The credentials the clients would find, if plain; ``None`` if only they can read them."""
    token_path = os.path.join(SERVICE_ACCOUNT, 'token')
    if os.path.exists(token_path):  # both clients try the service account first
        host, port = os.environ.get('KUBERNETES_SERVICE_HOST'), os.environ.get('KUBERNETES_SERVICE_PORT')
        files = [token_path, os.path.join(SERVICE_ACCOUNT, 'ca.crt'), os.path.join(SERVICE_ACCOUNT, 'namespace')]
        overridden = 'PYKUBE_KUBERNETES_SERVICE_HOST' in os.environ or 'PYKUBE_KUBERNETES_SERVICE_PORT' in os.environ
        if not host or not port or overridden or not all(os.path.isfile(f) and os.path.getsize(f) for f in files):
            return None
        with open(files[0], encoding='utf-8') as f:
            token = f.read()
        with open(files[2], encoding='utf-8') as f:
            namespace = f.read()
        return _Plain(in_cluster=True, server=f"https://{f'[{host}]' if ':' in host else host}:{port}",
                      namespace=namespace, ca_path=files[1], token=token)

    # One kubeconfig file: pykube-ng reads only one (the client merges several).
    kubeconfig = os.environ.get('KUBECONFIG') or '~/.kube/config'
    path = os.path.expanduser(kubeconfig)
    if os.pathsep in kubeconfig or not os.path.isfile(path):
        return None
    try:
        context, cluster, user = kubeconfig_entries([path])
    except (LoginError, KeyError, ValueError, TypeError):
        return None  # let the clients say what is wrong, as in Kopf
    if not cluster.get('server') or not set(user) <= _PLAIN_USER_KEYS:
        return None

    def relative(value: str | None) -> str | None:  # both clients read paths from the file's folder
        return os.path.join(os.path.dirname(path), os.path.expanduser(value)) if value else None

    return _Plain(
        in_cluster=False, server=cluster['server'], namespace=context.get('namespace'),
        ca_path=relative(cluster.get('certificate-authority')), ca_data=cluster.get('certificate-authority-data'),
        insecure=cluster.get('insecure-skip-tls-verify'), token=user.get('token'),
        certificate_path=relative(user.get('client-certificate')),
        certificate_data=user.get('client-certificate-data'),
        private_key_path=relative(user.get('client-key')), private_key_data=user.get('client-key-data'),
        proxy_url=cluster.get('proxy-url'))


class _ThenConfigure:
    """A module's own loader, then a call once its code has run (and its submodules with it).
    (Not a subclass of ``importlib.abc.Loader``: importing that imports importlib.resources,
    with pathlib, tempfile, bz2 and lzma, into every operator.)"""

    def __init__(self, loader: importlib.abc.Loader, then: Callable[[], None]) -> None:
        self._loader = loader
        self._then = then

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: types.ModuleType) -> None:
        self._loader.exec_module(module)
        self._then()

    def __getattr__(self, name: str) -> Any:  # resource readers, source getters
        return getattr(self._loader, name)


class _OnImport:
    """Finds nothing itself: it only puts its call after the named module's first import."""

    def __init__(self, name: str, then: Callable[[], None]) -> None:
        self.name = name
        self._then = then

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: types.ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)  # once; the finders after it find the module itself
        spec = importlib.util.find_spec(fullname)
        if spec is not None and spec.loader is not None:
            spec.loader = cast('importlib.abc.Loader', _ThenConfigure(spec.loader, self._then))
        return spec


def _configure_on_import(name: str, then: Callable[[], None]) -> None:
    """Call ``then`` after the first import of the module (once, even if logged in again)."""
    if not any(isinstance(finder, _OnImport) and finder.name == name for finder in sys.meta_path):
        sys.meta_path.insert(0, _OnImport(name, then))


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
