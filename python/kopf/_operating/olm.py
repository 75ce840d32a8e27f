"""``kopf olm generate`` (not in Kopf): an Operator Lifecycle Manager bundle (``registry+v1``,
OperatorHub's format) from what the operator's code says: the ClusterServiceVersion with the
operator's Deployment (the image running ``kopf run`` with the options given) and its
permissions (the rules of ``kopf rbac generate``), the CRDs it owns (from files, else as the
cluster has them), the webhooks of its admission and conversion handlers, the bundle's
metadata and its Dockerfile.

Install modes: an operator generated for namespaces (``-n``) watches the namespaces that OLM's
OperatorGroup targets (its ``olm.targetNamespaces`` annotation, read into ``kopf run``'s
``$KOPF_RUN_NAMESPACES``): its own or another single one, or all of them (OLM then grants its
namespaced permissions cluster-wide); several are not offered, as a list of namespaces is a
pattern that the engine watches cluster-wide. One generated for all namespaces (``-A``) is
installed for all namespaces only, as OLM requires of conversion webhooks.

Webhooks: OLM creates their configurations (and the CRDs' conversion) from the CSV's webhook
definitions, a Service in front of the Deployment, and the serving certificate it mounts in the
pod; the pod's ``$KOPF_OLM_WEBHOOK_PORT`` makes the engine serve there with that certificate
and leave the configuration to OLM (``kopf._connecting.webhooks.serve_as_installed``).
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import json
import logging
import mimetypes
import re
import tomllib
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any

import yaml

from kopf._bridge import services
from kopf._bridge.protocol import ResourceInfo
from kopf._connecting.webhooks import OLM
from kopf._handling.handlers import OperatorRegistry, WebhookType
from kopf._operating.rbac.commands import _connect, _discover, _read, crd_path
from kopf._operating.rbac.planning import plan
from kopf._operating.rbac.rules import Plan, Rule
from kopf._structures.references import Resource
from kopf._structures.settings import OperatorSettings

logger = logging.getLogger('kopf._core.engines.olm')

LIVENESS_PORT = 8080
WEBHOOK_PORT = 9443  # the webhook server's, in the pod (OLM's Service: 443 → it)
# What the API server calls a semantic version (OLM refuses any other `spec.version`).
SEMVER = re.compile(r'(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?')


@dataclasses.dataclass
class Package:
    """What OperatorHub shows of the operator: from ``pyproject.toml`` where present."""
    name: str
    display_name: str
    description: str
    maintainers: list[dict[str, str]]
    links: list[dict[str, str]]
    provider: str | None
    keywords: list[str]
    icon: Path | None


def package_of(*, name: str | None, project: Path | None, icon: Path | None) -> tuple[Package, list[str]]:
    """The package's metadata, and what is missing from it (for a warning)."""
    found: dict[str, Any] = {}
    if project is not None and project.is_file():
        found = tomllib.loads(project.read_text()).get('project', {})
    real_name = name or found.get('name')
    if not real_name:
        raise ValueError("The bundle's package has no name: give --package NAME (or run where pyproject.toml "
                         "names the project).")
    real_name = re.sub(r'[^a-z0-9-]+', '-', str(real_name).lower()).strip('-')
    people = [*found.get('maintainers', []), *found.get('authors', [])]
    maintainers = [{'name': p['name'], 'email': p.get('email', '')} for p in people if p.get('name')]
    links = [{'name': str(key), 'url': str(url)} for key, url in found.get('urls', {}).items()]
    package = Package(
        name=real_name,
        display_name=str(found.get('name') or real_name),
        description=str(found.get('description') or ''),
        maintainers=maintainers,
        links=links,
        provider=maintainers[0]['name'] if maintainers else None,
        keywords=[str(k) for k in found.get('keywords', [])],
        icon=icon,
    )
    missing = [what for what, present in [('a description', package.description), ('maintainers', maintainers),
                                          ('links', links), ('keywords', package.keywords), ('an icon', icon)]
               if not present]
    return package, missing


@dataclasses.dataclass
class Options:
    """What the bundle is made of, besides the handlers."""
    image: str
    version: str
    channel: str
    output: Path
    crds: list[Path]
    previous_version: str | None
    package: Package
    entries: list[str]  # `kopf run`'s targets in the image: paths, or `-m MODULE`
    run_options: list[str]  # `kopf run`'s options (peering, Lease)
    examples: list[Path] = dataclasses.field(default_factory=list)  # objects for `alm-examples`
    required: list[str] = dataclasses.field(default_factory=list)  # CRDs that other operators provide


def read_examples(paths: Sequence[Path], crds: Sequence[Crd]) -> list[dict[str, Any]]:
    """The ``--example`` files' objects (OperatorHub's "create" forms start from them): each of
    a kind and version that a bundled CRD serves."""
    served = {(f"{crd.body['spec']['group']}/{version['name']}", crd.body['spec']['names']['kind'])
              for crd in crds for version in crd.body['spec'].get('versions', [])}
    examples = []
    for path in paths:
        try:
            documents = [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]
        except (OSError, yaml.YAMLError) as e:
            raise ValueError(f"--example {path}: cannot be read: {e}") from e
        for doc in documents:
            if not isinstance(doc, dict) or (doc.get('apiVersion'), doc.get('kind')) not in served:
                what = f"{doc.get('apiVersion')}, {doc.get('kind')}" if isinstance(doc, dict) else "not an object"
                raise ValueError(f"--example {path}: {what}: not a kind and version of the bundle's CRDs.")
            examples.append(doc)
    return examples


@dataclasses.dataclass
class Crd:
    """A CRD of the bundle: its object, and its text as written (a ``--crd`` file's, unchanged)."""
    body: dict[str, Any]
    text: str

    @property
    def name(self) -> str:
        return str(self.body['metadata']['name'])


def bundle(plan: Plan, options: Options, *, clusterwide: bool, crds: Sequence[Crd],
           webhooks: Sequence[dict[str, Any]] = (), required: Sequence[dict[str, str]] = ()) -> dict[str, str]:
    """The bundle's files (relative path → text)."""
    if not SEMVER.fullmatch(options.version):
        raise ValueError(f"--version {options.version!r} is not a semantic version (X.Y.Z).")
    if options.previous_version is not None and not SEMVER.fullmatch(options.previous_version):
        raise ValueError(f"--previous-version {options.previous_version!r} is not a semantic version (X.Y.Z).")
    package = options.package
    csv_name = f"{package.name}.v{options.version}"
    csv = _csv(plan, options, crds, clusterwide, list(webhooks), list(required))
    files = {f"manifests/{package.name}.clusterserviceversion.yaml": _dump(csv)}
    for crd in crds:
        files[f"manifests/{crd.name}.crd.yaml"] = crd.text
    labels = _labels(package.name, options.channel)
    files['metadata/annotations.yaml'] = _dump({'annotations': labels})
    files['bundle.Dockerfile'] = '\n'.join([
        "# The bundle's image (`docker build -f bundle.Dockerfile -t BUNDLE-IMAGE .`), by `kopf olm generate`.",
        "FROM scratch",
        *(f"LABEL {key}={value}" for key, value in labels.items()),
        "COPY manifests /manifests/",
        "COPY metadata /metadata/",
        "",
    ])
    logger.debug(f"The bundle of {csv_name}: {', '.join(sorted(files))}")
    return files


def _labels(package: str, channel: str) -> dict[str, str]:
    return {
        'operators.operatorframework.io.bundle.mediatype.v1': 'registry+v1',
        'operators.operatorframework.io.bundle.manifests.v1': 'manifests/',
        'operators.operatorframework.io.bundle.metadata.v1': 'metadata/',
        'operators.operatorframework.io.bundle.package.v1': package,
        'operators.operatorframework.io.bundle.channels.v1': channel,
        'operators.operatorframework.io.bundle.channel.default.v1': channel,
    }


def read_crd(path: Path) -> Crd:
    """A ``--crd`` file's CRD."""
    try:
        text = path.read_text()
        crd = yaml.safe_load(text)
    except (OSError, yaml.YAMLError) as e:
        raise ValueError(f"--crd {path}: cannot be read: {e}") from e
    if not isinstance(crd, dict) or crd.get('kind') != 'CustomResourceDefinition':
        raise ValueError(f"--crd {path}: not a CustomResourceDefinition (one per file).")
    return Crd(crd, text)


def crd_as_read(crd: dict[str, Any]) -> Crd:
    """A CRD as the cluster has it, as a bundle carries it: its definition only (not its status,
    nor the server's and kubectl's records), and no conversion webhook of a development
    server: OLM points the CRD at the operator's own service where the bundle says so."""
    metadata = crd['metadata']
    annotations = {key: value for key, value in (metadata.get('annotations') or {}).items()
                   if key != 'kubectl.kubernetes.io/last-applied-configuration'}
    spec = dict(crd['spec'])
    if (spec.get('conversion') or {}).get('strategy') == 'Webhook':
        spec['conversion'] = {'strategy': 'None'}
    body = {
        'apiVersion': 'apiextensions.k8s.io/v1',
        'kind': 'CustomResourceDefinition',
        'metadata': {'name': metadata['name'],
                     **({'labels': metadata['labels']} if metadata.get('labels') else {}),
                     **({'annotations': annotations} if annotations else {})},
        'spec': spec,
    }
    header = f"# {metadata['name']} as the cluster had it, by `kopf olm generate` (no --crd file gave it).\n"
    return Crd(body, header + _dump(body))


def _owned(crd: dict[str, Any]) -> list[dict[str, str]]:
    """The CSV's entries of a CRD: one per served version, described by its schema."""
    spec = crd['spec']
    kind = spec['names']['kind']
    entries = []
    for version in spec.get('versions', []):
        if not version.get('served', True):
            continue
        schema = version.get('schema', {}).get('openAPIV3Schema', {})
        description = schema.get('description') or f"A {kind} ({spec['group']}/{version['name']})."
        entries.append({'name': crd['metadata']['name'], 'version': version['name'], 'kind': kind,
                        'displayName': kind, 'description': description})
    return entries


def _elsewhere(plan: Plan) -> list[Rule]:
    """Rules in namespaces other than the operator's (a literal one in the handlers' code or a
    declaration): OLM grants `permissions` in the operator's target namespaces only, so these
    are cluster-wide in the CSV."""
    return [rule for where, rules in plan.namespaced_rules().items()
            if plan.namespaces and where not in plan.namespaces for rule in rules]


def _merged(rules: list[Rule]) -> list[Rule]:
    """One rule per group and resource, whatever their namespaces, their verbs together."""
    merged: dict[tuple[str, str], Rule] = {}
    for rule in rules:
        kept = merged.setdefault((rule.group, rule.resource), Rule(rule.group, rule.resource, None))
        for verb, whos in rule.verbs.items():
            kept.verbs.setdefault(verb, set()).update(whos)
    return sorted(merged.values(), key=lambda rule: (rule.group, rule.resource))


def _rules(rules: list[Rule]) -> list[dict[str, Any]]:
    return [{'apiGroups': [rule.group], 'resources': [rule.resource], 'verbs': sorted(rule.verbs)}
            for rule in rules]


def _csv(plan: Plan, options: Options, crds: Sequence[Crd], clusterwide: bool,
         webhooks: list[dict[str, Any]], required: list[dict[str, str]]) -> dict[str, Any]:
    package = options.package
    account = plan.account
    elsewhere = _elsewhere(plan)
    # The same rule in several namespaces is one rule here: OLM grants it in each target namespace.
    merged = _merged([rule for rules in plan.namespaced_rules().values() for rule in rules if rule not in elsewhere])
    container: dict[str, Any] = {
        'name': 'operator',
        'image': options.image,
        'args': [*options.run_options, '--liveness', f'http://0.0.0.0:{LIVENESS_PORT}/healthz',
                 *(['--all-namespaces'] if clusterwide else []), *options.entries],
        'env': [{'name': 'POD_NAMESPACE', 'valueFrom': {'fieldRef': {'fieldPath': 'metadata.namespace'}}}],
        'ports': [{'name': 'liveness', 'containerPort': LIVENESS_PORT}],
        'livenessProbe': {'httpGet': {'path': '/healthz', 'port': LIVENESS_PORT}, 'periodSeconds': 10},
    }
    if not clusterwide:
        container['env'].append({'name': 'KOPF_RUN_NAMESPACES', 'valueFrom': {
            'fieldRef': {'fieldPath': "metadata.annotations['olm.targetNamespaces']"}}})
    if webhooks:
        # OLM's Service sends the reviews to this port; the engine serves them there (see
        # `kopf._connecting.webhooks.serve_as_installed`) with the certificate OLM mounts.
        container['env'].append({'name': OLM.port_variable, 'value': str(WEBHOOK_PORT)})
        container['ports'].append({'name': 'webhooks', 'containerPort': WEBHOOK_PORT})
    labels = {'app.kubernetes.io/name': package.name}
    deployment = {
        'name': package.name,
        'spec': {
            'replicas': 1,
            'selector': {'matchLabels': labels},
            'template': {'metadata': {'labels': labels},
                         'spec': {'serviceAccountName': account, 'containers': [container]}},
        },
    }
    install: dict[str, Any] = {'deployments': [deployment]}
    cluster = _merged([*plan.cluster_rules(), *elsewhere])
    if cluster:
        install['clusterPermissions'] = [{'serviceAccountName': account, 'rules': _rules(cluster)}]
    if merged:
        install['permissions'] = [{'serviceAccountName': account, 'rules': _rules(merged)}]
    spec: dict[str, Any] = {
        'displayName': package.display_name,
        'description': package.description or f"{package.display_name}, an operator in Python (kopf).",
        'version': options.version,
        'maturity': options.channel,
        'minKubeVersion': '1.25.0',
        **({'keywords': package.keywords} if package.keywords else {}),
        **({'maintainers': package.maintainers} if package.maintainers else {}),
        **({'provider': {'name': package.provider}} if package.provider else {}),
        **({'links': package.links} if package.links else {}),
        'installModes': [
            {'type': 'OwnNamespace', 'supported': not clusterwide},
            {'type': 'SingleNamespace', 'supported': not clusterwide},
            {'type': 'MultiNamespace', 'supported': False},
            {'type': 'AllNamespaces', 'supported': True},
        ],
        'customresourcedefinitions': {'owned': [entry for crd in crds for entry in _owned(crd.body)],
                                      **({'required': required} if required else {})},
        'install': {'strategy': 'deployment', 'spec': install},
        **({'webhookdefinitions': webhooks} if webhooks else {}),
    }
    if options.previous_version is not None:
        spec['replaces'] = f"{package.name}.v{options.previous_version}"
    if package.icon is not None:
        media = mimetypes.guess_type(package.icon.name)[0] or 'image/png'
        spec['icon'] = [{'base64data': base64.b64encode(package.icon.read_bytes()).decode(), 'mediatype': media}]
    return {
        'apiVersion': 'operators.coreos.com/v1alpha1',
        'kind': 'ClusterServiceVersion',
        'metadata': {
            'name': f"{package.name}.v{options.version}",
            'namespace': 'placeholder',
            'annotations': {
                'capabilities': 'Basic Install',
                'containerImage': options.image,
                'createdAt': datetime.datetime.now(datetime.UTC).strftime('%Y-%m-%dT%H:%M:%SZ'),
                'operators.operatorframework.io/builder': 'kopf-rs',
                'alm-examples': json.dumps(read_examples(options.examples, crds), indent=2),
            },
        },
        'spec': spec,
    }


class _Dumper(yaml.SafeDumper):
    """Block YAML without anchors: a bundle is read by people and by other tools' parsers."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _dump(document: dict[str, Any]) -> str:
    return yaml.dump(document, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=120)


def _crd_of(group: str, plural: str) -> str | None:
    """The CRD of a custom resource; None for Kubernetes' own groups (dotless, or ``*.k8s.io``)
    and for the peering objects, which Kopf's operators share (their CRDs are not one's own)."""
    if '.' not in group or group.endswith('.k8s.io') or plural in _PEERINGS:
        return None
    return f"{plural}.{group}"


def _crd_name(resource: Resource) -> str | None:
    return _crd_of(resource.group, resource.plural)


def served_crds(plan: Plan) -> list[str]:
    """The custom resources whose rules the plan has (their CRDs go into the bundle)."""
    names = {_crd_of(rule.group, rule.resource.split('/')[0]) for rule in plan.rules.values()}
    return sorted(name for name in names if name is not None)


_PEERINGS = frozenset({'kopfpeerings', 'clusterkopfpeerings'})


def webhook_definitions(registry: OperatorRegistry, found: list[ResourceInfo],
                        package: str) -> tuple[list[dict[str, Any]], set[str]]:
    """The CSV's webhook definitions (OLM creates the configurations and the Service, and mounts
    the certificate), and the CRDs that the webhooks serve."""
    resources = [(info, Resource.from_engine(info)) for info in found]
    handlers: list[tuple[dict[str, Any], list[ResourceInfo]]] = []
    crds: set[str] = set()
    for index, handler in enumerate(registry._webhooks):
        selector = handler.selector
        served = [(info, resource) for info, resource in resources if selector and selector.check(resource)]
        if not served:
            raise ValueError(f"{handler} serves no resource that the cluster serves (its CRD not applied?): "
                             f"its webhook would have no rules.")
        handlers.append(({'index': index, **handler.webhook_for_engine()}, [info for info, _ in served]))
        crds |= {name for _, resource in served if (name := _crd_name(resource)) is not None}
    converted = set()
    for conversion in registry._conversions:
        served_names = {_crd_name(resource) for _, resource in resources if conversion.selector.check(resource)}
        converted |= {name for name in served_names if name is not None}
        if not served_names - {None}:
            raise ValueError(f"{conversion} converts no custom resource that the cluster serves (its CRD "
                             f"not applied?).")
    # The names of OLM's webhooks need three segments: the handler's, the package's, kopf.dev.
    made = json.loads(services.webhooks_for_manager(json.dumps(handlers), sorted(converted), f"{package}.kopf.dev"))
    definitions: list[dict[str, Any]] = []
    for webhook, handler in zip(made['admission'], registry._webhooks, strict=True):
        kind = 'ValidatingAdmissionWebhook' if handler.reason == WebhookType.VALIDATING else 'MutatingAdmissionWebhook'
        definitions.append({
            'type': kind, 'generateName': webhook['name'], 'deploymentName': package,
            'containerPort': 443, 'targetPort': WEBHOOK_PORT,
            'webhookPath': webhook['clientConfig']['service']['path'],
            **{key: webhook[key] for key in ('rules', 'sideEffects', 'failurePolicy', 'matchPolicy',
                                             'timeoutSeconds', 'admissionReviewVersions')},
            **({'objectSelector': webhook['objectSelector']} if webhook['objectSelector'] else {}),
        })
    for crd, path in made['conversion'].items():
        definitions.append({
            'type': 'ConversionWebhook', 'generateName': f"{crd}.{package}.kopf.dev", 'deploymentName': package,
            'containerPort': 443, 'targetPort': WEBHOOK_PORT, 'webhookPath': path, 'conversionCRDs': [crd],
            'sideEffects': 'None', 'admissionReviewVersions': ['v1'],
        })
    return definitions, crds | converted


def _required(names: Sequence[str], resources: Sequence[Resource], bundled: Collection[str]) -> list[dict[str, str]]:
    """The CSV's entries of the CRDs that another operator provides (OLM installs that one first):
    their kind and served version as the cluster has them."""
    entries = []
    for name in names:
        if name in bundled:
            raise ValueError(f"--required-crd {name}: a --crd file gives it too; a CRD is the bundle's own or "
                             f"another operator's, not both.")
        found = [r for r in resources if _crd_name(r) == name and r.preferred]
        if not found:
            raise ValueError(f"--required-crd {name}: the cluster does not serve it (its kind and version are "
                             f"read from there).")
        kind = str(found[0].kind)
        entries.append({'name': name, 'version': found[0].version, 'kind': kind, 'displayName': kind,
                        'description': f"{kind}, of another operator."})
    return entries


async def generate(*, registry: OperatorRegistry, options: Options,
                   **plan_options: Any) -> tuple[list[str], list[str]]:
    """Write the bundle; the paths written, and the warnings about the handlers' requests."""
    clusterwide = plan_options['clusterwide']
    if registry._conversions and not clusterwide:
        raise ValueError("OLM installs an operator with conversion webhooks for all namespaces only (a CRD "
                         "converts the objects of every namespace): generate its bundle with -A.")
    settings = OperatorSettings()
    connection = await _connect(registry, settings)
    found = await _discover(connection)
    resources = [Resource.from_engine(info) for info in found]
    the_plan = plan(registry=registry, resources=resources, settings=settings, installed=True, **plan_options)
    for rule in _elsewhere(the_plan):
        the_plan.warnings.append(f"{', '.join(sorted(rule.verbs))} {rule.resource} ({rule.group or 'core'}) in the "
                                 f"namespace {rule.namespace!r}: OLM grants permissions in the target namespaces "
                                 f"only, so the CSV grants it cluster-wide")
    webhooks, webhook_crds = webhook_definitions(registry, found, options.package.name)
    crds = [read_crd(path) for path in options.crds]
    required = _required(options.required, resources, {crd.name for crd in crds})
    absent = sorted(({*served_crds(the_plan), *webhook_crds}) - {crd.name for crd in crds} - set(options.required))
    if absent:
        try:
            read = await _read(connection, [crd_path(name) for name in absent])
        except RuntimeError as e:
            raise ValueError(f"The CRDs that no --crd file gives cannot be read: {e}") from None
        unknown = [name for name, crd in zip(absent, read, strict=True) if crd is None]
        if unknown:
            raise ValueError(f"The handlers serve CRDs that neither a --crd file nor the cluster defines: "
                             f"{', '.join(unknown)}.")
        crds += [crd_as_read(crd) for crd in read]
        logger.info(f"The CRDs as the cluster has them (no --crd file): {', '.join(absent)}")
    files = bundle(the_plan, options, clusterwide=clusterwide, crds=crds, webhooks=webhooks, required=required)
    # A bundle is written whole: what an earlier one left (a CRD since removed) goes.
    for folder in ('manifests', 'metadata'):
        for stale in (options.output / folder).glob('*.yaml'):
            stale.unlink()
    return write_files(options.output, files), the_plan.warnings


def write_files(folder: Path, files: dict[str, str]) -> list[str]:
    """Write the files (relative path → text) into the folder; their paths."""
    written = []
    for relative, text in files.items():
        path = folder / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        written.append(str(path))
    return written


# -- kopf olm verify ------------------------------------------------------------------------------
# The checks of operator-framework's default bundle validators (its `pkg/validation`: the CSV's,
# the CRDs', the bundle's), on the files as written, without a cluster. Not made here: the
# bundle's compressed size, and the struct-level checks of fields that only its Go types know.

_DNS_SUBDOMAIN = re.compile(r'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')
_LABEL_VALUE = re.compile(r'(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')
_INSTALL_MODES = ('OwnNamespace', 'SingleNamespace', 'MultiNamespace', 'AllNamespaces')
_MEDIATYPE = 'operators.operatorframework.io.bundle.mediatype.v1'


def verify(directory: Path) -> tuple[list[str], list[str]]:
    """The bundle's errors and warnings, each a line saying which file and what."""
    errors: list[str] = []
    warnings: list[str] = []
    _verify_annotations(directory / 'metadata' / 'annotations.yaml', errors)
    documents: list[tuple[Path, dict[str, Any]]] = []
    for path in sorted((directory / 'manifests').glob('*')):
        if path.suffix not in ('.yaml', '.yml', '.json'):
            continue
        try:
            documents += [(path, doc) for doc in yaml.safe_load_all(path.read_text()) if isinstance(doc, dict)]
        except yaml.YAMLError as e:
            errors.append(f"{path.name}: not YAML: {e}")
    if not (directory / 'manifests').is_dir():
        errors.append("manifests/: absent")
    csvs = [(path, doc) for path, doc in documents if doc.get('kind') == 'ClusterServiceVersion']
    crds = [(path, doc) for path, doc in documents if doc.get('kind') == 'CustomResourceDefinition']
    if len(csvs) != 1:
        errors.append(f"manifests/: {len(csvs)} ClusterServiceVersions, not one")
    for path, crd in crds:
        _verify_crd(path, crd, errors)
    for path, csv in csvs[:1]:
        crd_names = [str((crd.get('metadata') or {}).get('name')) for _, crd in crds]
        _verify_csv(path, csv, crd_names, errors, warnings)
        _verify_owned(path, csv, crds, errors)
    return errors, warnings


def _verify_annotations(path: Path, errors: list[str]) -> None:
    try:
        annotations = (yaml.safe_load(path.read_text()) or {}).get('annotations') or {}
    except (OSError, yaml.YAMLError, AttributeError) as e:
        errors.append(f"metadata/annotations.yaml: cannot be read: {e}")
        return
    if annotations.get(_MEDIATYPE) != 'registry+v1':
        errors.append(f"metadata/annotations.yaml: {_MEDIATYPE} is not registry+v1")
    for key in ('package', 'channels'):
        if not annotations.get(f'operators.operatorframework.io.bundle.{key}.v1'):
            errors.append(f"metadata/annotations.yaml: no {key}")
    channels = str(annotations.get('operators.operatorframework.io.bundle.channels.v1') or '').split(',')
    default = annotations.get('operators.operatorframework.io.bundle.channel.default.v1')
    if default and default not in channels:
        errors.append(f"metadata/annotations.yaml: the default channel {default!r} is not one of {channels}")


def _csv_name_problem(name: Any) -> str | None:
    if not isinstance(name, str) or not name:
        return "is empty"
    if not _DNS_SUBDOMAIN.fullmatch(name) or len(name) > 253:
        return f"{name!r} is not a DNS-1123 subdomain"
    if len(name) > 63 or not _LABEL_VALUE.fullmatch(name):
        return f"{name!r} is not a valid label value (63 characters at most)"
    return None


def _verify_csv(path: Path, csv: dict[str, Any], crd_names: list[str], errors: list[str],
                warnings: list[str]) -> None:
    where = path.name
    if csv.get('apiVersion') != 'operators.coreos.com/v1alpha1':
        errors.append(f"{where}: apiVersion is not operators.coreos.com/v1alpha1")
    metadata, spec = csv.get('metadata') or {}, csv.get('spec') or {}
    if (problem := _csv_name_problem(metadata.get('name'))) is not None:
        errors.append(f"{where}: metadata.name {problem}")
    if spec.get('replaces') and (problem := _csv_name_problem(spec['replaces'])) is not None:
        errors.append(f"{where}: spec.replaces {problem}")
    if not SEMVER.fullmatch(str(spec.get('version', ''))):
        errors.append(f"{where}: spec.version {spec.get('version')!r} is not a semantic version")
    for field in ('displayName', 'description'):
        if not spec.get(field):
            errors.append(f"{where}: spec.{field} is empty")
    if 'minKubeVersion' not in spec:
        warnings.append(f"{where}: spec.minKubeVersion is not set")
    elif not SEMVER.fullmatch(str(spec['minKubeVersion'])):
        errors.append(f"{where}: spec.minKubeVersion {spec['minKubeVersion']!r} is not a semantic version")
    modes = spec.get('installModes') or []
    types = [mode.get('type') for mode in modes]
    if not modes:
        errors.append(f"{where}: spec.installModes: none")
    elif len(set(types)) != len(types):
        errors.append(f"{where}: spec.installModes: duplicates")
    elif unknown := [t for t in types if t not in _INSTALL_MODES]:
        errors.append(f"{where}: spec.installModes: unknown types {unknown}")
    elif not any(mode.get('supported') for mode in modes):
        errors.append(f"{where}: spec.installModes: none is supported")
    install = spec.get('install') or {}
    deployments = (install.get('spec') or {}).get('deployments') or []
    if install.get('strategy') != 'deployment' or not deployments:
        errors.append(f"{where}: spec.install: not a deployment strategy with deployments")
    for deployment in deployments:
        if not deployment.get('name') or not (deployment.get('spec') or {}).get('template'):
            errors.append(f"{where}: spec.install: a deployment without a name or a pod template")
    for kind in ('permissions', 'clusterPermissions'):
        for entry in (install.get('spec') or {}).get(kind) or []:
            if not entry.get('serviceAccountName'):
                errors.append(f"{where}: spec.install.spec.{kind}: an entry without a serviceAccountName")
            for rule in entry.get('rules') or []:
                if not rule.get('verbs') or not (rule.get('resources') or rule.get('nonResourceURLs')):
                    errors.append(f"{where}: spec.install.spec.{kind}: a rule without verbs or resources")
    _verify_webhooks(where, spec, [d.get('name') for d in deployments], crd_names, errors)
    owned = (spec.get('customresourcedefinitions') or {}).get('owned') or []
    examples = _examples(csv, where, errors)
    for entry in owned:
        group = str(entry.get('name', '')).partition('.')[2]
        if (group, entry.get('version'), entry.get('kind')) not in examples:
            warnings.append(f"{where}: {group}/{entry.get('version')}, Kind={entry.get('kind')}: "
                            f"provided API should have an example annotation (alm-examples)")


_WEBHOOK_TYPES = ('ValidatingAdmissionWebhook', 'MutatingAdmissionWebhook', 'ConversionWebhook')


def _verify_webhooks(where: str, spec: dict[str, Any], deployments: list[Any], crds: list[str],
                     errors: list[str]) -> None:
    """The validators' one check of webhook definitions (conversions need the AllNamespaces mode
    alone), and those that OLM makes when it installs them (fields, the deployment named)."""
    for at, webhook in enumerate(spec.get('webhookdefinitions') or []):
        field = f"{where}: spec.webhookdefinitions[{at}]"
        if webhook.get('type') not in _WEBHOOK_TYPES:
            errors.append(f"{field}: type {webhook.get('type')!r} is not one of {', '.join(_WEBHOOK_TYPES)}")
        name = str(webhook.get('generateName') or '')
        if not _DNS_SUBDOMAIN.fullmatch(name) or len(name) > 253 or name.count('.') < 2:
            errors.append(f"{field}: generateName {name!r} is not a DNS name of three labels or more")
        if webhook.get('deploymentName') not in deployments:
            errors.append(f"{field}: deploymentName {webhook.get('deploymentName')!r} is not a deployment of "
                          f"spec.install")
        if not 0 < int(webhook.get('containerPort', 443)) < 65536:
            errors.append(f"{field}: containerPort {webhook.get('containerPort')!r} is not a port")
        if webhook.get('sideEffects') not in ('None', 'NoneOnDryRun'):
            errors.append(f"{field}: sideEffects is neither None nor NoneOnDryRun")
        if not webhook.get('admissionReviewVersions'):
            errors.append(f"{field}: no admissionReviewVersions")
        if webhook.get('type') == 'ConversionWebhook' and not webhook.get('conversionCRDs'):
            errors.append(f"{field}: a ConversionWebhook without conversionCRDs")
        if webhook.get('conversionCRDs'):
            modes = {mode.get('type'): mode.get('supported') for mode in spec.get('installModes') or []}
            if not modes.get('AllNamespaces') or any(on for mode, on in modes.items() if mode != 'AllNamespaces'):
                errors.append(f"{field}: only AllNamespaces InstallModeType is supported when conversionCRDs is "
                              f"present")
            if absent := sorted(set(webhook['conversionCRDs']) - set(crds)):
                errors.append(f"{field}: conversionCRDs not in the bundle: {', '.join(absent)}")


def _examples(csv: dict[str, Any], where: str, errors: list[str]) -> set[tuple[str, Any, Any]]:
    text = ((csv.get('metadata') or {}).get('annotations') or {}).get('alm-examples')
    if not text:
        return set()
    try:
        examples = yaml.safe_load(text)
    except yaml.YAMLError as e:
        errors.append(f"{where}: alm-examples is not JSON: {e}")
        return set()
    found = set()
    for example in examples or []:
        if isinstance(example, dict):
            group, _, version = str(example.get('apiVersion', '')).rpartition('/')
            found.add((group, version, example.get('kind')))
    return found


def _crd_keys(crd: dict[str, Any], served_only: bool = False) -> set[tuple[str, str, str]]:
    spec = crd.get('spec') or {}
    kind = (spec.get('names') or {}).get('kind', '')
    return {(spec.get('group', ''), version.get('name', ''), kind) for version in spec.get('versions') or []
            if not served_only or version.get('served', True)}


def _verify_crd(path: Path, crd: dict[str, Any], errors: list[str]) -> None:
    spec = crd.get('spec') or {}
    names = spec.get('names') or {}
    if crd.get('apiVersion') != 'apiextensions.k8s.io/v1':
        errors.append(f"{path.name}: not an apiextensions.k8s.io/v1 CustomResourceDefinition")
    if (crd.get('metadata') or {}).get('name') != f"{names.get('plural')}.{spec.get('group')}":
        errors.append(f"{path.name}: metadata.name is not spec.names.plural + '.' + spec.group")
    versions = spec.get('versions') or []
    if sum(1 for version in versions if version.get('storage')) != 1:
        errors.append(f"{path.name}: not exactly one stored version")


def _verify_owned(path: Path, csv: dict[str, Any], crds: list[tuple[Path, dict[str, Any]]],
                  errors: list[str]) -> None:
    spec = csv.get('spec') or {}
    definitions = spec.get('customresourcedefinitions') or {}
    in_bundle: dict[tuple[str, str, str], Path] = {}
    served: set[tuple[str, str, str]] = set()
    for file, crd in crds:
        for key in _crd_keys(crd):
            if key in in_bundle:
                errors.append(f"{file.name}: a duplicate CRD {key}")
            in_bundle[key] = file
        served |= _crd_keys(crd, served_only=True)
    # Owned versions must be in the bundle; the bundle's CRDs must be owned (any of their
    # versions: the others of an owned one may be left out of the CSV).
    owned_kinds = set()
    for entry in definitions.get('owned') or []:
        key = (str(entry.get('name', '')).partition('.')[2], entry.get('version', ''), entry.get('kind', ''))
        if key not in in_bundle:
            errors.append(f"{path.name}: the owned CRD {entry.get('name')} ({key[1]}, {key[2]}) is not in the bundle")
        else:
            owned_kinds.add((key[0], key[2]))
            # OLM holds the CSV pending ("RequirementsNotMet") until the owned version is served.
            if key not in served:
                errors.append(f"{path.name}: the owned CRD {entry.get('name')}'s version {key[1]} is not served "
                              f"(served: false in {in_bundle[key].name}): OLM keeps the CSV pending")
    for (group, version, kind), file in sorted(in_bundle.items()):
        if (group, kind) not in owned_kinds:
            errors.append(f"{file.name}: the CRD's {group}/{version}, Kind={kind} is in the bundle but not "
                          f"owned by the CSV")
