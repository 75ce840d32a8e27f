"""An operator whose handlers make children of their own (not in Kopf: its RBAC): each Greeting
gets a ConfigMap with its message, kept up to date, deleted with it (an owner reference), signed
with the greeters' signature from a Secret beside it if they left one.

`kopf rbac generate` reads the handlers' calls of the `kubernetes` client and grants them; what
the code hides from it (here: a resource named by a setting) is declared with `kopf.rbac`:

    kopf rbac generate -n default --name lantern examples/children/operator.py | kubectl apply -f -
    kopf run -n default examples/children/operator.py        # as the account `lantern`
    kopf rbac record -- kopf run -n default examples/children/operator.py   # what a run needs
"""

import os
from typing import Any

import kopf
import kubernetes

SIGNATURES = os.environ.get('GREETERS_SIGNATURES', 'secrets')  # where the signature is kept


def glow(name: str, namespace: str, message: str) -> dict[str, Any]:
    body = {'metadata': {'name': f'{name}-glow', 'namespace': namespace}, 'data': {'message': message}}
    kopf.adopt(body)
    return body


@kopf.on.create('greetings')
def light(spec: kopf.Spec, name: str, namespace: str, logger: kopf.Logger, **_: Any) -> dict[str, str]:
    message = f"Hello, {spec.get('who', 'world')}!{signature(namespace)}"
    kubernetes.client.CoreV1Api().create_namespaced_config_map(namespace, glow(name, namespace, message))
    logger.info(f"Lit {name}-glow")
    return {'message': message}


@kopf.on.update('greetings', field='spec.who')
def relight(new: Any, name: str, namespace: str, **_: Any) -> dict[str, str]:
    message = f"Hello again, {new}!"
    api = kubernetes.client.CoreV1Api()
    api.patch_namespaced_config_map(f'{name}-glow', namespace, {'data': {'message': message}})
    return {'message': message}


@kopf.rbac.needs('secrets', verbs=['get'])  # its resource is named by a setting: hidden from the reading
def signature(namespace: str) -> str:
    """The greeters' signature in the namespace, if they left one."""
    api = kubernetes.client.CoreV1Api()
    try:
        secret = getattr(api, f'read_namespaced_{SIGNATURES[:-1]}')('greeters-signature', namespace)
    except kubernetes.client.ApiException as e:
        if e.status in (403, 404):
            return ''
        raise
    return f" -- {secret.metadata.labels.get('by', 'the greeters')}" if secret.metadata.labels else ''
