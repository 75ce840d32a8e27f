"""The boundary with the compiled core (``kopf._engine``), at the bottom of the package: what
crosses it (``protocol``: the calls, their answers, the objects' and settings' shapes) and the
core's own functions and types (``services``: the operator itself, daemons' bodies, the indices,
cron checks, kubeconfig files, discovery and access reviews, the peering objects, certificates),
each named once. The only modules that import ``kopf._engine`` (``checks/layering.py`` keeps the
others from it); they import nothing else of the package.
"""
