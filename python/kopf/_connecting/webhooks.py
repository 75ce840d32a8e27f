"""Admission webhook servers and tunnels (``settings.admission.server``).

A server is a callable that takes the operator's ``webhookfn`` and yields the client
configs by which the apiserver reaches it. ``kopf.WebhookServer`` and its kin listen in
the core (hyper and rustls; a self-signed certificate is generated there when none is
given, no extra packages needed); the reviews run in the core, the handlers in Python.
Custom servers receive requests themselves and pass them to ``webhookfn``.
"""

from __future__ import annotations

import asyncio
import base64
import contextvars
import dataclasses
import functools
import hashlib
import ipaddress
import json
import logging
import os
import ssl
import urllib.parse
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Collection, Iterable, Mapping
from typing import Any, Literal, Protocol, Self, TypedDict

from kopf._bridge import services
from kopf._structures.errors import OperatorError

logger = logging.getLogger('kopf._kits.webhooks')

# The operator's connection (its API server's URL, for detecting the kind of cluster).
connection_var: contextvars.ContextVar[dict[str, Any]] = contextvars.ContextVar('connection_var')

StrPath = str | os.PathLike[str]
Headers = dict[str, str]
"""An admission request's HTTP headers (the ``headers`` kwarg of admission handlers)."""
SSLPeer = dict[str, Any]
"""The client's certificate as ``ssl.SSLSocket.getpeercert()`` describes it (the ``sslpeer`` kwarg)."""
Operation = Literal['CREATE', 'UPDATE', 'DELETE', 'CONNECT']
"""An admission request's operation (the ``operation`` kwarg)."""


class UserInfo(TypedDict):
    """Who makes an admission request (the ``userinfo`` kwarg)."""
    username: str
    uid: str
    groups: list[str]


class WebhookClientConfigService(TypedDict, total=False):
    """The service of a webhook's client config (where the API server sends the reviews)."""
    namespace: str | None
    name: str | None
    path: str | None
    port: int | None


class WebhookClientConfig(TypedDict, total=False):
    """How the apiserver reaches the webhooks; put into managed configurations as it is,
    with each handler's id appended to the URL's (or the service's) path."""
    caBundle: str | None
    url: str | None
    service: WebhookClientConfigService | None


class WebhookFn(Protocol):
    """The operator's function that custom servers call with each admission review."""

    def __call__(self, request: dict[str, Any], *, webhook: str | None = None,
                 headers: Headers | None = None, sslpeer: SSLPeer | None = None) -> Awaitable[dict[str, Any]]: ...


WebhookServerProtocol = Callable[[WebhookFn], AsyncIterator[WebhookClientConfig]]
"""What ``settings.admission.server`` is: called with the reviewing function, it yields client configs."""


class WebhookError(Exception):
    """A webhook request is bad (not the API operation under review)."""


class MissingDataError(WebhookError):
    """The admission review lacks data that the handlers need."""


class UnknownResourceError(WebhookError):
    """The admission review is about a resource that no admission handler serves."""


class AmbiguousResourceError(WebhookError):
    """The admission review's resource matches several served resources."""


class MissingDependencyError(ImportError):
    """A server or tunnel needs a package that is not installed."""


_ERRORS: dict[int, type[WebhookError]] = {404: UnknownResourceError, 409: AmbiguousResourceError}


def webhookfn(engine: Any) -> WebhookFn:
    """The operator's ``webhookfn``: reviews run by its core (``kopf._engine.Operator``)."""
    async def fn(request: dict[str, Any], *, webhook: str | None = None, headers: Headers | None = None,
                 sslpeer: SSLPeer | None = None, reason: Any = None) -> dict[str, Any]:
        body = json.dumps(request).encode()
        hint = str(reason) if reason is not None else None  # only the handlers of this kind
        status, text = await engine.review(body, webhook, list((headers or {}).items()),
                                           json.dumps(sslpeer or {}), hint)
        if status != 200:
            error = _ERRORS.get(status, MissingDataError if 'missing' in text else WebhookError)
            raise error(text)
        response: dict[str, Any] = json.loads(text)
        return response
    fn._kopf_engine = engine  # type: ignore[attr-defined]  # our servers serve it in the core
    return fn


class WebhookContextManager:
    """Servers and tunnels as optional async context managers: on exit, the generators
    that their calls made are closed at once (their listening sockets with them)."""

    def __init__(self) -> None:
        self._generators: list[AsyncGenerator[WebhookClientConfig, None]] = []

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        call = cls.__dict__.get('__call__')
        if call is not None:
            @functools.wraps(call)
            def remembering(self: WebhookContextManager, fn: WebhookFn) -> Any:
                generator = call(self, fn)
                self._generators.append(generator)
                return generator
            cls.__call__ = remembering  # type: ignore[method-assign]

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *_: Any) -> None:
        for generator in reversed(self._generators):
            try:
                await generator.aclose()
            except (GeneratorExit, StopAsyncIteration):
                pass
        self._generators.clear()


def _accessible(addr: str | None) -> str:
    """An address that clients can reach for a listening one (`0.0.0.0`, `::` are not)."""
    if addr is None:
        return 'localhost'
    try:
        ip = ipaddress.ip_address(addr)
    except ValueError:
        return addr
    if ip.is_unspecified:
        return '127.0.0.1' if ip.version == 4 else '::1'
    return addr


def _read_bytes(path: StrPath) -> bytes:
    # (Not `pathlib`: every operator imported it for these reads, with or without webhooks.)
    with open(path, 'rb') as f:
        return f.read()


def _url(scheme: str, host: str, port: int, path: str) -> str:
    try:
        host = f'[{ipaddress.IPv6Address(host)}]'
    except ValueError:
        pass
    default = (scheme, port) in (('http', 80), ('https', 443))
    netloc = host if default else f'{host}:{port}'
    return urllib.parse.urlunsplit([scheme, netloc, path, '', ''])


class WebhookServer(WebhookContextManager):
    """A local HTTPS endpoint for the admission webhooks (HTTP with ``insecure=True``).

    ``addr``/``port``: where to listen (all interfaces and a free port by default);
    ``path``: the webhooks' root path; ``host``: the host name in the webhooks' URLs (else
    ``addr``). ``certfile``/``pkeyfile`` (``password`` for an encrypted PKCS#8 key): the
    server's certificate, else a self-signed one is generated for ``host``, ``addr`` and
    ``extra_sans``. ``cadata``/``cafile``: the CA bundle for the apiserver (else the
    certificate itself); ``cadump``: a file to write that bundle to. ``verify_mode`` and
    ``verify_cafile``/``verify_capath``/``verify_cadata``: client certificates, whose
    details the handlers get as ``sslpeer``. Certificate files are re-read every
    ``file_check_interval`` seconds; the server restarts when they change.
    """

    DEFAULT_HOST: str | None = None

    def __init__(self, *, addr: str | None = None, port: int | None = None, path: str | None = None,
                 host: str | None = None, cadata: bytes | None = None, cafile: StrPath | None = None,
                 cadump: StrPath | None = None, context: ssl.SSLContext | None = None,
                 insecure: bool = False, certfile: StrPath | None = None, pkeyfile: StrPath | None = None,
                 password: str | None = None, extra_sans: Iterable[str] = (),
                 verify_mode: ssl.VerifyMode | None = None, verify_cafile: StrPath | None = None,
                 verify_capath: StrPath | None = None, verify_cadata: str | bytes | None = None,
                 file_check_interval: float = 60.) -> None:
        super().__init__()
        if context is not None:
            raise ValueError("WebhookServer(context=...) is not supported: the server runs in the engine's "
                             "core with rustls, not Python's ssl; pass certfile=/pkeyfile=/password= and "
                             "verify_mode=/verify_cafile=/verify_capath=/verify_cadata= instead.")
        self.addr, self.port, self.path, self.host = addr, port, path, host
        self.cadata, self.cafile, self.cadump = cadata, cafile, cadump
        self.context = context
        self.insecure = insecure
        self.certfile, self.pkeyfile, self.password = certfile, pkeyfile, password
        self.extra_sans = extra_sans
        self.verify_mode = verify_mode
        self.verify_cafile, self.verify_capath, self.verify_cadata = verify_cafile, verify_capath, verify_cadata
        self.file_check_interval = file_check_interval

    async def __call__(self, fn: WebhookFn) -> AsyncIterator[WebhookClientConfig]:
        engine = getattr(fn, '_kopf_engine', None)
        if engine is None:
            raise TypeError("kopf.WebhookServer serves the operator's own webhookfn only (it listens in the "
                            "engine's core); a custom function needs a custom server.")
        while True:
            serving = await engine.serve_webhooks(json.dumps(self._options()))
            try:
                scheme = 'http' if self.insecure else 'https'
                path = self.path or ''
                logger.debug(f"Listening for webhooks at {_url(scheme, self.addr or '*', serving.port, path)}")
                host = self.host or self.DEFAULT_HOST or _accessible(self.addr)
                url = _url(scheme, host, serving.port, path)
                logger.debug(f"Accessing the webhooks at {url}")
                client_config = WebhookClientConfig(url=url)
                cadata = self._cadata(serving.cert_pem)
                if cadata is not None:
                    client_config['caBundle'] = base64.b64encode(cadata).decode('ascii')
                    if self.cadump is not None:
                        with open(self.cadump, 'wb') as f:
                            f.write(cadata)
                yield client_config
                await self._until_files_change()
                logger.debug("Restarting with the renewed SSL certificate files.")
            finally:
                serving.stop()

    def _options(self) -> dict[str, Any]:
        host = self.host or self.DEFAULT_HOST
        addr = _accessible(self.addr)
        cas: list[str] = []
        if self.verify_cafile is not None:
            with open(self.verify_cafile, encoding='utf-8') as f:
                cas.append(f.read())
        if self.verify_capath is not None:
            for entry in sorted(os.scandir(self.verify_capath), key=lambda entry: entry.name):
                if entry.is_file():
                    with open(entry.path, encoding='utf-8', errors='replace') as f:
                        cas.append(f.read())
        if self.verify_cadata is not None:
            data = self.verify_cadata
            cas.append(data.decode() if isinstance(data, bytes) else data)
        mode = {ssl.CERT_NONE: 'none', ssl.CERT_OPTIONAL: 'optional', ssl.CERT_REQUIRED: 'required'}
        return {
            'addr': self.addr, 'port': self.port, 'path': (self.path or '').rstrip('/'),
            'insecure': self.insecure,
            'certfile': str(self.certfile) if self.certfile is not None else None,
            'pkeyfile': str(self.pkeyfile) if self.pkeyfile is not None else None,
            'password': self.password,
            'hostnames': [host or addr, addr, *self.extra_sans],
            'verify_mode': mode[self.verify_mode] if self.verify_mode is not None else None,
            'verify_cas': cas,
        }

    def _cadata(self, cert_pem: bytes | None) -> bytes | None:
        """The CA bundle for the apiserver: a generated certificate is its own CA; else the
        given bundle, or the given certificate."""
        if cert_pem is not None and (self.certfile is None or self.pkeyfile is None):
            return cert_pem
        if self.cadata is not None:
            return self.cadata
        if self.cafile is not None:
            return _read_bytes(self.cafile)
        if self.certfile is not None and not self.insecure:
            return _read_bytes(self.certfile)
        return None

    async def _until_files_change(self) -> None:
        """Mounted secrets change without events: compare a digest of the files now and then
        (only the digest is kept, not the secrets)."""
        paths = [p for p in (self.certfile, self.pkeyfile, self.cafile) if p is not None]
        def digest() -> str:
            hasher = hashlib.sha256()
            for path in paths:
                hasher.update(_read_bytes(path))
            return hasher.hexdigest()
        initial = digest()
        while True:
            await asyncio.sleep(self.file_check_interval)
            if paths and digest() != initial:
                return


class WebhookK3dServer(WebhookServer):
    """A local server reachable from inside K3d/K3s as ``host.k3d.internal``."""
    DEFAULT_HOST = 'host.k3d.internal'


class WebhookMinikubeServer(WebhookServer):
    """A local server reachable from inside Minikube as ``host.minikube.internal``."""
    DEFAULT_HOST = 'host.minikube.internal'


class WebhookDockerDesktopServer(WebhookServer):
    """A local server reachable from inside Docker Desktop as ``host.docker.internal``."""
    DEFAULT_HOST = 'host.docker.internal'


class WebhookNgrokTunnel(WebhookContextManager):
    """A local HTTP server tunnelled by ngrok (``pyngrok`` must be installed) to a public
    HTTPS URL; ``token``/``region``/``binary`` configure ngrok. The URL is not protected:
    for development only."""

    def __init__(self, *, addr: str | None = None, port: int | None = None, path: str | None = None,
                 token: str | None = None, region: str | None = None, binary: StrPath | None = None) -> None:
        super().__init__()
        self.addr, self.port, self.path = addr, port, path
        self.token, self.region, self.binary = token, region, binary

    async def __call__(self, fn: WebhookFn) -> AsyncIterator[WebhookClientConfig]:
        try:
            from pyngrok import conf, ngrok  # type: ignore[import-not-found]
        except ImportError:
            raise MissingDependencyError(
                "The ngrok webhook tunnel needs the pyngrok package: run `pip install pyngrok`.") from None
        if self.binary is not None:
            conf.get_default().ngrok_path = str(self.binary)
        if self.region is not None:
            conf.get_default().region = self.region
        if self.token is not None:
            ngrok.set_auth_token(self.token)
        loop = asyncio.get_running_loop()
        tunnel: Any = None
        async with WebhookServer(addr=self.addr, port=self.port, path=self.path, insecure=True) as server:
            try:
                async for client_config in server(fn):
                    if tunnel is not None:
                        await loop.run_in_executor(None, ngrok.disconnect, tunnel.public_url)
                    port = urllib.parse.urlparse(client_config['url']).port
                    connect = functools.partial(ngrok.connect, f'{port}', bind_tls=True)
                    tunnel = await loop.run_in_executor(None, connect)
                    url = f"{tunnel.public_url}{self.path or ''}"
                    logger.debug(f"Accessing the webhooks at {url}")
                    yield WebhookClientConfig(url=url)  # ngrok's certificate is publicly trusted
            finally:
                if tunnel is not None:
                    await loop.run_in_executor(None, ngrok.disconnect, tunnel.public_url)


async def _guess_host() -> str | None:
    """The host name of a local cluster's VM for the operator's machine, from the API
    server's certificate (K3d/K3s, Minikube, Docker Desktop); None if none is recognised."""
    connection = connection_var.get(None)
    server = urllib.parse.urlsplit(connection['server']) if connection else None
    if server is None or server.hostname is None:
        return None
    loop = asyncio.get_running_loop()
    address = (server.hostname, server.port or 443)
    try:
        pem = await loop.run_in_executor(None, functools.partial(ssl.get_server_certificate, address, timeout=10))
    except OSError as e:
        logger.debug(f"Cannot read the API server's certificate: {e}")
        return None
    cert = json.loads(services.describe_certificate(pem.encode()))  # as ``getpeercert()`` has it
    def names(key: str, attribute: str) -> list[str]:
        return [value for rdn in cert.get(key, []) for name, value in rdn if name == attribute]
    issuer_cn, subject_cn = names('issuer', 'commonName'), names('subject', 'commonName')
    subject_org = names('subject', 'organizationName')
    sans = [value for _, value in cert.get('subjectAltName', [])]
    if 'k3s' in subject_cn or 'k3s' in subject_org or any(cn.startswith('k3s-') for cn in issuer_cn):
        return WebhookK3dServer.DEFAULT_HOST
    if 'minikube' in subject_cn or 'minikubeCA' in issuer_cn:
        return WebhookMinikubeServer.DEFAULT_HOST
    if 'docker-for-desktop' in sans:
        return WebhookDockerDesktopServer.DEFAULT_HOST
    return None


class WebhookAutoServer(WebhookServer):
    """A local server with the host name of a recognised local cluster (K3d/K3s, Minikube,
    Docker Desktop; from the API server's certificate), else a plain local server."""

    async def __call__(self, fn: WebhookFn) -> AsyncIterator[WebhookClientConfig]:
        host = self.DEFAULT_HOST = await _guess_host()
        if host is None:
            logger.debug("Cluster detection failed, running a simple local server.")
        else:
            logger.debug(f"Cluster detection found the hostname: {host}")
        async for client_config in super().__call__(fn):
            yield client_config


class WebhookAutoTunnel(WebhookContextManager):
    """As ``WebhookAutoServer`` for a recognised local cluster; else an ngrok tunnel."""

    def __init__(self, *, addr: str | None = None, port: int | None = None, path: str | None = None) -> None:
        super().__init__()
        self.addr, self.port, self.path = addr, port, path

    async def __call__(self, fn: WebhookFn) -> AsyncIterator[WebhookClientConfig]:
        server: WebhookServer | WebhookNgrokTunnel
        host = await _guess_host()
        if host is None:
            logger.debug("Cluster detection failed, using an ngrok tunnel.")
            server = WebhookNgrokTunnel(addr=self.addr, port=self.port, path=self.path)
        else:
            logger.debug(f"Cluster detection found the hostname: {host}")
            server = WebhookServer(addr=self.addr, port=self.port, path=self.path, host=host)
        async with server:
            async for client_config in server(fn):
                yield client_config


async def serve(server: Any, engine: Any) -> None:
    """Run the operator's webhook server: each client config it yields goes to the core
    (for the managed configurations)."""
    fn = webhookfn(engine)
    if hasattr(server, '__aenter__'):
        async with server as entered:
            async for client_config in entered(fn):
                engine.webhooks_configured(json.dumps(client_config))
    else:
        async for client_config in server(fn):
            engine.webhooks_configured(json.dumps(client_config))


@dataclasses.dataclass(frozen=True)
class Installer:
    """A way of installing the operator that configures its webhooks itself (the webhook
    configurations, the CRDs' conversion) and mounts the server's certificate in the pod: the
    pod has ``port_variable`` (the server's port) and the certificate in a folder."""
    owner: str  # who configures the webhooks, in the log line: "OLM", "the chart"
    pod: str  # what such a pod is
    port_variable: str
    folder_variable: str  # (overrides the folder, for tests)
    folder: str
    certfile: str
    pkeyfile: str
    file_check_interval: float  # how often the files are compared: a renewed certificate is served


# An operator installed by OLM (the Operator Lifecycle Manager) from a bundle with webhook
# definitions (`kopf olm generate`): OLM's Service sends the reviews to the port, OLM's certificate
# is mounted in the folder.
OLM = Installer(owner='OLM', pod='a pod of an OLM bundle', port_variable='KOPF_OLM_WEBHOOK_PORT',
                folder_variable='KOPF_OLM_CERTIFICATES', folder='/apiserver.local.config/certificates',
                certfile='apiserver.crt', pkeyfile='apiserver.key', file_check_interval=60.)
# An operator installed by a chart of `kopf deploy generate`: the certificate is cert-manager's
# (a Secret of type kubernetes.io/tls), renewed in place; the kubelet updates the mounted files.
CHART = Installer(owner='the chart', pod='a pod of a chart of `kopf deploy generate`',
                  port_variable='KOPF_CHART_WEBHOOK_PORT', folder_variable='KOPF_CHART_CERTIFICATES',
                  folder='/etc/kopf/webhooks', certfile='tls.crt', pkeyfile='tls.key', file_check_interval=10.)
INSTALLERS = (OLM, CHART)


def serve_as_installed(settings: Any, environ: Mapping[str, str] = os.environ) -> None:
    """In a pod of an OLM bundle or of a generated chart: serve the webhooks where the installed
    Service sends the reviews, with the mounted certificate, and leave their configuration to
    the installer, whatever the startup handlers chose: two managers of the same configuration
    would undo each other's changes, and the installed RBAC grants no rights for it."""
    installers = [installer for installer in INSTALLERS if installer.port_variable in environ]
    if len(installers) > 1:
        raise OperatorError(f"Both ${OLM.port_variable} and ${CHART.port_variable} are set: a pod is installed by "
                            f"one of OLM or a chart, which then configures its webhooks.")
    if not installers:
        return
    [installer] = installers
    port_text = environ[installer.port_variable]
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise OperatorError(f"${installer.port_variable}={port_text!r} is not a port number.")
    folder = environ.get(installer.folder_variable) or installer.folder
    certfile, pkeyfile = os.path.join(folder, installer.certfile), os.path.join(folder, installer.pkeyfile)
    absent = [path for path in (certfile, pkeyfile) if not os.path.isfile(path)]
    owners = f"{installer.owner}'s"
    if absent:
        raise OperatorError(f"${installer.port_variable} is set ({installer.pod}), but {owners} serving "
                            f"certificate is not mounted: {', '.join(absent)} absent.")
    chosen = {'settings.admission.server': settings.admission.server,
              'settings.admission.managed': settings.admission.managed,
              'settings.conversion.managed': settings.conversion.managed or None,
              'settings.conversion.cleanup': settings.conversion.cleanup or None}
    settings.admission.server = WebhookServer(addr='0.0.0.0', port=int(port_text), certfile=certfile,
                                              pkeyfile=pkeyfile, file_check_interval=installer.file_check_interval)
    settings.admission.managed = None
    settings.conversion.managed = False
    settings.conversion.cleanup = False
    overridden = ', '.join(f"{name}={value!r}" for name, value in chosen.items() if value is not None)
    logger.info(f"Serving the webhooks on port {port_text} with {owners} certificate from {folder}; "
                f"{installer.owner} configures them (${installer.port_variable}: {installer.pod})"
                + (f"; instead of {overridden}" if overridden else "") + ".")


def check_configured(server: Any, handlers: Collection[Any], conversions: Collection[Any] = ()) -> None:
    if handlers and server is None:
        raise Exception("Admission handlers exist, but no admission server/tunnel is configured in "
                        "`settings.admission.server`. See kopf.WebhookServer and its kin.")
    if conversions and server is None:
        raise Exception("Conversion handlers exist, but no webhook server/tunnel is configured in "
                        "`settings.admission.server` (conversion reviews come to the same server). "
                        "See kopf.WebhookServer and its kin.")
