"""The client libraries whose requests `introspecting` recognizes, one module each: what
their calls, attributes and iterations mean as API requests. Each opens with what it knows.

A library's module gives a `Library`; `LIBRARIES` lists them in the order they are asked."""

from __future__ import annotations

from kopf._operating.rbac.clients.base import CallSite, Library
from kopf._operating.rbac.clients.kopf import KOPF
from kopf._operating.rbac.clients.kr8s import KR8S
from kopf._operating.rbac.clients.kubernetes import KUBERNETES
from kopf._operating.rbac.clients.lightkube import LIGHTKUBE
from kopf._operating.rbac.clients.pykube import PYKUBE

LIBRARIES: tuple[Library, ...] = (KUBERNETES, KR8S, PYKUBE, LIGHTKUBE, KOPF)

__all__ = ['LIBRARIES', 'CallSite', 'Library']
