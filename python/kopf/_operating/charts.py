"""``kopf deploy generate`` (not in Kopf): a Helm chart from what the operator's code says, the
third form beside ``kopf rbac generate`` and ``kopf olm generate``. The chart holds:

- the Deployment of the image (``kopf run`` as its entrypoint, the handlers in it) with the
  options given, non-root, with a read-only root, probed by ``--liveness``;
- the ServiceAccount and its roles, as ``kopf rbac generate`` writes them for those options
  (the account in the release's namespace);
- the CRDs of ``--crd`` files, and of the typed models that no file gives (Helm's ``crds/``:
  installed first, never upgraded or deleted by Helm);
- a PodDisruptionBudget once there is more than one replica (with peering or a Lease, one of
  them handles the objects, the others wait);
- with ``--metrics PORT``, ``kopf run --metrics`` on that port, a Service of it, and a
  ServiceMonitor if the values ask for one;
- with ``--mount``, the handlers' files (the chart's ``files/``) in a ConfigMap mounted at
  ``/operator/``, their digest in the pod's template: a changed file rolls out at the upgrade;
- with admission or conversion handlers, their webhooks: a Service of the operator's webhook
  server, its certificate issued and renewed by cert-manager (by a CA of the chart's own, or an
  issuer named in the values), the WebhookConfigurations, and the CRDs whose versions it
  converts (templates pointing at that Service, kept when the release is uninstalled), into
  which cert-manager's cainjector puts the CA. The operator serves with the mounted certificate
  and configures nothing itself (``$KOPF_CHART_WEBHOOK_PORT``:
  ``kopf._connecting.webhooks.serve_as_installed``); a renewed certificate is served within
  seconds of the kubelet updating the files, without a restart;
- ``values.yaml`` with what people change, and ``values.schema.json`` that Helm checks them by.

The templates are plain YAML with a few ``{{ .Values.* }}`` and ``if``s: no helpers.

``kopf deploy manifests`` renders a chart's templates with its values as Helm would
(``templating``): the same objects as plain YAML.

``kopf deploy verify`` makes the chart again from the code as it is now, with the options
that ``Chart.yaml`` keeps (``kopf.dev/generated-with``), and names what differs: of a chart's
folder, or of a release in the cluster (the chart that Helm keeps of it).
"""

from __future__ import annotations

import base64
import dataclasses
import difflib
import gzip
import hashlib
import json
import re
import sys
import urllib.parse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from kopf._connecting.webhooks import CHART
from kopf._handling.handlers import OperatorRegistry, WebhookType
from kopf._operating import templating
from kopf._operating.olm import Crd, read_crd, served_crds, webhook_definitions, write_files
from kopf._operating.rbac.commands import _connect, _discover, _plan, _read
from kopf._operating.rbac.rendering import render
from kopf._running.operator import specific_namespaces
from kopf._structures.settings import OperatorSettings

LIVENESS_PORT = 8080
# Chart.yaml's annotation with the options of `kopf deploy generate`, for `kopf deploy verify`.
RECIPE = 'kopf.dev/generated-with'
DIFF_LINES = 40  # of a file's differences shown
MADE_TEMPLATES = ('deployment.yaml', 'rbac.yaml', 'pdb.yaml', 'metrics.yaml', 'handlers.yaml', 'webhooks.yaml',
                  'conversions.yaml')
WEBHOOK_PORT = 9443  # the webhook server's, in the pod (the Service's port is a value: 443)
# The account's namespace in the roles' bindings: the release's, known when Helm renders.
RELEASE_NAMESPACE = '{{ .Release.Namespace }}'
# The served namespaces in the plan when they are a value (the templates name them).
SERVED = 'kopf-served-namespace'
# A chart's name, as Helm takes it (and as a Kubernetes name, since it names the objects).
CHART_NAME = re.compile(r'[a-z0-9]([-a-z0-9]*[a-z0-9])?')


@dataclasses.dataclass
class Options:
    """What the chart is made of, besides the handlers and the rules' options."""
    name: str  # the chart's, and the Deployment's
    image: str
    version: str  # the chart's
    output: Path
    crds: list[Path]
    entries: list[str]  # `kopf run`'s targets in the image: paths, or `-m MODULE`
    run_options: list[str]  # `kopf run`'s options (namespaces, peering, Lease, shards)
    mounted: list[Path] = dataclasses.field(default_factory=list)  # the handlers' files, in a ConfigMap
    metrics: int | None = None  # the port of `kopf run --metrics`, with a Service (and a ServiceMonitor)
    namespaces: list[str] = dataclasses.field(default_factory=list)  # served, as a value (set by `generate`)
    recipe: dict[str, Any] = dataclasses.field(default_factory=dict)  # how to make it again (`verify`)


async def generate(*, registry: OperatorRegistry, options: Options, source: str,
                   **plan_options: Any) -> tuple[list[str], list[str]]:
    """Write the chart; the paths written, and the warnings about the handlers' requests."""
    if not CHART_NAME.fullmatch(options.name) or len(options.name) > 53:
        raise ValueError(f"The chart's name {options.name!r} is not a name that Helm and Kubernetes take: lower-case "
                         f"letters, digits and dashes, at most 53 (give --chart NAME).")
    if options.metrics == LIVENESS_PORT:
        raise ValueError(f"--metrics {LIVENESS_PORT} is the liveness probe's port: choose another one.")
    names = [path.name for path in options.mounted]
    if len(set(names)) != len(names):
        raise ValueError(f"--mount puts the handlers' files in one folder: their names repeat ({', '.join(names)}).")
    settings = OperatorSettings()
    connection = await _connect(registry, settings)
    # Namespaces by name (not globs, which need cluster-wide watching) are a value: planned as one
    # placeholder namespace, whose roles the templates make in each namespace of the values.
    namespaces = list(plan_options.get('namespaces') or [])
    if not plan_options.get('clusterwide') and namespaces and specific_namespaces(namespaces) is not None:
        options.namespaces = namespaces
        plan_options = {**plan_options, 'namespaces': [SERVED]}
    # In the pod, the account and the Lease are in the release's namespace ($POD_NAMESPACE).
    in_release = {'account_namespace': RELEASE_NAMESPACE}
    if plan_options.get('lease_name'):
        in_release['lease_namespace'] = RELEASE_NAMESPACE
    # With webhooks, the chart configures them (cert-manager injects the CA), not the operator.
    installed = bool(registry._webhooks or registry._conversions)
    plan = await _plan(registry, settings, connection, installed=installed, **{**plan_options, **in_release})
    webhooks: list[dict[str, Any]] = []
    webhook_crds: set[str] = set()
    if registry._webhooks or registry._conversions:
        webhooks, webhook_crds = webhook_definitions(registry, await _discover(connection), options.name)
    crds = [read_crd(path) for path in options.crds]
    crds += _modelled(exclude={crd.name for crd in crds})
    converted = {crd for webhook in webhooks for crd in webhook.get('conversionCRDs', [])}
    if unfiled := sorted(converted - {crd.name for crd in crds}):
        raise ValueError(f"The conversion handlers convert {', '.join(unfiled)}: give its CRD with --crd FILE (the "
                         f"chart installs it, pointing its conversion at the release's webhook Service).")
    missing = sorted({*served_crds(plan), *webhook_crds} - {crd.name for crd in crds})
    if missing:
        plan.warnings.append(f"The handlers serve CRDs that no --crd file gives: {', '.join(missing)}; the chart "
                             f"does not install them (they must exist in the cluster before the operator starts).")
    # The release's namespace may be a served one too: its role is another, not a duplicate.
    # Cluster-wide objects are named by the release's namespace too: the chart installed in two
    # namespaces (two releases) makes two of them, not one that both claim.
    rbac = _in_served_namespaces(render(plan, source=f"the operator {source}",
                                        role_names={RELEASE_NAMESPACE: f"{plan.account}-release"},
                                        cluster_role_name=f"{plan.account}-{RELEASE_NAMESPACE}"))
    files = chart(options, account=plan.account, rbac=rbac, crds=crds, webhooks=webhooks, namespaces=plan.namespaces)
    # What an earlier generation wrote and this one does not (a CRD, a handlers' file) goes.
    made = [*(options.output / 'crds').glob('*.yaml'), *(options.output / 'files').glob('*'),
            *(options.output / 'templates' / name for name in MADE_TEMPLATES)]
    for stale in made:
        if stale.is_file() and stale.relative_to(options.output).as_posix() not in files:
            stale.unlink()
    return write_files(options.output, files), plan.warnings


def _modelled(exclude: set[str]) -> list[Crd]:
    """The CRDs of the operator's typed models (``kopf.CustomResource``), as ``kopf crd generate``
    writes them, but those that a ``--crd`` file gives."""
    if 'kopf._structures.models' not in sys.modules:  # (no models declared: pydantic not even imported)
        return []
    from kopf._operating import crds, schemas
    from kopf._structures.models import ModelError
    try:
        documents = crds.documents(crds.models())
    except (ModelError, schemas.SchemaError) as e:
        raise ValueError(f"The CRDs of the models cannot be made: {e}") from e
    return [Crd(body=document, text=crds.render([document]).removeprefix('---\n')) for document in documents
            if document['metadata']['name'] not in exclude]


def chart(options: Options, *, account: str, rbac: str, crds: list[Crd], webhooks: Sequence[dict[str, Any]] = (),
          namespaces: tuple[str, ...] = ()) -> dict[str, str]:
    """The chart's files (relative path → text); ``webhooks``: OLM's definitions of the admission
    webhooks (``olm.webhook_definitions``); ``namespaces``: the operator's own (none: all)."""
    files = {
        'Chart.yaml': _dump({
            'apiVersion': 'v2', 'name': options.name, 'version': options.version, 'type': 'application',
            'description': f"The operator {options.name}, in Python (kopf), as `kopf deploy generate` made it.",
            'appVersion': options.image.rpartition(':')[2] if ':' in options.image.rpartition('/')[2] else 'latest',
            'annotations': {RECIPE: json.dumps(options.recipe, sort_keys=True)},
        }),
        'values.yaml': VALUES.format(image=json.dumps(options.image)),
        'values.schema.json': json.dumps(_schema(metrics=options.metrics is not None, webhooks=bool(webhooks),
                                                 namespaces=bool(options.namespaces)), indent=2) + '\n',
        'templates/rbac.yaml': rbac,
        'templates/deployment.yaml': _deployment(options, account=account, webhooks=bool(webhooks)),
        'templates/pdb.yaml': PDB.replace('NAME', options.name),
        '.helmignore': '# Nothing of the chart folder is left out.\n',
    }
    converted = {crd: webhook['webhookPath'] for webhook in webhooks for crd in webhook.get('conversionCRDs', [])}
    for crd in crds:
        if crd.name not in converted:
            files[f"crds/{crd.name}.yaml"] = crd.text
    if converted:
        files['templates/conversions.yaml'] = _conversions(options.name, [crd for crd in crds if crd.name in converted],
                                                           converted)
    if options.metrics is not None:
        files['values.yaml'] += METRICS_VALUES
        files['templates/metrics.yaml'] = METRICS.replace('NAME', options.name).replace('PORT', str(options.metrics))
    if options.namespaces:
        files['values.yaml'] += NAMESPACES_VALUES.format(namespaces=json.dumps(options.namespaces))
    if webhooks:
        files['values.yaml'] += WEBHOOK_VALUES
        files['templates/webhooks.yaml'] = _webhooks(options.name, webhooks, namespaces)
    if options.mounted:
        files['templates/handlers.yaml'] = HANDLERS.replace('NAME', options.name)
        for path in options.mounted:
            files[f"files/{path.name}"] = path.read_text()
    return files


def recipe_of(folder: Path) -> dict[str, Any]:
    """How the chart in the folder was made: the options of `kopf deploy generate`, its paths
    relative to where it ran; a ValueError if it was not made so, or they are not here."""
    try:
        meta = yaml.safe_load((folder / 'Chart.yaml').read_text())
        recipe: dict[str, Any] = json.loads(meta['annotations'][RECIPE])
    except (OSError, yaml.YAMLError, TypeError, KeyError, json.JSONDecodeError) as e:
        raise ValueError(f"{folder} is not a chart of `kopf deploy generate` (its Chart.yaml has no "
                         f"{RECIPE} annotation): {e}") from None
    absent = [path for path in [*recipe['paths'], *recipe['crds']] if not Path(path).is_file()]
    if absent:
        raise ValueError(f"The chart was made from files that are not here: {', '.join(absent)}; run `kopf deploy "
                         f"verify` where `kopf deploy generate` ran.")
    return recipe


async def read_release(registry: OperatorRegistry, release: str, namespace: str | None) -> tuple[str, dict[str, str]]:
    """The chart of a release's deployed revision, as Helm keeps it in the release's Secret
    (``sh.helm.release.v1.NAME.vN``: the release as gzipped JSON, base64-encoded): its
    namespace, and its files (relative path → text). Read with the registry's login."""
    connection = await _connect(registry, OperatorSettings())
    namespace = namespace or json.loads(connection).get('default_namespace') or 'default'
    selector = urllib.parse.quote(f"owner=helm,name={release},status=deployed")
    try:
        [listed] = await _read(connection, [f"/api/v1/namespaces/{namespace}/secrets?labelSelector={selector}"])
    except RuntimeError as e:
        raise ValueError(f"The release {release!r} in {namespace!r} cannot be read: {e}") from None
    items = (listed or {}).get('items') or []
    if not items:
        raise ValueError(f"No deployed release {release!r} in the namespace {namespace!r}: Helm's Secret of it "
                         f"(labelled owner=helm, name={release}) is not there.")
    latest = max(items, key=lambda item: int(item['metadata'].get('labels', {}).get('version', 0)))
    try:
        stored = base64.b64decode(base64.b64decode(latest['data']['release']))
        chart = json.loads(gzip.decompress(stored) if stored[:2] == b'\x1f\x8b' else stored)['chart']
        files = {'Chart.yaml': _dump(chart['metadata'])}
        for entry in [*(chart.get('templates') or []), *(chart.get('files') or [])]:
            files[entry['name']] = base64.b64decode(entry['data']).decode()
        if chart.get('schema'):
            files['values.schema.json'] = base64.b64decode(chart['schema']).decode()
    except (KeyError, TypeError, ValueError, OSError) as e:  # (binascii.Error and JSON's are ValueErrors)
        raise ValueError(f"The release {release!r} in {namespace!r} is not stored as Helm stores releases "
                         f"({latest['metadata']['name']}): {e!r}") from None
    return namespace, files


# The kinds of the generated charts in Helm's order of installing them (the others after them).
INSTALL_ORDER = ('CustomResourceDefinition', 'PodDisruptionBudget', 'ServiceAccount', 'ConfigMap', 'ClusterRole',
                 'ClusterRoleBinding', 'Role', 'RoleBinding', 'Service', 'Deployment', 'MutatingWebhookConfiguration',
                 'ValidatingWebhookConfiguration')


def manifests(folder: Path, *, namespace: str, release: str) -> str:
    """The chart's objects as ``helm template --include-crds`` renders them with the chart's
    ``values.yaml`` (checked by its ``values.schema.json`` first), for a release of this name in
    this namespace: the CRDs, then the templates' objects, each after a comment naming its file."""
    files = {path.relative_to(folder).as_posix(): path.read_text() for path in sorted(folder.rglob('*'))
             if path.is_file()}
    try:
        values = yaml.safe_load(files.get('values.yaml', '')) or {}
        schema = json.loads(files.get('values.schema.json', '{}'))
    except (yaml.YAMLError, json.JSONDecodeError) as e:
        raise ValueError(f"{folder}: its values or their schema cannot be read: {e}") from None
    if errors := templating.check(values, schema):
        raise ValueError(f"{folder / 'values.yaml'}: the values do not fit the chart's values.schema.json:\n  "
                         + '\n  '.join(errors))
    texts = [(name, files[name]) for name in files if name.startswith('crds/') and name.endswith('.yaml')]
    for name in (name for name in files if name.startswith('templates/') and name.endswith('.yaml')):
        rendered = templating.render(files[name], values=values, release={'Name': release, 'Namespace': namespace},
                                     files=files, where=str(folder / name))
        texts.append((name, rendered))
    found: list[tuple[str, dict[str, Any]]] = []
    for name, text in texts:
        try:
            found += [(name, document) for document in yaml.safe_load_all(text) if document]
        except yaml.YAMLError as e:
            raise ValueError(f"{folder / name}: not YAML once rendered: {e}") from None
    # In Helm's order of installing: what others need first (the account before its pods).
    found.sort(key=lambda item: INSTALL_ORDER.index(item[1].get('kind')) if item[1].get('kind') in INSTALL_ORDER
               else len(INSTALL_ORDER))
    return ''.join(f"---\n# Source: {name}\n{templating.dump(document)}" for name, document in found)


def compare(chart: Path, made: Path) -> tuple[list[str], list[str]]:
    """What differs between the chart and the one made now (its values and version aside,
    which people change): the differences, and the chart's files that no generation makes."""
    def files(folder: Path) -> dict[str, str]:
        return {path.relative_to(folder).as_posix(): path.read_text() for path in folder.rglob('*')
                if path.is_file() and path.name not in ('values.yaml', 'Chart.yaml')}
    ours, now = files(chart), files(made)
    differences = []
    for name in sorted(now):
        if name not in ours:
            differences.append(f"{name}: missing; the code needs it now.")
        elif ours[name] != now[name]:
            diff = difflib.unified_diff(ours[name].splitlines(), now[name].splitlines(), f"{name} (the chart)",
                                        f"{name} (made now)", lineterm='', n=1)
            lines = list(diff)
            shown = lines[:DIFF_LINES] + ([f"... and {len(lines) - DIFF_LINES} more lines"]
                                          if len(lines) > DIFF_LINES else [])
            differences.append(f"{name}: not what the code makes now:\n" + '\n'.join(f"  {line}" for line in shown))
    extra = []
    for name in sorted(set(ours) - set(now)):
        if name.startswith(('crds/', 'files/')) or name == 'templates/handlers.yaml' or \
                name.startswith('templates/') and name.removeprefix('templates/') in MADE_TEMPLATES:
            differences.append(f"{name}: the code does not make it any more.")
        else:
            extra.append(f"{name}: not made by `kopf deploy generate` (left as it is).")
    return differences, extra


def _dump(document: dict[str, Any]) -> str:
    return yaml.safe_dump(document, sort_keys=False, default_flow_style=False, width=120)


# What people change, with what each does. The image's tag is the chart's appVersion.
VALUES = """\
# The operator's image: kopf-rs's (docker/Dockerfile) with the handlers in it.
image: {image}
imagePullPolicy: IfNotPresent
# More than one: the others wait while one handles the objects (peering or --lease), and a
# PodDisruptionBudget keeps one of them up.
replicas: 1
# The container's requests and limits. The engine itself needs 30-40 MiB for up to 100 000
# objects (bench/results); the handlers need what they need on top.
resources:
  requests: {{cpu: 50m, memory: 96Mi}}
  limits: {{memory: 256Mi}}
# The log's format: plain, full or json (`kopf run --log-format`).
logFormat: full
# More environment variables for the handlers (a list of the container's `env` items).
env: []
"""

SCHEMA: dict[str, Any] = {
    '$schema': 'https://json-schema.org/draft-07/schema#',
    'type': 'object',
    'additionalProperties': False,
    'required': ['image', 'replicas'],
    'properties': {
        'image': {'type': 'string', 'minLength': 1, 'description': "The operator's image."},
        'imagePullPolicy': {'type': 'string', 'enum': ['Always', 'IfNotPresent', 'Never']},
        'replicas': {'type': 'integer', 'minimum': 1, 'description': "How many pods: one handles the objects."},
        'resources': {'type': 'object', 'description': "The container's requests and limits."},
        'logFormat': {'type': 'string', 'enum': ['plain', 'full', 'json']},
        'env': {'type': 'array', 'items': {'type': 'object', 'required': ['name']},
                'description': "More environment variables (the container's `env` items)."},
    },
}

METRICS_VALUES = """\
# A ServiceMonitor of the metrics Service, for the Prometheus operator (its CRD must exist).
serviceMonitor:
  enabled: false
  interval: 30s
"""


NAMESPACES_VALUES = """\
# The namespaces whose objects the operator serves (`kopf run -n` of each): its roles are made
# in each of them.
namespaces: {namespaces}
"""

WEBHOOK_VALUES = """\
# The webhooks (admission, conversion): their Service's port (the pod serves on 9443), and the server's
# certificate, which cert-manager issues and renews (its controller and its cainjector must run in
# the cluster). The issuer: an Issuer or ClusterIssuer of one's own, e.g. {name: my-ca, kind:
# ClusterIssuer}; empty: a CA of the chart's own, self-signed (renewing the server's certificate
# keeps this CA, which the API server trusts).
webhooks:
  port: 443
  issuer: {}
  duration: 2160h  # the server's certificate is valid for 90 days,
  renewBefore: 360h  # and renewed 15 days before it expires
"""

DURATION = {'type': 'string', 'pattern': '^([0-9]+(ms|s|m|h))+$'}


def _schema(*, metrics: bool, webhooks: bool, namespaces: bool) -> dict[str, Any]:
    properties = dict(SCHEMA['properties'])
    required = list(SCHEMA['required'])
    if namespaces:
        required.append('namespaces')
        properties['namespaces'] = {'type': 'array', 'minItems': 1, 'uniqueItems': True, 'items': {
            'type': 'string', 'maxLength': 63, 'pattern': '^[a-z0-9]([-a-z0-9]*[a-z0-9])?$'},
            'description': "The namespaces whose objects the operator serves."}
    if metrics:
        properties['serviceMonitor'] = {'type': 'object', 'additionalProperties': False, 'properties': {
            'enabled': {'type': 'boolean'}, 'interval': DURATION}}
    if webhooks:
        issuer = {'type': 'object', 'additionalProperties': False, 'properties': {
            'name': {'type': 'string', 'minLength': 1}, 'kind': {'type': 'string', 'enum': ['Issuer', 'ClusterIssuer']},
            'group': {'type': 'string'}}, 'description': "cert-manager's issuer of the server's certificate "
                                                          "(empty: a CA of the chart's own)."}
        properties['webhooks'] = {'type': 'object', 'additionalProperties': False, 'required': ['port'], 'properties': {
            'port': {'type': 'integer', 'minimum': 1, 'maximum': 65535, 'description': "The webhook Service's port."},
            'issuer': {**issuer, 'anyOf': [{'maxProperties': 0}, {'required': ['name', 'kind']}]},
            'duration': DURATION, 'renewBefore': DURATION}}
    return {**SCHEMA, 'required': required, 'properties': properties}


METRICS = """\
# The metrics of `kopf run --metrics` (Prometheus' format, at /metrics).
apiVersion: v1
kind: Service
metadata:
  name: NAME-metrics
  labels: {app.kubernetes.io/name: NAME, app.kubernetes.io/instance: {{ .Release.Name | quote }}}
spec:
  selector: {app.kubernetes.io/name: NAME, app.kubernetes.io/instance: {{ .Release.Name | quote }}}
  ports:
    - {name: metrics, port: PORT, targetPort: metrics}
{{- if .Values.serviceMonitor.enabled }}
---
apiVersion: monitoring.coreos.com/v1
kind: ServiceMonitor
metadata:
  name: NAME
  labels: {app.kubernetes.io/name: NAME, app.kubernetes.io/instance: {{ .Release.Name | quote }}}
spec:
  selector:
    matchLabels: {app.kubernetes.io/name: NAME, app.kubernetes.io/instance: {{ .Release.Name | quote }}}
  endpoints:
    - {port: metrics, path: /metrics, interval: {{ .Values.serviceMonitor.interval | quote }}}
{{- end }}
"""

PDB = """\
{{- if gt (int .Values.replicas) 1 }}
# One of the replicas stays up through a node's drain.
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: NAME
  labels: {app.kubernetes.io/name: NAME, app.kubernetes.io/instance: {{ .Release.Name | quote }}}
spec:
  minAvailable: 1
  selector:
    matchLabels: {app.kubernetes.io/name: NAME, app.kubernetes.io/instance: {{ .Release.Name | quote }}}
{{- end }}
"""


HANDLERS = """\
# The handlers' files (the chart's files/), mounted at /operator/ in the pod.
apiVersion: v1
kind: ConfigMap
metadata:
  name: NAME-handlers
  labels: {app.kubernetes.io/name: NAME, app.kubernetes.io/instance: {{ .Release.Name | quote }}}
data:
  {{- (.Files.Glob "files/*").AsConfig | nindent 2 }}
"""


# Placeholders in the webhook configurations as dumped, for what Helm fills in.
SERVICE_NAMESPACE, SERVICE_PORT, SERVED_LIST = 'SERVICE-NAMESPACE', 987654321, 'SERVED-NAMESPACES'


def _in_served_namespaces(rbac: str) -> str:
    """The roles planned for the placeholder namespace, made in each namespace of the values."""
    docs = rbac.split('---\n')
    served = [doc for doc in docs if f'namespace: "{SERVED}"' in doc]
    text = '---\n'.join(doc for doc in docs if doc not in served)
    if not served:
        return text
    # (In a range, `.` is the namespace: the release is `$`'s.)
    block = '---\n'.join(doc.replace(f'"{SERVED}"', '"{{ . }}"').replace('{{ .Release.', '{{ $.Release.')
                         for doc in served)
    return text + "# In each namespace that the values name:\n{{- range .Values.namespaces }}\n---\n" + block + \
        "{{- end }}\n"


WEBHOOKS = """\
# The webhooks (admission, conversion): the operator serves them on its port 9443
# ($KOPF_CHART_WEBHOOK_PORT) with the certificate of the Secret NAME-webhooks-tls, which
# cert-manager issues and renews.
apiVersion: v1
kind: Service
metadata:
  name: NAME-webhooks
  labels: LABELS
spec:
  selector: LABELS
  ports:
    - {name: webhooks, port: {{ .Values.webhooks.port }}, targetPort: webhooks}
{{- if not .Values.webhooks.issuer }}
---
# A CA of the chart's own: self-signed, it signs the server's certificate.
apiVersion: cert-manager.io/v1
kind: Issuer
metadata:
  name: NAME-selfsigned
  labels: LABELS
spec:
  selfSigned: {}
---
apiVersion: cert-manager.io/v1
kind: Certificate
metadata:
  name: NAME-ca
  labels: LABELS
spec:
  isCA: true
  commonName: NAME-ca
  duration: 87600h  # 10 years: a renewed CA would need all its certificates renewed with it
  secretName: NAME-ca
  secretTemplate: {labels: LABELS}
  privateKey: {algorithm: ECDSA, size: 256}
  issuerRef: {name: NAME-selfsigned, kind: Issuer}
---
apiVersion: cert-manager.io/v1
kind: Issuer
metadata:
  name: NAME-ca
  labels: LABELS
spec:
  ca: {secretName: NAME-ca}
{{- end }}
---
# The server's certificate, for the Service's names.
apiVersion: cert-manager.io/v1
kind: Certificate
metadata:
  name: NAME-webhooks
  labels: LABELS
spec:
  secretName: NAME-webhooks-tls
  # (cert-manager leaves its Secrets when the release is uninstalled: by these labels, they can go too.)
  secretTemplate: {labels: LABELS}
  dnsNames:
    - NAME-webhooks.{{ .Release.Namespace }}.svc
    - NAME-webhooks.{{ .Release.Namespace }}.svc.cluster.local
  privateKey: {algorithm: ECDSA, size: 256, rotationPolicy: Always}
  duration: {{ .Values.webhooks.duration | quote }}
  renewBefore: {{ .Values.webhooks.renewBefore | quote }}
  issuerRef:
    {{- if .Values.webhooks.issuer }}
    {{- toYaml .Values.webhooks.issuer | nindent 4 }}
    {{- else }}
    {name: NAME-ca, kind: Issuer}
    {{- end }}
"""


def _webhooks(name: str, definitions: Sequence[dict[str, Any]], namespaces: tuple[str, ...]) -> str:
    """The Service, the certificates and the WebhookConfigurations (with cainjector's annotation),
    from OLM's definitions of the webhooks (``olm.webhook_definitions``)."""
    labels = f"{{app.kubernetes.io/name: {name}, app.kubernetes.io/instance: {{{{ .Release.Name | quote }}}}}}"
    text = WEBHOOKS.replace('NAME', name).replace('LABELS', labels)
    # Only the operator's namespaces are reviewed by it (Kopf's own configurations have no selector;
    # with --namespace, the objects of the other namespaces are not the operator's to refuse).
    values: Any = SERVED_LIST if SERVED in namespaces else sorted(namespaces)
    selector = {'namespaceSelector': {'matchExpressions': [
        {'key': 'kubernetes.io/metadata.name', 'operator': 'In', 'values': values}]}} if namespaces else {}
    for kind in (WebhookType.VALIDATING, WebhookType.MUTATING):
        typename = 'ValidatingAdmissionWebhook' if kind == WebhookType.VALIDATING else 'MutatingAdmissionWebhook'
        chosen = [definition for definition in definitions if definition['type'] == typename]
        if not chosen:
            continue
        configuration = {
            'apiVersion': 'admissionregistration.k8s.io/v1',
            'kind': 'ValidatingWebhookConfiguration' if kind == WebhookType.VALIDATING else
                    'MutatingWebhookConfiguration',
            'metadata': {'name': f"{name}-{SERVICE_NAMESPACE}", 'labels': 'LABELS',
                         'annotations': {'cert-manager.io/inject-ca-from': f"{SERVICE_NAMESPACE}/{name}-webhooks"}},
            'webhooks': [{
                'name': definition['generateName'],
                'clientConfig': {'service': {'name': f"{name}-webhooks", 'namespace': SERVICE_NAMESPACE,
                                             'port': SERVICE_PORT, 'path': definition['webhookPath']}},
                **{key: definition[key] for key in ('rules', 'sideEffects', 'failurePolicy', 'matchPolicy',
                                                    'timeoutSeconds', 'admissionReviewVersions')},
                **({'objectSelector': definition['objectSelector']} if 'objectSelector' in definition else {}),
                **selector,
            } for definition in chosen],
        }
        text += "---\n" + _dump(configuration)
    return (text.replace(SERVICE_NAMESPACE, '{{ .Release.Namespace }}')
            .replace(str(SERVICE_PORT), '{{ .Values.webhooks.port }}')
            .replace(SERVED_LIST, '{{ .Values.namespaces | toJson }}')
            .replace("labels: LABELS", f"labels: {labels}"))


def _conversions(name: str, crds: list[Crd], paths: dict[str, str]) -> str:
    """The CRDs whose conversion the operator serves: pointed at the release's webhook Service,
    with cainjector's annotation; templates rather than crds/ (where Helm fills nothing in), and
    kept when the release is uninstalled (deleting a CRD deletes all its objects)."""
    text = ("# The CRDs whose versions the operator converts: the API server asks its webhook Service. Helm\n"
            "# keeps them when the release is uninstalled (their objects with them); their conversion then\n"
            "# fails until the operator is installed again.\n")
    for crd in crds:
        body = json.loads(json.dumps(crd.body))
        metadata = body.setdefault('metadata', {})
        metadata.setdefault('annotations', {}).update({
            'cert-manager.io/inject-ca-from': f"{SERVICE_NAMESPACE}/{name}-webhooks",
            'helm.sh/resource-policy': 'keep',
        })
        body['spec']['conversion'] = {'strategy': 'Webhook', 'webhook': {
            'conversionReviewVersions': ['v1'],
            'clientConfig': {'service': {'name': f"{name}-webhooks", 'namespace': SERVICE_NAMESPACE,
                                         'port': SERVICE_PORT, 'path': paths[crd.name]}}}}
        text += "---\n" + _dump(body)
    return (text.replace(SERVICE_NAMESPACE, '{{ .Release.Namespace }}')
            .replace(str(SERVICE_PORT), '{{ .Values.webhooks.port }}'))


def _deployment(options: Options, *, account: str, webhooks: bool = False) -> str:
    metrics = [] if options.metrics is None else ['--metrics', f'0.0.0.0:{options.metrics}']
    run_options = list(options.run_options)
    if options.namespaces:  # (they are the values': `-n` of each, templated)
        pairs = [i for i, arg in enumerate(run_options) if arg == '-n']
        run_options = [arg for i, arg in enumerate(run_options) if i not in pairs and i - 1 not in pairs]
    args = [*run_options, '--liveness', f'http://0.0.0.0:{LIVENESS_PORT}/healthz', *metrics, *options.entries]
    listed = json.dumps(args)
    if options.namespaces:
        listed = '[{{- range .Values.namespaces }}"-n", {{ . | quote }}, {{ end }}' + listed[1:]
    labels = f"{{app.kubernetes.io/name: {options.name}, app.kubernetes.io/instance: {{{{ .Release.Name | quote }}}}}}"
    mounts, volumes, annotations, ports = "", "", "", ""
    environment = ""
    if options.metrics is not None:
        ports = f"\n            - {{name: metrics, containerPort: {options.metrics}}}"
    if webhooks:
        ports += f"\n            - {{name: webhooks, containerPort: {WEBHOOK_PORT}}}"
        # (kopf._connecting.webhooks.serve_as_installed: the certificate's files are compared now and then.)
        environment = (f"\n            # The webhooks are served on this port with the mounted certificate; the chart "
                       f"configures them.\n            - {{name: {CHART.port_variable}, value: \"{WEBHOOK_PORT}\"}}")
        mounts += f"\n            - {{name: webhooks, mountPath: {CHART.folder}, readOnly: true}}"
        volumes += f"\n        - {{name: webhooks, secret: {{secretName: {options.name}-webhooks-tls}}}}"
    if options.mounted:
        # The files' digest in the pod's template: a changed file is a new template, rolled out.
        digest = hashlib.sha256(b''.join(p.name.encode() + b'\0' + p.read_bytes() for p in options.mounted))
        annotations = f"\n      annotations: {{checksum/handlers: {digest.hexdigest()}}}"
        mounts += "\n            - {name: handlers, mountPath: /operator, readOnly: true}"
        volumes += f"\n        - {{name: handlers, configMap: {{name: {options.name}-handlers}}}}"
    return f"""\
# The operator: the image's `kopf run` with these arguments, as `kopf deploy generate` was given them.
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {options.name}
  labels: {labels}
spec:
  replicas: {{{{ .Values.replicas }}}}
  selector:
    matchLabels: {labels}
  template:
    metadata:
      labels: {labels}{annotations}
    spec:
      serviceAccountName: {json.dumps(account)}
      # SIGTERM, then this long to finish the handlers and leave.
      terminationGracePeriodSeconds: 30
      securityContext:
        runAsNonRoot: true
        runAsUser: 1000  # the image's user `kopf`
        seccompProfile: {{type: RuntimeDefault}}
      containers:
        - name: operator
          image: {{{{ .Values.image | quote }}}}
          imagePullPolicy: {{{{ .Values.imagePullPolicy }}}}
          args: {listed}
          env:
            - name: KOPF_RUN_LOG_FORMAT
              value: {{{{ .Values.logFormat | quote }}}}
            # The pod is the Lease's holder and the peer; the Lease lives in its namespace.
            - name: POD_ID
              valueFrom: {{fieldRef: {{fieldPath: metadata.name}}}}
            - name: POD_NAMESPACE
              valueFrom: {{fieldRef: {{fieldPath: metadata.namespace}}}}{environment}
            {{{{- with .Values.env }}}}
            {{{{- toYaml . | nindent 12 }}}}
            {{{{- end }}}}
          ports:
            - {{name: health, containerPort: {LIVENESS_PORT}}}{ports}
          livenessProbe:
            httpGet: {{path: /healthz, port: health}}
            initialDelaySeconds: 10
            periodSeconds: 20
            timeoutSeconds: 5
          resources:
            {{{{- toYaml .Values.resources | nindent 12 }}}}
          securityContext:
            allowPrivilegeEscalation: false
            readOnlyRootFilesystem: true
            capabilities: {{drop: [ALL]}}
          volumeMounts:
            - {{name: tmp, mountPath: /tmp}}  # the clients' temporary files (certificates){mounts}
      volumes:
        - {{name: tmp, emptyDir: {{}}}}{volumes}
"""
