"""The core's services, for the modules that offer them to users: each is the core's own
function or type, named here once."""

from kopf._engine import (
    CoreBody,  # a daemon's body as the core keeps it fresh (``kopf._running.calls``)
    DaemonHold,  # a daemon's hold on a simulation's clock (``kopf._handling.daemons``)
    IndexView,  # one index of the core, read as it is now (``kopf._structures.indices``)
    Operator,  # the operator run on the core (``kopf._running.operator``)
    Simulation,  # a simulated API and its clock (``kopf._operating.simulation``)
    check_cron,  # timers' cron schedules, checked where they are declared (``kopf.on``)
    describe_certificate,  # a client's certificate as ``getpeercert()`` has it (``kopf._connecting.webhooks``)
    discover,  # ``kopf rbac``: the resources the server serves (``kopf._operating.rbac``)
    log_pattern_matches,  # log handlers' patterns, as the core matches them (``kopf.on.log``)
    parse_kubeconfig,  # kubeconfig files for the login handlers (``kopf._connecting.credentials``)
    read_objects,  # ``kopf olm generate``, ``kopf crd``, ``kopf deploy verify --release``: objects read
    review_access,  # ``kopf rbac verify``: access reviews (``kopf._operating.rbac``)
    start_recording,  # ``kopf rbac record``: the recording proxy (``kopf._operating.rbac.recording``)
    start_simulation,  # ``kopf.testing.Simulation``: the simulated API and clock (``kopf._operating.simulation``)
    touch_peering,  # ``kopf freeze/resume``: the peering objects written (``kopf._connecting.peering``)
    webhooks_for_manager,  # ``kopf olm generate``: the webhook definitions (``kopf._operating.olm``)
)
from kopf._engine import __version__ as version  # the core's version (``kopf --version``)

__all__ = ['CoreBody', 'DaemonHold', 'IndexView', 'Operator', 'Simulation', 'check_cron', 'describe_certificate',
           'discover', 'log_pattern_matches', 'parse_kubeconfig', 'read_objects', 'review_access', 'start_recording',
           'start_simulation', 'touch_peering', 'version', 'webhooks_for_manager']
