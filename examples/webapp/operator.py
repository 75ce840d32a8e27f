"""A controller as Go and Rust authors write them (not in Kopf): one reconcile handler keeps a
WebApp's Deployment and Service as its spec says, whatever changed. Delete the Deployment, or
scale it by hand, and the WebApp's reconcile puts it back (`owns=`: the children's changes wake
their owner); the Deployment's progress wakes it too, and the WebApp reports `Ready` as a
condition that `kubectl wait` sees.

    kubectl apply -f examples/webapp/crd.yaml
    kopf run --standalone -n default examples/webapp/operator.py
    kubectl apply -f examples/webapp/webapp.yaml
    kubectl wait --for=condition=Ready webapp/hello --timeout=60s
"""

from typing import Any

import kopf
import kubernetes

MANAGER = 'webapp-operator'


def children(name: str, namespace: str, spec: kopf.Spec) -> tuple[dict[str, Any], dict[str, Any]]:
    """The Deployment and the Service that the WebApp's spec asks for, adopted by it."""
    labels = {'app.kubernetes.io/name': name, 'app.kubernetes.io/managed-by': MANAGER}
    port = spec.get('port', 8080)
    deployment = {
        'apiVersion': 'apps/v1', 'kind': 'Deployment',
        'metadata': {'name': name, 'namespace': namespace, 'labels': labels},
        'spec': {
            'replicas': spec.get('replicas', 1),
            'selector': {'matchLabels': labels},
            'template': {
                'metadata': {'labels': labels},
                'spec': {'containers': [{'name': 'web', 'image': spec['image'],
                                         'ports': [{'containerPort': port}]}]},
            },
        },
    }
    service = {
        'apiVersion': 'v1', 'kind': 'Service',
        'metadata': {'name': name, 'namespace': namespace, 'labels': labels},
        'spec': {'selector': labels, 'ports': [{'port': 80, 'targetPort': port}]},
    }
    kopf.adopt([deployment, service])
    return deployment, service


@kopf.on.reconcile('demo.kopf.dev', 'webapps', owns=[('apps', 'v1', 'deployments'), ('', 'v1', 'services')])
def reconcile(name: str, namespace: str, spec: kopf.Spec, patch: kopf.Patch, logger: kopf.Logger,
              **_: Any) -> None:
    deployment, service = children(name, namespace, spec)
    apps, core = kubernetes.client.AppsV1Api(), kubernetes.client.CoreV1Api()
    try:
        # (a strategic merge: a replica count changed by hand is put back; other fields stay)
        current = apps.patch_namespaced_deployment(name, namespace, deployment)
    except kubernetes.client.ApiException as e:
        if e.status != 404:
            raise
        current = apps.create_namespaced_deployment(namespace, deployment)
        logger.info(f"Made the Deployment {name}.")
    try:
        core.patch_namespaced_service(name, namespace, service)
    except kubernetes.client.ApiException as e:
        if e.status != 404:
            raise
        core.create_namespaced_service(namespace, service)
        logger.info(f"Made the Service {name}.")

    # Ready once the Deployment has rolled out what the spec asks (its status changes wake us).
    wanted = deployment['spec']['replicas']
    status = current.status
    available = (status.available_replicas or 0) if status else 0
    rolled_out = status is not None and current.metadata.generation == status.observed_generation
    ready = rolled_out and available >= wanted and (status.updated_replicas or 0) >= wanted
    kopf.set_condition(patch, 'Ready', ready, reason='Available' if ready else 'Progressing',
                       message=f"{available}/{wanted} replicas available")
