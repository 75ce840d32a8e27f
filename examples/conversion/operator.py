"""A Contact's name, one field in v1 and two in v2 (crd.yaml), converted both ways.

Run it beside a local API server (the one of `checks/cluster up`)::

    kubectl apply -f examples/conversion/crd.yaml
    kopf run examples/conversion/operator.py --verbose
    kubectl apply -f examples/conversion/contact.yaml          # created as v1
    kubectl get contacts.v2.demo.kopf.dev ada -o yaml          # read as v2: first/last
"""
import kopf


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_):
    # The API server sends the conversion reviews to the same server as admission reviews:
    # a local one here (a self-signed certificate, given to the API server in the CRD).
    settings.admission.server = kopf.WebhookServer(addr='127.0.0.1', host='127.0.0.1')
    settings.conversion.managed = True  # point the CRD's spec.conversion at it, and keep it so


@kopf.on.convert('contacts.demo.kopf.dev', source='v1', target='v2')
def split_name(spec, logger, **_):
    name = spec.get('name') or ''
    if not name.strip():
        raise kopf.PermanentError("A contact needs a name to split into first and last.")
    first, _, last = name.strip().partition(' ')
    logger.debug(f"Split {name!r} into {first!r} and {last!r}.")
    rest = {key: value for key, value in spec.items() if key != 'name'}
    return {'spec': {**rest, 'first': first, 'last': last}}


@kopf.on.convert('contacts.demo.kopf.dev', source='v2', target='v1')
def join_name(spec, **_):
    rest = {key: value for key, value in spec.items() if key not in ('first', 'last')}
    name = ' '.join(part for part in (spec.get('first'), spec.get('last')) if part)
    return {'spec': {**rest, 'name': name}}
