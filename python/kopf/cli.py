"""The ``kopf`` command: ``kopf run [PATHS] [-m MODULE]`` with Kopf's options and ``KOPF_*`` variables."""

from __future__ import annotations

import asyncio
import atexit
import dataclasses
import functools
import os
import sys
import threading
from collections.abc import Callable, Collection
from typing import Any

import click

from kopf._bridge import services
from kopf._connecting import peering as _peering
from kopf._handling.activities import authenticate
from kopf._handling.handlers import OperatorRegistry, get_default_registry, set_default_registry
from kopf._logs import formatting as _formatting
from kopf._logs import loggers as _logging
from kopf._operating import loading as _loading
from kopf._running import operator as _running
from kopf._structures.errors import LoginError, OperatorError
from kopf._structures.settings import OperatorSettings
from kopf._structures.versions import __version__

# The options that several commands share, described once.
_NAMESPACE = ("Serve the objects of this namespace; repeat for more. Globs ('dev-*') and "
              "exclusions ('!kube-*') as in Kopf.")
_ALL_NAMESPACES = "Serve the objects of all namespaces and cluster-scoped ones."
_MODULE = "Import this Python module (dotted name) for its handlers; repeat for more."
_ID = "Who this is in the peering (default: $POD_ID if set, else user@host)."
_DEV = "The same as --priority=666: a developer's copy pauses the others."


@dataclasses.dataclass()
class CLIControls:
    """What ``KopfRunner`` passes to the CLI that the command line cannot."""

    ready_flag: Any = None
    stop_flag: Any = None
    vault: Any = None
    registry: OperatorRegistry | None = None
    settings: OperatorSettings | None = None
    loop: asyncio.AbstractEventLoop | None = None


def logging_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The logging options, common to all commands."""
    @click.option('-v', '--verbose', is_flag=True,
                  help="Log at the DEBUG level: what each object goes through, with its body and patches.")
    @click.option('-d', '--debug', is_flag=True, help="As --verbose, and asyncio's own debug lines too.")
    @click.option('-q', '--quiet', is_flag=True, help="Log only warnings and errors.")
    @click.option('--log-format', type=click.Choice(_formatting.LogFormat, case_sensitive=False), default='full',
                  help="How log lines look: plain (the message), full (time, logger, level), json (one object a line).")
    @click.option('--log-refkey', type=str,
                  help="In the json format, the key under which each line names its object (default: 'object').")
    @click.option('--log-prefix/--no-log-prefix', default=None,
                  help="Start each object's lines with its [namespace/name] (default: in plain and full formats).")
    @functools.wraps(fn)
    def wrapper(verbose: bool, quiet: bool, debug: bool, log_format: _formatting.LogFormat = _formatting.LogFormat.FULL,
                log_prefix: bool | None = False, log_refkey: str | None = None, *args: Any, **kwargs: Any) -> Any:
        _logging.configure(debug=debug, verbose=verbose, quiet=quiet, log_format=log_format,
                           log_refkey=log_refkey, log_prefix=log_prefix)
        return fn(*args, **kwargs)
    return wrapper


@click.group(name='kopf', context_settings=dict(auto_envvar_prefix='KOPF'))
# The wheel's version is the core's (maturin takes it from Cargo.toml): no `importlib.metadata`
# (modules in every operator's process: docs/benchmarks.md, "Figures behind the code") to look it up.
@click.version_option(version=str(services.version), prog_name='kopf',
                      message=f'%(prog)s, version %(version)s (kopf-rs; compatible with Kopf {__version__})')
@click.make_pass_decorator(CLIControls, ensure=True)
def main(__controls: CLIControls) -> None:
    """The operator's command: run it, pause and resume its peers; make and check its RBAC and OLM bundle."""


def preload(paths: Collection[str], modules: Collection[str]) -> None:
    """Import the operator's files and modules; a missing or unloadable file is a usage error."""
    for path in paths:
        if not os.path.isfile(path):
            raise click.UsageError(f"The handlers' file {path!r} does not exist.")
    try:
        _loading.preload(paths, modules)
    except _loading.LoadingError as e:
        raise click.UsageError(str(e)) from None


@main.command()
@logging_options
@click.option('-A', '--all-namespaces', 'clusterwide', is_flag=True, help=_ALL_NAMESPACES)
@click.option('-n', '--namespace', 'namespaces', multiple=True, help=_NAMESPACE)
@click.option('--standalone', is_flag=True, default=None,
              help="Take part in no peering: handle the objects whatever other operators do.")
@click.option('--dev', is_flag=True, help=_DEV)
@click.option('-L', '--liveness', 'liveness_endpoint', type=str,
              help="Serve the health probe at this URL, e.g. http://0.0.0.0:8080/healthz.")
@click.option('-P', '--peering', 'peering_name', type=str, envvar='KOPF_RUN_PEERING',
              help="The peering object to meet other operators in (default: 'default' if it exists).")
@click.option('-p', '--priority', type=int,
              help="This operator's priority in its peering: the highest handles, the others pause (default: 0).")
@click.option('--lease', 'lease_name', type=str, envvar='KOPF_RUN_LEASE',
              help="Compete for this Lease: only its holder handles the objects (not in Kopf).")
@click.option('--shards', type=click.Choice(['auto']), envvar='KOPF_RUN_SHARDS',
              help="Share the objects among the replicas, each watching its shard (not in Kopf).")
@click.option('--metrics', 'metrics_address', type=str, envvar='KOPF_RUN_METRICS', metavar='[HOST:]PORT',
              help="Serve Prometheus metrics at http://HOST:PORT/metrics (not in Kopf).")
@click.option('--traces', 'traces_endpoint', type=str, envvar='KOPF_RUN_TRACES', metavar='URL',
              help="Export OpenTelemetry traces to this OTLP/HTTP collector, e.g. http://localhost:4318 "
                   "(not in Kopf; default: $OTEL_EXPORTER_OTLP_ENDPOINT if set).")
@click.option('--traces-ratio', type=click.FloatRange(0, 1), envvar='KOPF_RUN_TRACES_RATIO', metavar='RATIO',
              help="Keep this fraction of the traces, from 0 to 1 (not in Kopf; default: all).")
@click.option('-m', '--module', 'modules', multiple=True, help=_MODULE)
@click.argument('paths', nargs=-1)
@click.make_pass_decorator(CLIControls, ensure=True)
def run(__controls: CLIControls, paths: list[str], modules: list[str], peering_name: str | None,
        priority: int | None, dev: bool | None, standalone: bool | None, namespaces: Collection[str],
        clusterwide: bool, liveness_endpoint: str | None, lease_name: str | None, shards: str | None,
        metrics_address: str | None, traces_endpoint: str | None, traces_ratio: float | None) -> None:
    """ Start an operator process and handle all the requests.

    PATHS are the Python files of the handlers, imported in this order (each file's folder
    importable), after the modules of -m. """
    priority = 666 if dev else priority
    if os.environ.get('KOPF_RUN_NAMESPACE'):  # the legacy single-namespace variable
        namespaces = (*namespaces, os.environ['KOPF_RUN_NAMESPACE'])
    if namespaces and clusterwide:
        raise click.UsageError("Either --namespace or --all-namespaces can be used, not both.")
    if __controls.registry is not None:
        set_default_registry(__controls.registry)
    preload(paths=paths, modules=modules)
    loop = __controls.loop
    coro = _running.operator(
        standalone=standalone, namespaces=namespaces, clusterwide=clusterwide, priority=priority,
        peering_name=peering_name, lease_name=lease_name, shards=shards, metrics_address=metrics_address,
        traces_endpoint=traces_endpoint, traces_ratio=traces_ratio, liveness_endpoint=liveness_endpoint,
        registry=__controls.registry, settings=__controls.settings, stop_flag=__controls.stop_flag,
        ready_flag=__controls.ready_flag, vault=__controls.vault,
    )
    try:
        if loop is not None:
            loop.run_until_complete(coro)
        else:
            asyncio.run(coro)
    except (OperatorError, LoginError) as e:
        raise click.ClickException(str(e)) from e


def _peering_command(*, id: str | None, name: str, priority: int, lifetime: int,
                     namespaces: Collection[str], clusterwide: bool, message: str | None = None) -> None:
    if namespaces and clusterwide:
        raise click.UsageError("Either --namespace or --all-namespaces can be used, not both.")
    identity = id or _peering.detect_own_id(manual=True)

    async def touch() -> None:
        connection = await authenticate(registry=get_default_registry(), settings=OperatorSettings(), memo=None)
        await _peering.touch_command(connection=connection, identity=identity, name=name, priority=priority,
                                     lifetime=lifetime, clusterwide=clusterwide, namespaces=namespaces,
                                     message=message)

    try:
        asyncio.run(touch())
    except (OperatorError, LoginError) as e:
        raise click.ClickException(str(e)) from e


@main.command()
@logging_options
@click.option('-n', '--namespace', 'namespaces', multiple=True, help=_NAMESPACE)
@click.option('-A', '--all-namespaces', 'clusterwide', is_flag=True, help=_ALL_NAMESPACES)
@click.option('-i', '--id', type=str, default=None, help=_ID)
@click.option('--dev', is_flag=True, help=_DEV)
@click.option('-P', '--peering', 'peering_name', required=True, envvar='KOPF_FREEZE_PEERING',
              help="The peering object whose operators pause.")
@click.option('-p', '--priority', type=int, default=100, required=True, show_default=True,
              help="The pause's priority: operators of lower priority pause.")
@click.option('-t', '--lifetime', type=int, required=True, help="How many seconds the pause lasts.")
@click.option('-m', '--message', type=str,
              help="Why they pause: kept in the peering record, logged by the operators that pause (Kopf drops it).")
def freeze(id: str | None, message: str | None, lifetime: int, namespaces: Collection[str], clusterwide: bool,
           peering_name: str, priority: int, dev: bool) -> None:
    """ Pause the resource handling in the operator(s). """
    _peering_command(id=id, name=peering_name, priority=666 if dev else priority, lifetime=lifetime,
                     namespaces=namespaces, clusterwide=clusterwide, message=message)


@main.command()
@logging_options
@click.option('-n', '--namespace', 'namespaces', multiple=True, help=_NAMESPACE)
@click.option('-A', '--all-namespaces', 'clusterwide', is_flag=True, help=_ALL_NAMESPACES)
@click.option('-i', '--id', type=str, default=None, help=_ID)
@click.option('-P', '--peering', 'peering_name', required=True, envvar='KOPF_RESUME_PEERING',
              help="The peering object whose operators resume.")
def resume(id: str | None, namespaces: Collection[str], clusterwide: bool, peering_name: str) -> None:
    """ Resume the resource handling in the operator(s). """
    _peering_command(id=id, name=peering_name, priority=0, lifetime=0,
                     namespaces=namespaces, clusterwide=clusterwide)


@main.group()
def rbac() -> None:
    """ The RBAC rules the operator's handlers need: generate them, or verify the current credentials (not in Kopf). """


def _rbac_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """What the rules depend on: the handlers, and the options `kopf run` would get."""
    options: list[Callable[[Callable[..., Any]], Callable[..., Any]]] = [
        click.option('--lease', 'lease_name', type=str, envvar='KOPF_RUN_LEASE', help="as `kopf run --lease`"),
        click.option('--shards', type=click.Choice(['auto']), envvar='KOPF_RUN_SHARDS',
                     help="as `kopf run --shards`"),
        click.option('-P', '--peering', 'peering_name', type=str, envvar='KOPF_RUN_PEERING', default='default',
                     show_default=True, help="as `kopf run --peering`"),
        click.option('--standalone', is_flag=True, help="as `kopf run --standalone`: no peering"),
        click.option('--account-namespace', type=str, default=None,
                     help="the ServiceAccount's namespace (by default: the only --namespace, else 'default')"),
        click.option('--name', 'account', type=str, default='kopf-operator', show_default=True,
                     help="the ServiceAccount's and its roles' name"),
        click.option('-A', '--all-namespaces', 'clusterwide', is_flag=True, help=_ALL_NAMESPACES),
        click.option('-n', '--namespace', 'namespaces', multiple=True, help=_NAMESPACE),
        click.option('-m', '--module', 'modules', multiple=True, help=_MODULE),
        click.argument('paths', nargs=-1),
    ]
    for option in options:
        fn = option(fn)
    return logging_options(fn)


def _election_options(options: dict[str, Any]) -> list[str]:
    """`kopf run`'s options of peering, the Lease and shards, as the rules were made for."""
    found = ['--standalone'] if options['standalone'] else ['--peering', options['peering_name']]
    if options['lease_name']:
        found += ['--lease', options['lease_name']]
    if options.get('shards'):
        found += ['--shards', options['shards']]
    return found


def _rbac_run(coro_fn: Callable[..., Any], *, paths: Collection[str], modules: Collection[str],
              namespaces: Collection[str], clusterwide: bool, account: str, account_namespace: str | None,
              standalone: bool, peering_name: str, lease_name: str | None, **extra: Any) -> Any:
    if namespaces and clusterwide:
        raise click.UsageError("Either --namespace or --all-namespaces can be used, not both.")
    preload(paths=paths, modules=modules)
    settings = OperatorSettings()
    coro = coro_fn(
        registry=get_default_registry(), namespaces=namespaces, clusterwide=clusterwide or not namespaces,
        standalone=standalone, peering_name=peering_name, lease_name=lease_name,
        lease_namespace=_running._lease_namespace(settings, namespaces), account=account,
        account_namespace=account_namespace or _running.only_namespace(namespaces) or 'default', **extra,
    )
    from kopf._operating.rbac.declaring import DeclarationError  # (as the commands: not imported by `kopf run`)
    try:
        return asyncio.run(coro)
    except (OperatorError, LoginError, DeclarationError) as e:
        raise click.ClickException(str(e)) from e


_STRICT = click.option('--strict', is_flag=True,
                       help="exit 1 while any warning stands (a call not known statically): for CI pipelines")


@rbac.command()
@_STRICT
@_rbac_options
def generate(paths: Collection[str], modules: Collection[str], strict: bool, **options: Any) -> None:
    """ Print the ServiceAccount, (Cluster)Roles and bindings that the handlers need, as YAML. """
    from kopf._operating.rbac import commands  # (not at the top: operators that never run this do not import it)
    source = ', '.join([*paths, *(f"-m {m}" for m in modules)]) or 'no handlers'
    text, warnings = _rbac_run(commands.generate, paths=paths, modules=modules, source=source, **options)
    _warn(warnings)
    click.echo(text, nl=False)
    _strictly(strict, warnings)


def _warn(warnings: Collection[str]) -> None:
    for line in warnings:
        click.echo(f"Warning: {line}", err=True)


def _strictly(strict: bool, warnings: Collection[str]) -> None:
    """With --strict, a warning fails the command: the rules may not cover what the code does."""
    if strict and warnings:
        click.echo(f"Error: {len(warnings)} warning(s) with --strict: the rules may not cover every request "
                   f"of the handlers; declare what each warning names (kopf.rbac.needs/declare).", err=True)
        raise SystemExit(1)


@rbac.command()
@click.option('--rbac', 'rbac_file', type=click.Path(exists=True, dir_okay=False), default=None,
              help="check this RBAC file (its roles, where its bindings put them) instead of the credentials")
@click.option('--cluster', is_flag=True,
              help="check the current credentials in the cluster (the default; with --rbac, both are checked)")
@_STRICT
@_rbac_options
def verify(paths: Collection[str], modules: Collection[str], rbac_file: str | None, cluster: bool, strict: bool,
           **options: Any) -> None:
    """ Check that the current credentials (or an RBAC file) grant what the operator needs; exit 1 if not. """
    from pathlib import Path  # (not at the top: operators that never run this do not import it)

    from kopf._operating.rbac import commands
    missing, warnings = _rbac_run(commands.verify, paths=paths, modules=modules,
                                  rbac=Path(rbac_file) if rbac_file else None, cluster=cluster or not rbac_file,
                                  **options)
    _warn(warnings)
    for line in missing:
        click.echo(line)
    if missing:
        raise SystemExit(1)
    click.echo("All the permissions that the handlers need are granted.")
    _strictly(strict, warnings)


@rbac.command(context_settings=dict(allow_interspersed_args=False))
@logging_options
@click.option('--rbac', 'rbac_file', type=click.Path(exists=True, dir_okay=False), default=None,
              help="compare the run with this RBAC file: what it does not grant, what it grants unused")
@click.option('--output', type=click.Path(dir_okay=False), default=None,
              help="write the rules the run needed there (default: stdout, and the command's output to stderr)")
@click.option('--name', 'account', type=str, default='kopf-operator', show_default=True,
              help="the ServiceAccount's and its roles' name in the rules written")
@click.option('--account-namespace', type=str, default=None,
              help="the ServiceAccount's namespace (by default: the login's namespace, else 'default')")
@click.option('--port', type=int, default=0, help="the proxy's port on 127.0.0.1 (default: any free one)")
@click.option('--in-cluster', 'in_cluster', type=click.Path(file_okay=False), default=None,
              help="also write a service account's files (ca.crt, token, namespace) there and set "
                   "$KUBERNETES_SERVICE_HOST/PORT, for clients that log in as in a pod (mount it as "
                   "/var/run/secrets/kubernetes.io/serviceaccount)")
@click.argument('command', nargs=-1, required=True, type=click.UNPROCESSED)
def record(command: Collection[str], rbac_file: str | None, output: str | None, account: str,
           account_namespace: str | None, port: int, in_cluster: str | None) -> None:
    """ Run a command (the operator, or its tests) and print the rules its requests needed. """
    from pathlib import Path  # (not at the top: operators that never run this do not import it)

    from kopf._operating.rbac import recording
    try:
        grants = recording.grants_of(Path(rbac_file)) if rbac_file else None
    except ValueError as e:
        raise click.UsageError(str(e)) from None
    try:
        proxy, namespace = asyncio.run(recording.start(get_default_registry(), port))
    except (OperatorError, LoginError, RuntimeError) as e:
        raise click.ClickException(str(e)) from e
    try:
        run = recording.run(list(command), recording=proxy, namespace=namespace,
                            in_cluster=Path(in_cluster) if in_cluster else None,
                            stdout=recording.stdout_of(Path(output) if output else None))
    except recording.RecordingError as e:
        raise click.ClickException(str(e)) from e
    text, lines, wrong = recording.report(run, command=list(command), account=account,
                                          account_namespace=account_namespace or namespace or 'default', rbac=grants)
    if output:
        Path(output).write_text(text)
    else:
        click.echo(text, nl=False)
    for line in lines:
        click.echo(line, err=True)
    if run.exit_code < 0:  # ended by a signal: so does the recorder, as its parent would see the command
        recording.end_by_signal(-run.exit_code)
    if run.exit_code:
        raise SystemExit(run.exit_code)
    if wrong:
        raise SystemExit(1)


@main.group()
def olm() -> None:
    """ Operator Lifecycle Manager bundles generated from the handlers (not in Kopf). """


@olm.command(name='generate')
@click.option('--image', required=True, help="the operator's image: `kopf run` as its entrypoint, the handlers in it")
@click.option('--version', 'bundle_version', required=True, help="the bundle's version (semantic: X.Y.Z)")
@click.option('--channel', default='alpha', show_default=True, help="the channel (and the CSV's maturity)")
@click.option('--output', type=click.Path(file_okay=False), default='bundle', show_default=True,
              help="the bundle's folder (its manifests/ and metadata/ are written whole)")
@click.option('--crd', 'crds', multiple=True, type=click.Path(exists=True, dir_okay=False),
              help="a CRD file of a resource the handlers serve (all of them are needed)")
@click.option('--previous-version', type=str, default=None, help="the version this one replaces")
@click.option('--required-crd', 'required', multiple=True,
              help="a CRD the handlers serve that another operator provides (listed as required, not bundled)")
@click.option('--package', type=str, default=None, help="the package's name (else pyproject.toml's project)")
@click.option('--project', type=click.Path(dir_okay=False), default='pyproject.toml', show_default=True,
              help="where the package's metadata comes from, if present")
@click.option('--icon', type=click.Path(exists=True, dir_okay=False), default=None,
              help="An SVG or PNG file: the operator's icon in the catalog.")
@click.option('--example', 'examples', multiple=True, type=click.Path(exists=True, dir_okay=False),
              help="objects of the CRDs (YAML) that OperatorHub offers as templates (alm-examples)")
@click.option('--in-image', 'in_image', multiple=True,
              help="the handlers' paths in the image (default: /operator/ and each path's file name)")
@_rbac_options
def olm_generate(paths: Collection[str], modules: Collection[str], image: str, bundle_version: str, channel: str,
                 output: str, crds: Collection[str], previous_version: str | None, package: str | None,
                 project: str, icon: str | None, in_image: Collection[str], examples: Collection[str],
                 required: Collection[str], **options: Any) -> None:
    """ Write an OLM bundle (registry+v1): the CSV with the Deployment and permissions, the CRDs, metadata. """
    from pathlib import Path  # (not at the top: operators that never run this do not import it)

    from kopf._operating import olm as _olm
    try:
        meta, missing = _olm.package_of(name=package, project=Path(project), icon=Path(icon) if icon else None)
    except ValueError as e:
        raise click.UsageError(str(e)) from None
    if missing:
        click.echo(f"Warning: the package's metadata has no {', '.join(missing)} (pyproject.toml's [project] "
                   f"or the options): OperatorHub shows them.", err=True)
    entries = list(in_image) or [f"/operator/{Path(path).name}" for path in paths]
    entries += [arg for module in modules for arg in ('-m', module)]
    run_options = _election_options(options)
    bundle = _olm.Options(image=image, version=bundle_version, channel=channel, output=Path(output),
                          crds=[Path(crd) for crd in crds], previous_version=previous_version, package=meta,
                          entries=entries, run_options=run_options, examples=[Path(e) for e in examples],
                          required=list(required))
    try:
        written, warnings = _rbac_run(_olm.generate, paths=paths, modules=modules, options=bundle, **options)
    except ValueError as e:
        raise click.ClickException(str(e)) from None
    _warn(warnings)
    for path in written:
        click.echo(path)
    errors, warnings = _olm.verify(Path(output))  # what `kopf olm verify` would say of it
    for line in [*(f"Error: {e}" for e in errors), *(f"Warning: {w}" for w in warnings)]:
        click.echo(line, err=True)
    if errors:
        raise SystemExit(1)


@main.group()
def deploy() -> None:
    """ A Helm chart generated from the handlers: the Deployment, its RBAC, the CRDs, the webhooks (not in Kopf). """


@deploy.command(name='generate')
@click.option('--image', required=True, help="the operator's image: `kopf run` as its entrypoint, the handlers in it")
@click.option('--chart', 'chart_name', type=str, default=None,
              help="the chart's and the Deployment's name (default: the account's, --name)")
@click.option('--version', 'chart_version', default='0.1.0', show_default=True, help="the chart's version")
@click.option('--output', type=click.Path(file_okay=False), default='chart', show_default=True,
              help="the chart's folder (its files are written, the CRDs' and handlers' folders whole)")
@click.option('--crd', 'crds', multiple=True, type=click.Path(exists=True, dir_okay=False),
              help="a CRD file of a resource the handlers serve (installed by the chart)")
@click.option('--in-image', 'in_image', multiple=True,
              help="the handlers' paths in the image (default: /operator/ and each path's file name)")
@click.option('--metrics', type=click.IntRange(1, 65535), default=None, metavar='PORT',
              help="serve Prometheus metrics on this port (`kopf run --metrics`), with a Service (and a "
                   "ServiceMonitor if the values enable it)")
@click.option('--mount', is_flag=True,
              help="the handlers' files in a ConfigMap mounted at /operator/ instead of in the image: "
                   "a changed file rolls out at the next upgrade")
@_rbac_options
def deploy_generate(**params: Any) -> None:
    """ Write a Helm chart of the operator: its Deployment, ServiceAccount and roles, CRDs, webhooks, values. """
    written, warnings = _chart_written(**params)
    _warn(warnings)
    for path in written:
        click.echo(path)


def _chart_written(*, paths: Collection[str], modules: Collection[str], image: str, chart_name: str | None,
                   chart_version: str, output: str, crds: Collection[str], in_image: Collection[str],
                   mount: bool, metrics: int | None, **options: Any) -> tuple[list[str], list[str]]:
    from pathlib import Path  # (not at the top: operators that never run this do not import it)

    from kopf._operating import charts
    if mount and (modules or in_image):
        raise click.UsageError("--mount mounts the handlers' files: not with --module or --in-image.")
    entries = list(in_image) or [f"/operator/{Path(path).name}" for path in paths]
    entries += [arg for module in modules for arg in ('-m', module)]
    run_options = [arg for namespace in options['namespaces'] for arg in ('-n', namespace)]
    run_options += ['--all-namespaces'] if options['clusterwide'] or not options['namespaces'] else []
    run_options += _election_options(options)
    # How it was made (but where to): `kopf deploy verify` makes it again so, from the code as it is then.
    recipe = {'paths': list(paths), 'modules': list(modules), 'image': image, 'chart_name': chart_name,
              'chart_version': chart_version, 'crds': list(crds), 'in_image': list(in_image), 'mount': mount,
              'metrics': metrics, **{key: list(v) if isinstance(v, tuple) else v for key, v in options.items()}}
    chart = charts.Options(name=chart_name or options['account'], image=image, version=chart_version,
                           output=Path(output), crds=[Path(crd) for crd in crds], entries=entries,
                           run_options=run_options, mounted=[Path(path) for path in paths] if mount else [],
                           metrics=metrics, recipe=recipe)
    source = ', '.join([*paths, *(f"-m {m}" for m in modules)]) or 'no handlers'
    try:
        written: list[str]
        warnings: list[str]
        written, warnings = _rbac_run(charts.generate, paths=paths, modules=modules, options=chart, source=source,
                                      **options)
    except ValueError as e:
        raise click.ClickException(str(e)) from None
    return written, warnings


@deploy.command(name='manifests')
@click.argument('chart', type=click.Path(exists=True, file_okay=False))
@click.option('-n', '--namespace', 'namespace', default='default', show_default=True,
              help="the namespace to install into (the release's, as `helm install -n`)")
@click.option('--release', help="the release's name, in the objects' labels (default: the chart's name)")
def deploy_manifests(chart: str, namespace: str, release: str | None) -> None:
    """ Print a generated chart's objects as plain YAML, rendered with its values.yaml (as `helm template`). """
    from pathlib import Path  # (not at the top: operators that never run this do not import it)

    import yaml

    from kopf._operating import charts
    try:
        name = yaml.safe_load((Path(chart) / 'Chart.yaml').read_text())['name']
    except (OSError, KeyError, TypeError, yaml.YAMLError) as e:
        raise click.ClickException(f"{chart} is not a chart (its Chart.yaml names none): {e!r}") from None
    try:
        click.echo(charts.manifests(Path(chart), namespace=namespace, release=release or name), nl=False)
    except ValueError as e:
        raise click.ClickException(str(e)) from None


@deploy.command(name='verify')
@click.argument('chart', type=click.Path(exists=True, file_okay=False), required=False)
@click.option('--release', help="a release in the cluster instead of a folder: the chart that Helm keeps of it")
@click.option('-n', '--namespace', 'namespace', help="the release's namespace (default: the context's)")
@logging_options
def deploy_verify(chart: str | None, release: str | None, namespace: str | None) -> None:
    """ Check a chart or a release against what `kopf deploy generate` makes of the code now; exit 1 on differences. """
    import tempfile
    from pathlib import Path  # (not at the top: operators that never run this do not import it)

    from kopf._operating import charts
    if (chart is None) == (release is None):
        raise click.UsageError("Give either a chart's folder or --release NAME.")
    if namespace is not None and release is None:
        raise click.UsageError("-n/--namespace is the release's: give --release NAME too.")
    with tempfile.TemporaryDirectory() as folder:
        checked = Path(folder) / 'checked'
        what = f"The chart in {chart}"
        if release is not None:
            try:
                namespace, files = asyncio.run(charts.read_release(get_default_registry(), release, namespace))
            except (ValueError, OperatorError, LoginError) as e:
                raise click.ClickException(str(e)) from None
            from kopf._operating.olm import write_files
            write_files(checked, files)
            what = f"The release {release} in {namespace}"
        else:
            checked = Path(str(chart))
        try:
            recipe = charts.recipe_of(checked)
        except ValueError as e:
            raise click.ClickException(str(e)) from None
        made = Path(folder) / 'made'
        _, warnings = _chart_written(**recipe, output=str(made))
        _warn(warnings)
        differences, extra = charts.compare(checked, made)
    for line in extra:
        click.echo(f"Warning: {line}", err=True)
    for line in differences:
        click.echo(line)
    if differences:
        raise SystemExit(1)
    click.echo(f"{what} is what the code makes now.")


@olm.command(name='verify')
@click.argument('directory', type=click.Path(exists=True, file_okay=False))
def olm_verify(directory: str) -> None:
    """ Check a bundle as OLM's own validators do (its files only); exit 1 on errors. """
    from pathlib import Path  # (not at the top: operators that never run this do not import it)

    from kopf._operating import olm as _olm
    errors, warnings = _olm.verify(Path(directory))
    for line in errors:
        click.echo(f"Error: {line}")
    for line in warnings:
        click.echo(f"Warning: {line}")
    if errors:
        raise SystemExit(1)
    click.echo(f"The bundle in {directory} is valid ({len(warnings)} warnings).")


@main.group()
def crd() -> None:
    """ The CRDs of the operator's models (kopf.CustomResource): generate them, or verify them (not in Kopf). """


def _crd_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    fn = click.argument('paths', nargs=-1)(fn)
    fn = click.option('-m', '--module', 'modules', multiple=True, help=_MODULE)(fn)
    return logging_options(fn)


def _crd_documents(paths: Collection[str], modules: Collection[str]) -> list[dict[str, Any]]:
    preload(paths=paths, modules=modules)
    from kopf._operating import crds, schemas  # (not at the top: pydantic, for the operators that declare models)
    from kopf._structures.models import ModelError
    found = crds.models()
    if not found:
        raise click.ClickException("No models (subclasses of kopf.CustomResource) in the operator's code.")
    try:
        return crds.documents(found)
    except (ModelError, schemas.SchemaError) as e:
        raise click.ClickException(str(e)) from e


@crd.command(name='generate')
@_crd_options
def crd_generate(paths: Collection[str], modules: Collection[str]) -> None:
    """ Print the CRDs of the operator's models as YAML. """
    from kopf._operating import crds
    click.echo(crds.render(_crd_documents(paths, modules)), nl=False)


@crd.command(name='verify')
@click.option('--crd', 'files', multiple=True, type=click.Path(exists=True, dir_okay=False),
              help="compare with the CRDs in this YAML file (repeatable) instead of the cluster's")
@click.option('--sample', 'samples', multiple=True, type=click.Path(exists=True, dir_okay=False),
              help="objects (YAML) to convert to every other version and back with the conversion handlers "
                   "(repeatable): each must come back the same, fitting each version's model on the way")
@_crd_options
def crd_verify(paths: Collection[str], modules: Collection[str], files: Collection[str],
               samples: Collection[str]) -> None:
    """ Compare the CRDs of the operator's models with a file's or the cluster's; exit 1 on a difference. """
    import yaml

    from kopf._operating import crds
    expected = _crd_documents(paths, modules)
    objects = [doc for path in samples for doc in yaml.safe_load_all(open(path)) if isinstance(doc, dict)]
    trips = crds.round_trips(get_default_registry(), objects)
    for line in trips:
        click.echo(line)
    if objects and not trips:
        click.echo(f"{len(objects)} sample(s) convert to every other version and back unchanged.")
    if files:
        found = {doc['metadata']['name']: doc for path in files for doc in yaml.safe_load_all(open(path)) if
                 isinstance(doc, dict) and doc.get('kind') == 'CustomResourceDefinition'}
        actual = [found.get(doc['metadata']['name']) for doc in expected]
    else:
        try:
            actual = asyncio.run(crds.read(get_default_registry(), [doc['metadata']['name'] for doc in expected]))
        except (OperatorError, LoginError) as e:
            raise click.ClickException(str(e)) from e
    lines = [line for doc, there in zip(expected, actual, strict=True) for line in crds.differences(doc, there)]
    for line in lines:
        click.echo(line)
    if lines or trips:
        raise SystemExit(1)
    click.echo(f"The CRDs match the models: {', '.join(doc['metadata']['name'] for doc in expected)}.")


@main.group()
def testing() -> None:
    """ A local control plane for tests and for people: etcd and kube-apiserver, no Docker (not in Kopf). """


@testing.command(name='install')
@click.option('--download', is_flag=True,
              help="Download the official envtest release (etcd, kube-apiserver, kubectl; checked by its "
                   "SHA-512) instead of building: no Go needed, but no controller manager, scheduler or nodes.")
@click.option('--kubernetes-version', default=None, metavar='VERSION',
              help="With --download: this envtest release (e.g. 1.33.0) instead of the newest.")
def testing_install(download: bool, kubernetes_version: str | None) -> None:
    """ Put the control plane's programs into the user's cache, once: built from the Go module proxy, or downloaded. """
    from kopf._operating.cluster import binaries, downloads
    if kubernetes_version is not None and not download:
        raise click.UsageError("--kubernetes-version goes with --download: the build makes "
                               f"Kubernetes {binaries.KUBERNETES_VERSION}, as pinned by its Go modules.")
    say = functools.partial(click.echo, err=True)
    try:
        if download:
            folders = [downloads.download(kubernetes_version, say=say)]
        else:
            folders = list(binaries.install(say=say).values())
    except binaries.BinariesError as e:
        raise click.ClickException(str(e)) from None
    for folder in folders:
        click.echo(str(folder))


def _plane(nodes: bool = False, controller_manager: bool = False, audit_policy: str | None = None,
           feature_gates: Collection[str] = ()) -> Any:
    from pathlib import Path  # (not at the top: operators that never run this do not import it)

    from kopf._operating.cluster import plane
    try:
        return plane.persistent(nodes=nodes, controller_manager=controller_manager,
                                audit_policy=Path(audit_policy).read_text() if audit_policy else None,
                                feature_gates=tuple(feature_gates), say=lambda line: click.echo(line, err=True))
    except plane.ControlPlaneError as e:
        raise click.UsageError(str(e)) from None


_NODES = "Also run kube-scheduler and kwok: pods are scheduled, run and log."
_CONTROLLER_MANAGER = "Also run kube-controller-manager: garbage collection, namespaces' deletion."


@testing.group(name='cluster')
def testing_cluster() -> None:
    """ Start, stop and use a control plane that outlives the command (state in $KOPF_CLUSTER_HOME). """


@testing_cluster.command(name='up')
@click.option('--nodes', is_flag=True, help=_NODES)
@click.option('--controller-manager', is_flag=True, help=_CONTROLLER_MANAGER)
@click.option('--audit-policy', type=click.Path(exists=True, dir_okay=False), default=None,
              help="Write the API server's audit log by this policy (its path: $KOPF_CLUSTER_AUDIT_LOG).")
@click.option('--feature-gate', 'feature_gates', multiple=True,
              help="Turn on this feature gate of the API server (repeatable).")
def testing_cluster_up(nodes: bool, controller_manager: bool, audit_policy: str | None,
                       feature_gates: Collection[str]) -> None:
    """ Start it unless it runs as asked; print the shell lines to use it: eval "$(kopf testing cluster up)". """
    from kopf._operating.cluster import binaries, plane, processes
    control = _plane(nodes, controller_manager, audit_policy, feature_gates)
    try:
        with binaries.locked(control.home / ".lock"):  # another `up` or `down` waits for this one
            if control.healthy():
                click.echo("The control plane is running already.", err=True)
            else:
                if any(control.running().values()) and not control.configured():
                    click.echo("The control plane runs with other options: restarting it.", err=True)
                seconds = control.start()
                click.echo(f"The control plane is ready in {seconds:.1f}s.", err=True)
    except (binaries.BinariesError, processes.ProcessError, plane.ControlPlaneError) as e:
        raise click.ClickException(str(e)) from None
    click.echo(plane.shell_lines(control))


@testing_cluster.command(name='env')
def testing_cluster_env() -> None:
    """ Print the shell lines to use the running control plane. """
    from kopf._operating.cluster import plane
    click.echo(plane.shell_lines(_plane().as_recorded()))


@testing_cluster.command(name='status')
def testing_cluster_status() -> None:
    """ Say what runs, where its kubeconfig, logs and programs are; exit 3 unless it all runs. """
    from kopf._operating.cluster import plane
    lines, ready = plane.report(_plane().as_recorded())
    click.echo("\n".join(lines))
    if not ready:
        sys.exit(3)


@testing_cluster.command(name='down')
def testing_cluster_down() -> None:
    """ Stop the control plane; its programs stay in the cache. """
    from kopf._operating.cluster import binaries
    control = _plane()
    with binaries.locked(control.home / ".lock"):
        stopped = control.stop()
    click.echo(f"Stopped {', '.join(stopped)}." if stopped else "Nothing was running.", err=True)


def command() -> None:
    """The ``kopf`` command (and ``python -m kopf``): ``main()``, then the process exits as
    Python would (non-daemon threads awaited, ``atexit`` functions run, streams flushed) but
    without tearing the interpreter down: the core's threads may still hold the GIL's state
    then, and a teardown under them can crash a process that has stopped cleanly."""
    try:
        main()
    except SystemExit as e:
        code = e.code
    else:
        code = 0
    if code is not None and not isinstance(code, int):
        print(code, file=sys.stderr)
        code = 1
    threading._shutdown()  # type: ignore[attr-defined]  # as Python's own exit does first
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code or 0)
