"""The operator run on the core, at the top of the package below its public modules: the
operator's life (``operator``: its activities, the core's run, ``kopf.run()`` and
``kopf.operator()``), the core's calls into the handlers answered (``calls``), and the run
stopped by signals and flags (``stopping``). Reaches the core through ``kopf._bridge``.
"""
