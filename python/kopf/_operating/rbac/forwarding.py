"""Functions that call a function handed to them, later or elsewhere, with the arguments handed
with it: ``asyncio.to_thread(api.read_namespaced_pod, name, namespace)``, an executor's
``submit``, ``loop.run_in_executor``, ``functools.partial``, a ``threading.Thread``'s target, a
scheduler's job. `introspecting` follows the function given as if it were called there, with
those arguments, so that its requests are found with their resources and namespaces.

Known by identity where the forwarder is a function of the standard library (or of a library
the operator has imported: anyio, starlette), and by a method's name where it is a method of an
object whose class is not known statically (a loop, an executor, a scheduler): those names are
the libraries' conventions, and a method of that name that does not call what it is given only
makes the analysis find what the code could do, as it does everywhere.
"""

from __future__ import annotations

import ast
import asyncio
import dataclasses
import functools
import sys
import threading
from typing import Any


@dataclasses.dataclass(frozen=True)
class Forwarding:
    """Where a forwarder takes the function, and its arguments: `function` by position or by
    keyword; `args` from a position on (int), or a keyword holding a sequence of them (str);
    `kwargs` "**" for the call's other keywords, or a keyword holding a mapping of them;
    `more`: the function gets more arguments when it is called later (``partial``)."""
    function: tuple[int | None, str | None]
    args: int | str | None
    kwargs: str | None
    more: bool = False


TO_THREAD = Forwarding(function=(0, None), args=1, kwargs='**')  # fn(*args, **kwargs) given as is
PARTIAL = Forwarding(function=(0, None), args=1, kwargs='**', more=True)
THREAD = Forwarding(function=(None, 'target'), args='args', kwargs='kwargs')
TIMER = Forwarding(function=(1, 'function'), args='args', kwargs='kwargs')
JOB = Forwarding(function=(0, 'func'), args='args', kwargs='kwargs')  # APScheduler's add_job(func, trigger, ...)
POSITIONAL_AFTER_FIRST = Forwarding(function=(0, None), args=1, kwargs=None)
POSITIONAL_AFTER_SECOND = Forwarding(function=(1, None), args=2, kwargs=None)

# Methods of objects whose class is not known (a loop from get_running_loop(), an executor, a
# scheduler), by name: loop.run_in_executor(executor, fn, *args), executor.submit(fn, ...),
# loop.call_soon(fn, *args), loop.call_later(delay, fn, *args), scheduler.add_job(fn, ...),
# schedule's every(10).seconds.do(fn, *args, **kwargs).
METHODS: dict[str, Forwarding] = {
    'run_in_executor': POSITIONAL_AFTER_SECOND,
    'submit': TO_THREAD,
    'call_soon': POSITIONAL_AFTER_FIRST,
    'call_soon_threadsafe': POSITIONAL_AFTER_FIRST,
    'call_later': POSITIONAL_AFTER_SECOND,
    'call_at': POSITIONAL_AFTER_SECOND,
    'add_job': JOB,
    'do': TO_THREAD,
}


def _by_identity() -> tuple[tuple[Any, Forwarding], ...]:
    known: list[tuple[Any, Forwarding]] = [
        (asyncio.to_thread, TO_THREAD),
        (functools.partial, PARTIAL),
        (threading.Thread, THREAD),
        (threading.Timer, TIMER),
    ]
    # Libraries' own, if the operator has imported them (never imported here).
    for module, name, forwarding in [('anyio.to_thread', 'run_sync', POSITIONAL_AFTER_FIRST),
                                     ('starlette.concurrency', 'run_in_threadpool', TO_THREAD)]:
        found = getattr(sys.modules.get(module), name, None)
        if found is not None:
            known.append((found, forwarding))
    return tuple(known)


def forwarding(node: ast.Call, callees: list[Any], own: bool) -> Forwarding | None:
    """How a call forwards a function, if it does: by its callee (the live objects it may be),
    or by its method's name when it is not the operator's own (nor a known object)."""
    known = _by_identity()
    for callee in callees:
        for forwarder, found in known:
            if callee is forwarder:
                return found
    if isinstance(node.func, ast.Attribute) and not own and not callees:
        return METHODS.get(node.func.attr)
    return None


def function_node(node: ast.Call, found: Forwarding) -> ast.expr | None:
    """The expression of the function handed over, in the call."""
    index, keyword = found.function
    for given in node.keywords:
        if keyword is not None and given.arg == keyword:
            return given.value
    if index is not None and index < len(node.args) and \
            not any(isinstance(arg, ast.Starred) for arg in node.args[:index + 1]):
        return node.args[index]
    return None
