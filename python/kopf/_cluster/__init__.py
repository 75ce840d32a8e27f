"""A local Kubernetes control plane for tests: what it is built from.

``modules/build/`` and ``modules/nodes/`` are the Go modules whose commands make the control
plane (etcd, kube-apiserver, kube-controller-manager, kubectl) and its simulated nodes
(kube-scheduler, kwok), built from the Go module proxy; ``kwok.yaml`` holds the stages by
which kwok moves pods through their lives. The project's own ``tests/cluster/cluster`` builds
and runs them; they ship in the package for ``kopf.testing``'s control plane to come.

Uses: nothing.
"""
