"""A local Kubernetes control plane for tests and for people: ``kopf.testing.KopfCluster``, the
pytest plugin's fixtures (``fixtures``), ``kopf testing install`` and ``kopf testing cluster``.

Bottom-up: ``binaries`` (where the programs come from: ``$KUBEBUILDER_ASSETS``, or the cache that
``modules/build/`` and ``modules/nodes/`` are built into, or ``downloads``' envtest release),
``pki`` (certificates, tokens, kubeconfigs), ``processes`` (spawned, recorded, stopped),
``plane`` (a control plane in a state folder), ``session`` (one per test session, with its CRDs
and namespaces), ``fixtures``. ``kwok.yaml`` holds the stages by which kwok moves pods through
their lives. The project's own ``checks/cluster`` runs ``plane`` with all components.

Uses: nothing of kopf but itself (PyYAML, openssl, and Go to build).
"""
