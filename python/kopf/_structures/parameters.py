"""What each parameter of the decorators means, written once and appended to the decorators'
docstrings as ``:param:`` fields (``help(kopf.on.create)`` and the API reference show them).

A parameter means the same in every decorator that has it unless ``_SPECIFIC`` says otherwise
for one decorator; the documentation's build fails on a parameter described nowhere.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, TypeVar

FnT = TypeVar('FnT', bound=Callable[..., Any])

_RESOURCE = (
    "The resource, named positionally as in Kopf: ``'kopfexamples'``, ``'kopf.dev', 'kopfexamples'`` or "
    "``'kopf.dev', 'v1', 'kopfexamples'``; the name may be the plural, the kind, the singular, a short name or "
    "a category, or ``'kind.group'``; ``kopf.EVERYTHING`` serves all resources, a callable serves those "
    "``kopf.Resource`` objects it returns true for."
)

_COMMON: dict[str, str] = {
    'arg1': _RESOURCE,
    'arg2': "The second part of the resource named positionally (see ``arg1``).",
    'arg3': "The third part of the resource named positionally (see ``arg1``).",
    'group': "The resource's API group, by keyword (``''`` for the core group).",
    'version': "The resource's API version, by keyword (default: the group's preferred version).",
    'kind': "The resource's kind, by keyword (``'KopfExample'``).",
    'plural': "The resource's plural name, by keyword (``'kopfexamples'``).",
    'singular': "The resource's singular name, by keyword.",
    'shortcut': "One of the resource's short names, by keyword.",
    'category': "One of the resource's categories, by keyword: every resource in it is served.",
    'id': "The handler's identifier: the key of its progress, results and retries in the object "
          "(default: the function's name; a sub-handler's is prefixed with its parent's).",
    'param': "Any value, passed to the function as its ``param`` keyword argument: one function can serve "
             "several decorators and tell them apart.",
    'errors': "What an exception other than ``kopf.TemporaryError`` or ``kopf.PermanentError`` means: "
              "``kopf.ErrorsMode.TEMPORARY`` retries after ``backoff`` (the default), ``PERMANENT`` gives up "
              "at once, ``IGNORED`` logs it and goes on as if the call succeeded.",
    'timeout': "Seconds since the first attempt after which the handler is not retried any more and fails "
               "(default: no limit).",
    'retries': "How many attempts at most before the handler fails (default: no limit).",
    'backoff': "Seconds between the attempts after an error (default: 60); a ``kopf.TemporaryError``'s own "
               "``delay`` wins.",
    'labels': "Only objects with these labels: a dict of names to a value, ``kopf.PRESENT``, "
              "``kopf.ABSENT``, or a callable that takes the label's value and says whether it matches.",
    'annotations': "Only objects with these annotations, as ``labels`` matches labels.",
    'when': "A callable that gets the handler's keyword arguments and says whether to call the handler.",
    'field': "Only objects whose field (a dotted path, or a list of its parts) matches ``value``.",
    'value': "What the ``field`` must hold: a value (equal to it), ``kopf.PRESENT``, ``kopf.ABSENT``, or a "
             "callable of the field's value (default with a field: present).",
    'old': "Only changes whose old value of the ``field`` matches this (as ``value`` matches).",
    'new': "Only changes whose new value of the ``field`` matches this (as ``value`` matches).",
    'registry': "The registry to add the handler to (default: the process's default registry, the one "
                "``kopf run`` serves).",
    'optional': "Do not put a finalizer on the objects for this handler: it runs if the operator sees the "
                "deletion, and the deletion never waits for it.",
    'deleted': "Also resume the objects that are being deleted when the operator starts (default: not).",
    'initial_delay': "Seconds to wait after the object appears (or the operator starts) before the first call, "
                     "or a callable that gets the keyword arguments and returns them.",
    'cancellation_backoff': "Seconds between setting ``stopped`` and cancelling an async daemon (with "
                            "``cancellation_timeout`` only).",
    'cancellation_timeout': "Seconds to wait for a cancelled async daemon to end before it is abandoned (a "
                            "``ResourceWarning``, the object released). Without it a daemon is never cancelled: "
                            "the operator waits for it to notice ``stopped``, however long that takes.",
    'cancellation_polling': "How often, in seconds, to look whether a sync daemon has ended while the "
                            "operator waits for it (sync threads cannot be cancelled).",
    'interval': "Seconds between the calls.",
    'sharp': "Call at the multiples of ``interval`` since the first call, however long each call takes "
             "(default: ``interval`` after the previous call ended).",
    'idle': "Call only once the object has not changed for this many seconds.",
    'cron': "A cron schedule (five fields, or ``@hourly`` and the like) instead of ``interval``: the calls "
            "happen at its instants (not in Kopf).",
    'timezone': "The IANA time zone of the ``cron`` schedule (default: UTC; not in Kopf).",
    'operation': "One admission operation to serve: ``'CREATE'``, ``'UPDATE'``, ``'DELETE'`` or "
                 "``'CONNECT'`` (Kopf's older form of ``operations``).",
    'operations': "The admission operations to serve (default: all of them).",
    'subresource': "The subresource whose requests are served: ``None`` for the object itself (the default), "
                   "``'status'`` and the like, or ``'*'`` for the object and all its subresources.",
    'persistent': "Keep the webhook in the cluster's configuration when the operator exits (default: "
                  "removed, so that nothing waits for an operator that is gone).",
    'side_effects': "The handler has side effects outside the object: dry-run requests skip it "
                    "(``sideEffects: NoneOnDryRun``).",
    'ignore_failures': "Admit the request when the webhook fails or cannot be reached "
                       "(``failurePolicy: Ignore``; default: reject).",
    'regex': "Only the log lines that this pattern finds (``re.search``): a string or a compiled pattern, "
             "its flags kept; ``match`` is then the match.",
    'container': "The containers to follow: a name or several (default: all of the pod's).",
    'source': "The version this conversion step converts from.",
    'target': "The version this conversion step converts to.",
    'fn': "The function to register as a sub-handler.",
    'owns': "The resources of the objects it owns (children): a change of one, or its deletion, calls the "
            "handler for the owner that its ``ownerReferences`` name (as ``kopf.adopt()`` sets them); each "
            "named as a handler's resource is: ``'deployments'``, ``('', 'v1', 'services')``, a model class.",
    'finalizer': "Keep a finalizer on the objects, so that their deletion waits until the handler has "
                 "been called with ``deleting=True`` and has succeeded (default: not).",
}

# Where a parameter means something else in one decorator: (decorator, parameter).
_SPECIFIC: dict[tuple[str, str], str] = {
    ('update', 'field'): "Only changes of this field (a dotted path, or a list of its parts); the handler's "
                         "``old``, ``new`` and ``diff`` are the field's.",
    ('field', 'field'): "The field (a dotted path, or a list of its parts) whose changes call the handler, "
                        "whatever the cause; its ``old``, ``new`` and ``diff`` are the field's.",
    ('subhandler', 'field'): "Only changes of this field, as in ``@kopf.on.update``.",
    ('login', 'timeout'): "Seconds since the first attempt after which the login handler is not retried.",
    ('probe', 'timeout'): "Seconds since the first attempt after which the probe is not retried.",
    ('timer', 'timeout'): "Seconds since the first attempt after which a failing call is not retried "
                          "(default: no limit); the next interval calls it again.",
    ('log', 'errors'): "What an error in the handler means for the line: logged and skipped (the default), "
                       "or with ``kopf.ErrorsMode.TEMPORARY`` retried before the pod's next lines.",
    ('reconcile', 'errors'): "What an exception other than ``kopf.TemporaryError`` or ``kopf.PermanentError`` "
                             "means: ``kopf.ErrorsMode.TEMPORARY`` retries after the object's backoff "
                             "(``settings.reconciling``; the default), ``PERMANENT`` waits for the object's next "
                             "change, ``IGNORED`` logs it and goes on as if the call succeeded.",
    ('reconcile', 'timeout'): "Seconds since the first of the failing attempts in a row after which the handler "
                              "is not retried until the object changes (default: no limit).",
    ('reconcile', 'retries'): "How many failing attempts in a row before the handler is not retried until the "
                              "object changes (default: no limit).",
    ('related', 'owners'): "The owners' resource, named as a handler's resource is (``'kopfexamples'``, "
                           "``('kopf.dev', 'v1', 'kopfexamples')``, a model class): the objects that the function "
                           "names are of it, and their ``@kopf.on.reconcile`` handlers are called.",
    ('convert', 'arg1'): "The custom resource, without a version: ``'kopfexamples.kopf.dev'``, or "
                         "``'kopf.dev', 'kopfexamples'``.",
    ('convert', 'arg2'): "The plural (or kind) when the group comes first (see ``arg1``).",
}


def described(fn: FnT) -> FnT:
    """The decorator ``fn`` with the ``:param:`` fields of its parameters added to its docstring."""
    fields = [f':param {param}: {text}' for param in inspect.signature(fn).parameters
              if (text := description(fn.__name__, param)) is not None]
    fn.__doc__ = inspect.cleandoc(fn.__doc__ or '') + '\n\n' + '\n'.join(fields) + '\n'
    return fn


def description(decorator: str, param: str) -> str | None:
    """What the parameter means for this decorator; ``None`` if that is written nowhere."""
    return _SPECIFIC.get((decorator, param), _COMMON.get(param))
