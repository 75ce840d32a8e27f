"""The bridge to the compiled core (``kopf._engine``), and the only modules that import it:
``calls`` answers the core's calls into the handlers, ``running`` runs the core for an
operator (``stopping``: until signals or flags stop it), ``protocol`` describes what crosses
between them, and ``services`` names the core's other services that the package offers its
users (cron checks, kubeconfig files, discovery and access reviews, the peering objects,
certificates, the indices). ``checks/layering.py`` keeps every other module from importing
``kopf._engine``.
"""
