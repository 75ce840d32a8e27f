"""The tools for running operators, beside the engine: loading the operator's code, the RBAC
and OLM bundles generated from it (``rbac``, ``olm``), and the local control plane (``cluster``)."""
