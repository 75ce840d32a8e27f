"""Handlers' arguments and results as pydantic models (not in Kopf).

A handler that annotates ``body``, ``spec`` or ``status`` with a model (``kopf.CustomResource``'s
subclass for ``body``, any ``pydantic.BaseModel`` for the others) is called with the object's
data validated into that model; an object that does not validate is a permanent failure of the
handler for that object, with the validation's errors (logged, and posted as an ``Error`` Event
on the object), and the other objects are served as usual. A handler's result that is a model
is stored as its JSON data, as a dict result is. Unannotated handlers, and every Kopf script,
are called as Kopf calls them: nothing is converted, and pydantic is never imported here.
"""

from __future__ import annotations

import functools
import sys
import types
import typing
import warnings
from collections.abc import Callable
from typing import Any

from kopf._logs import posting
from kopf._structures import dicts
from kopf._structures.errors import PermanentError

TYPED = ('body', 'spec', 'status')  # the arguments that a model may describe


def typed(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The handler itself, or a wrapper of the same kind (sync or async) that validates its typed
    arguments first; the wrapper's ``__wrapped__`` is the handler."""
    if 'pydantic' not in sys.modules:
        return fn  # no model can be declared without it
    conversions = _conversions(fn)
    if not conversions:
        return fn
    convert = functools.partial(_converted, conversions)
    if _is_coroutine_function(fn):
        @functools.wraps(fn)
        async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
            return await fn(*args, **convert(kwargs))
        return async_wrapper

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return fn(*args, **convert(kwargs))
    return wrapper


def plain(result: Any) -> Any:
    """A handler's result as data: a model's JSON data, of the top-level fields it was given
    (whole, their defaults included: a partial status, a converted object's spec), else as it is."""
    pydantic = sys.modules.get('pydantic')  # (every handler's result: no import statement per call)
    if pydantic is not None and isinstance(result, pydantic.BaseModel):
        return result.model_dump(mode='json', by_alias=True, include=set(result.model_fields_set))
    return result


def _is_coroutine_function(fn: Any) -> bool:
    import inspect
    return inspect.iscoroutinefunction(inspect.unwrap(fn))


def _conversions(fn: Callable[..., Any]) -> dict[str, tuple[type, bool]]:
    """The typed arguments: their model, and whether None is accepted (for an empty value)."""
    import pydantic
    try:
        hints = typing.get_type_hints(fn)
    except Exception:  # some name cannot be resolved here: the typed arguments' one by one
        hints = {}
        for name, hint in getattr(fn, '__annotations__', {}).items():
            if name in TYPED and isinstance(hint, str):
                try:
                    hint = eval(hint, getattr(fn, '__globals__', {}))  # noqa: S307 (the code's own text)
                except Exception:
                    warnings.warn(f"{getattr(fn, '__qualname__', fn)}: the annotation of {name} ({hint!r}) cannot "
                                  f"be resolved where the handler is defined; if it is a model, the handler gets "
                                  f"Kopf's {name}, not the model (define the model at the module's level)",
                                  stacklevel=4)
                    continue
            hints[name] = hint
    found: dict[str, tuple[type, bool]] = {}
    for name in TYPED:
        hint = hints.get(name)
        options = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,)
        models = [o for o in options if isinstance(o, type) and issubclass(o, pydantic.BaseModel)]
        if len(models) == 1:
            found[name] = (models[0], type(None) in options)
        elif len(models) > 1:
            raise TypeError(f"{fn.__qualname__}: {name} is annotated with several models ({hint}): "
                            f"one model (or None) is what it can be validated into")
    return found


def _converted(conversions: dict[str, tuple[type, bool]], kwargs: dict[str, Any]) -> dict[str, Any]:
    import pydantic
    converted = dict(kwargs)
    for name, (model, optional) in conversions.items():
        if name not in kwargs:
            continue
        value = dicts.plain(kwargs[name])  # (Kopf's views are read-only mappings)
        if optional and not value:
            converted[name] = None
            continue
        try:
            converted[name] = model.model_validate(value)  # type: ignore[attr-defined]
        except pydantic.ValidationError as e:
            errors = '; '.join(f"{'.'.join(str(p) for p in (name, *error['loc']))}: {error['msg']}"
                               for error in e.errors(include_url=False))
            failure = PermanentError(f"The object's {name} is not a valid {model.__name__}: {errors}")
            _said(kwargs.get('body'), failure)
            raise failure from None
    return converted


def _said(body: Any, failure: PermanentError) -> None:
    """The failure as an Event on the object: its users see why it is not handled (Kopf's log
    lines become Events only with ``settings.posting.loggers``)."""
    if body is None:
        return
    try:
        posting.event(body, type='Error', reason='InvalidObject', message=str(failure))
    except LookupError:
        pass  # called outside of an operator (a test of the handler): nowhere to post

