"""Which API requests the operator's own code makes, read from its source without running it.

Each handler's function is parsed from its file; names resolve through the live modules (the
operator is imported, as `kopf run` imports it), so a client's class, a constant, or a function
of the operator's own package is known for what it is. Calls into the operator's own code are
followed with their arguments bound and their results returned, transitively; so are its own
functions named without a call (callbacks). Calls into the client libraries are recognized by
`clients`: each one becomes a `Use` (verbs on a target, a namespace), or, where the resource
cannot be known statically, an `Unresolved` with its place.

The reasoning is flow-insensitive and approximate by design (a name may be any value it is
ever given in its function): it finds what the code can do, not what one run does.
"""

from __future__ import annotations

import ast
import builtins
import dataclasses
import inspect
import itertools
import sys
import types
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from kopf._operating.rbac import forwarding
from kopf._operating.rbac.clients import LIBRARIES, CallSite, Library
from kopf._operating.rbac.sources import Code, FunctionNode, Parsed, Sources
from kopf._operating.rbac.uses import Site, Unresolved, Use
from kopf._operating.rbac.values import (
    MOST,
    NOTHING,
    OBJECT_NAMESPACE,
    Body,
    Bound,
    Instance,
    Live,
    Mapping,
    Method,
    Seq,
    Value,
    Values,
    literals,
    live,
    plain,
    strings,
    union,
)

DEPTH = 40  # nested calls followed; deeper ones are not (a bound against runaway recursion)
VARIANTS = 8  # analyses of one function with different arguments; past them, with none known
ITERATING = (len, list, tuple, sorted, set, frozenset, any, all, sum, max, min, enumerate)  # builtins that iterate
# Methods of strings that are computed on literals as Python computes them (pure, cheap).
STRING_METHODS = frozenset({'lower', 'upper', 'strip', 'lstrip', 'rstrip', 'removeprefix', 'removesuffix',
                            'replace', 'startswith', 'endswith', 'format', 'join', 'split', 'rsplit',
                            'partition', 'rpartition', 'title', 'capitalize'})
CLASS_NAMES = frozenset({'__name__', '__qualname__', '__module__'})
CONTAINER_METHODS = frozenset({'get', 'items', 'keys', 'values', 'setdefault', 'pop', 'copy'})

# The keyword arguments of Kopf's handlers that name the handled object or a part of it.
HANDLER_KWARGS: dict[str, Value] = {
    'body': Body(()), 'meta': Body(('metadata',)), 'spec': Body(('spec',)), 'status': Body(('status',)),
    'namespace': OBJECT_NAMESPACE, 'name': Body(('metadata', 'name')), 'uid': Body(('metadata', 'uid')),
    'labels': Body(('metadata', 'labels')), 'annotations': Body(('metadata', 'annotations')),
}


@dataclasses.dataclass
class Findings:
    """What each root (a handler) makes, by its label; and the functions it reaches."""
    uses: dict[str, set[Use]] = dataclasses.field(default_factory=dict)
    unresolved: dict[str, set[Unresolved]] = dataclasses.field(default_factory=dict)
    reached: dict[str, set[Any]] = dataclasses.field(default_factory=dict)
    unreached: set[Unresolved] = dataclasses.field(default_factory=set)  # request methods no root reaches, by name


def analyze(roots: Iterable[tuple[str, Callable[..., Any]]],
            libraries: Sequence[Library] = LIBRARIES) -> Findings:
    """The requests that each root function makes, and those it makes that cannot be resolved."""
    roots = [(label, unwrapped(fn)) for label, fn in roots]
    code = Code([fn for _, fn in roots])
    interpreter = Interpreter(code, libraries)
    findings = Findings()
    results: list[tuple[str, Result]] = []
    for label, fn in roots:
        if not code.owns_function(fn):
            continue  # Kopf's own (e.g. the login fallbacks): the engine's requests, planned apart
        result = interpreter.root(fn)
        findings.uses.setdefault(label, set()).update(result.uses)
        findings.unresolved.setdefault(label, set()).update(result.unresolved)
        findings.reached.setdefault(label, set()).update(result.reached)
        results.append((label, result))
    # A client's method named without a call and never called through anywhere (kept in a table,
    # handed to a callable not known here): its requests are not known; said, never dropped.
    for label, result in results:
        for site, owner, fn in result.kept:
            if fn not in interpreter.called:
                findings.unresolved[label].add(Unresolved(site, (
                    f"{owner.__name__}.{fn.__name__} is named without a call (kept, or handed to something "
                    f"that calls it later): its requests depend on the arguments it is given there, not known here")))
    # Nothing dropped silently: a request method that the operator's own modules call (or name)
    # where the analysis never was, e.g. behind dispatch it does not follow, is said with its place.
    sites = [use.site for uses in findings.uses.values() for use in uses if use.site is not None]
    sites += [item.site for items in findings.unresolved.values() for item in items]
    covered = {(site.file, line) for site in sites for line in site.lines()}
    findings.unreached = unreached(interpreter, covered | interpreter.followed)
    return findings


def unreached(interpreter: Interpreter, covered: set[tuple[str, int]]) -> set[Unresolved]:
    """The client libraries' request methods, known by name, in the modules of the operator's own
    code (as imported), at places that no root's analysis reached."""
    code = interpreter.code
    found: set[Unresolved] = set()
    modules: dict[str, dict[str, Any]] = {}
    for module in list(sys.modules.values()):
        filename = getattr(module, '__file__', None)
        if isinstance(filename, str) and code.owns(filename):
            modules.setdefault(filename, vars(module))
    requests: dict[str, bool] = {}
    for filename, module_globals in sorted(modules.items()):
        parsed = interpreter.sources.of(filename, module_globals)
        if parsed is None:
            continue
        display = code.display(filename)
        for node, qualname in _attributes(parsed.tree, ''):
            if (display, node.lineno) in covered:
                continue
            if node.attr not in requests:
                requests[node.attr] = any(library.named(node.attr) is not None for library in interpreter.libraries)
            if requests[node.attr]:
                found.add(Unresolved(Site(display, node.lineno, qualname or '<module>'), node.attr))
    return found


def _attributes(node: ast.AST, qualname: str, in_function: bool = False) -> Iterable[tuple[ast.Attribute, str]]:
    """Every attribute read in the tree, with the qualified name (as Python gives it) of the
    function or class it is in."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            prefix = f"{qualname}.<locals>." if in_function else f"{qualname}." if qualname else ''
            yield from _attributes(child, f"{prefix}{child.name}", not isinstance(child, ast.ClassDef))
            continue
        if isinstance(child, ast.Attribute) and isinstance(child.ctx, ast.Load):
            yield child, qualname
        yield from _attributes(child, qualname, in_function)


def unwrapped(fn: Callable[..., Any]) -> Callable[..., Any]:
    try:
        found: Callable[..., Any] = inspect.unwrap(fn)
        return found
    except ValueError:
        return fn


@dataclasses.dataclass
class Result:
    """What a function (with some arguments) returns, and what it makes, callees included."""
    returns: Values = NOTHING
    uses: set[Use] = dataclasses.field(default_factory=set)
    unresolved: set[Unresolved] = dataclasses.field(default_factory=set)
    reached: set[Any] = dataclasses.field(default_factory=set)  # the operator's own functions followed
    kept: set[tuple[Site, type, Any]] = dataclasses.field(default_factory=set)  # clients' methods named, not called

    def add(self, item: Use | Unresolved) -> None:
        (self.uses if isinstance(item, Use) else self.unresolved).add(item)  # type: ignore[arg-type]

    def merge(self, other: Result) -> None:
        self.uses |= other.uses
        self.unresolved |= other.unresolved
        self.reached |= other.reached
        self.kept |= other.kept


class Interpreter:
    """What values mean (their attributes, calls, items, iterations: the libraries' first, then
    Python's), and the operator's own functions followed, each with its arguments, once."""

    def __init__(self, code: Code, libraries: Sequence[Library]) -> None:
        self.code = code
        self.libraries = libraries
        self.sources = Sources()
        self.results: dict[tuple[Any, ...], Result] = {}
        self.variants: dict[Any, int] = {}
        self.stack: list[tuple[Any, ...]] = []
        self.attributes: dict[tuple[type, str, tuple[tuple[str, Values], ...]], Values] = {}
        self.globals: dict[tuple[str, str], Values] = {}
        self.called: set[Any] = set()  # the methods called through, anywhere (of clients too)
        self.followed: set[tuple[str, int]] = set()  # the places that call the operator's own functions

    # -- functions ----------------------------------------------------------------------

    def root(self, fn: Callable[..., Any]) -> Result:
        receiver: Value | None = None
        if inspect.ismethod(fn):
            receiver, fn = Live(fn.__self__), fn.__func__
        found = self.sources.function(fn)
        if found is None:
            return Result()
        node, _ = found
        bindings: dict[str, Values] = {}
        params = _parameters(node)
        if receiver is not None and params.positional:
            bindings[params.positional[0]] = frozenset({receiver})
        for name in [*params.positional, *params.keyword_only]:
            if name in HANDLER_KWARGS and name not in bindings:
                bindings[name] = frozenset({HANDLER_KWARGS[name]})
        if params.kwargs:
            keys = tuple(live(name) for name in HANDLER_KWARGS)
            bindings[params.kwargs] = frozenset({Mapping(keys, tuple(frozenset({v}) for v in HANDLER_KWARGS.values()))})
        return self.function(fn, bindings)

    def function(self, fn: Any, bindings: dict[str, Values], cls: type | None = None) -> Result:
        """A function of the operator's own, analysed with these arguments (memoized)."""
        known = tuple(sorted((name, values) for name, values in bindings.items() if values != NOTHING))
        if self.variants.get(fn, 0) >= VARIANTS and (fn, known) not in self.results:
            known = ()
            bindings = {}
        key = (fn, known)
        if key in self.results:
            return self.results[key]
        if key in self.stack or len(self.stack) >= DEPTH:
            return Result()
        found = self.sources.function(fn)
        if found is None:
            return Result()
        self.variants[fn] = self.variants.get(fn, 0) + 1
        node, parsed = found
        self.stack.append(key)
        try:
            frame = Frame(self, fn, node, parsed, bindings, cls)
            result = frame.run()
        finally:
            self.stack.pop()
        self.results[key] = result
        return result

    def bind(self, fn: Any, call: CallSite, receiver: Value | None) -> dict[str, Values]:
        found = self.sources.function(fn)
        if found is None:
            return {}
        params = _parameters(found[0])
        args = ([frozenset({receiver})] if receiver is not None else []) + call.args
        bindings: dict[str, Values] = dict(zip(params.positional, args, strict=False))
        named = [*params.positional, *params.keyword_only]
        for name, values in call.keywords.items():
            if name in named:
                bindings[name] = values
        if call.starred:
            for name in named:
                bindings.setdefault(name, NOTHING)  # passed by *args/**kwargs: not known
            return bindings
        # What is left goes to *args and **kwargs, as they are: a wrapper that passes them on
        # (`func(*args, **kwargs)`: a retry, a decorator) passes them whole.
        if params.varargs:
            bindings[params.varargs] = frozenset({Seq(tuple(args[len(params.positional):]))})
        if params.kwargs:
            extra = [(name, values) for name, values in call.keywords.items() if name not in named]
            bindings[params.kwargs] = frozenset({Mapping(tuple(live(name) for name, _ in extra),
                                                         tuple(values for _, values in extra))})
        return bindings

    # -- values -------------------------------------------------------------------------

    def attribute(self, value: Value, attr: str) -> Values:
        for library in self.libraries:
            found = library.attribute(value, attr)
            if found is not None:
                return found
        if isinstance(value, Live):
            obj = value.obj
            if isinstance(obj, types.ModuleType):
                if attr in vars(obj):
                    return live(vars(obj)[attr])
                if self.code.owns(getattr(obj, '__file__', None)):
                    return NOTHING
                try:  # a library's lazily loaded name (e.g. kubernetes.client's classes)
                    return live(getattr(obj, attr))
                except Exception:
                    return NOTHING
            if isinstance(obj, type) and attr in CLASS_NAMES:
                return live(getattr(obj, attr))
            if isinstance(obj, type):
                found = self._class_attribute(obj, attr, receiver=None)
                if self.code.owns_class(obj) and \
                        (found == NOTHING or all(isinstance(v, Live) and v.obj is None for v in found)):
                    # Not set yet (absent, or None): given by its classmethods at startup
                    # (``cls.api = CoreV1Api()``); any value it is ever given, as for globals.
                    given = self.instance_attribute(obj, attr)
                    return given if found == NOTHING else union(found, given)
                return found
            if isinstance(obj, str) and attr in STRING_METHODS:
                return frozenset({Bound(value, attr)})
            if isinstance(obj, (dict, list, tuple)) and attr in CONTAINER_METHODS:
                return frozenset({Bound(value, attr)})
            own = getattr(obj, '__dict__', None)
            if isinstance(own, dict) and attr in own:
                # An object's state as imported may change when it runs (settings made by its CLI):
                # its plain values are not taken for known; its objects (clients) are.
                return NOTHING if plain(own[attr]) else live(own[attr])
            return self._class_attribute(type(obj), attr, receiver=value)
        if isinstance(value, Instance):
            found = self._class_attribute(value.cls, attr, receiver=value)
            return found if found != NOTHING else self.instance_attribute(value.cls, attr, value.init)
        if isinstance(value, (Body, Seq, Mapping)) and attr in CONTAINER_METHODS:
            return frozenset({Bound(value, attr)})
        if isinstance(value, Body):
            return frozenset({Body((*value.path, attr))})
        return NOTHING

    def _class_attribute(self, cls: type, attr: str, receiver: Value | None) -> Values:
        try:
            raw = inspect.getattr_static(cls, attr)
        except AttributeError:
            return NOTHING
        if isinstance(raw, staticmethod):
            return live(raw.__func__)
        if isinstance(raw, classmethod):
            return frozenset({Method(Live(cls), raw.__func__, cls)})
        if isinstance(raw, types.FunctionType):
            return frozenset({Method(receiver, raw, cls)}) if receiver is not None else live(raw)
        if isinstance(raw, property):
            if receiver is not None and raw.fget is not None and self.code.owns_function(raw.fget):
                return self.function(raw.fget, self.bind(raw.fget, _no_call(), receiver), cls).returns
            return NOTHING
        if inspect.ismethoddescriptor(raw) or inspect.isdatadescriptor(raw):
            return NOTHING
        return live(raw)

    def reassigned(self, module_globals: dict[str, Any], filename: str, name: str) -> Values:
        """What the module's own functions give a global name (``global x; x = ...``), beside
        its value now (e.g. a client made by a startup handler, None until then); empty if none."""
        key = (filename, name)
        if key in self.globals:
            return self.globals[key]
        self.globals[key] = frozenset()  # (while it is found: a self-reference adds nothing)
        parsed = self.sources.of(filename, module_globals) if self.code.owns(filename) else None
        found: list[Values] = []
        for node in parsed.tree.body if parsed is not None else []:
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            declared = any(isinstance(n, ast.Global) and name in n.names for n in ast.walk(node))
            fn = module_globals.get(node.name)
            if not declared or not isinstance(fn, types.FunctionType):
                continue
            frame: Frame | None = None
            for assigned in ast.walk(node):
                if isinstance(assigned, (ast.Assign, ast.AnnAssign)) and assigned.value is not None:
                    targets = assigned.targets if isinstance(assigned, ast.Assign) else [assigned.target]
                    if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                        frame = frame or Frame(self, fn, node, parsed, {}, None)  # type: ignore[arg-type]
                        found.append(frame.eval(assigned.value))
        self.globals[key] = union(*found) if found else frozenset()
        return self.globals[key]

    def instance_attribute(self, cls: type, attr: str, init: tuple[tuple[str, Values], ...] = ()) -> Values:
        """What ``self.<attr>`` (or ``cls.<attr>`` in a classmethod) is given in the methods of
        the operator's own classes; in ``__init__``, from the arguments it was called with."""
        key = (cls, attr, init)
        if key in self.attributes:
            return self.attributes[key]
        self.attributes[key] = NOTHING  # (while it is found: a self-reference knows nothing)
        found: list[Values] = []
        init_fn = self.own_init(cls)
        for base in cls.__mro__:
            if not self.code.owns_class(base):
                continue
            located = self.sources.cls(base)
            if located is None:
                continue
            node, parsed = located
            for item in node.body:
                if not isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) or not item.args.args:
                    continue
                fn = vars(base).get(item.name)
                fn = fn.__func__ if isinstance(fn, (classmethod, staticmethod)) else fn
                if not isinstance(fn, types.FunctionType):
                    continue
                self_name = item.args.args[0].arg
                bindings: dict[str, Values] = {self_name: frozenset({Instance(cls, init)})}
                if fn is init_fn:
                    bindings.update(init)
                for assigned in ast.walk(item):
                    if isinstance(assigned, ast.Assign):
                        targets, value = assigned.targets, assigned.value
                    elif isinstance(assigned, ast.AnnAssign) and assigned.value is not None:
                        targets, value = [assigned.target], assigned.value
                    else:
                        continue
                    for target in targets:
                        if isinstance(target, ast.Attribute) and mangled(target.attr, fn.__qualname__) == attr and \
                                isinstance(target.value, ast.Name) and target.value.id == self_name:
                            frame = Frame(self, fn, item, parsed, dict(bindings), base)
                            found.append(frame.eval(value))
        self.attributes[key] = union(*found) if found else NOTHING
        return self.attributes[key]

    def call(self, callee: Value, call: CallSite, into: Result) -> Values:
        if isinstance(callee, Method):
            self.called.add(callee.fn)
        if isinstance(callee, Live) and not isinstance(callee.obj, (type, types.FunctionType)) and \
                self.code.owns_function(unwrapped(callee.obj)):
            callee = Live(unwrapped(callee.obj))  # the operator's function under a wrapper (lru_cache, ...)
        own = (isinstance(callee, Method) and self.code.owns_function(callee.fn)) or \
            (isinstance(callee, Live) and self.code.owns_function(callee.obj))
        for library in () if own else self.libraries:
            found = library.call(call, callee)
            if found is not None:
                return found
        if isinstance(callee, Live):
            obj = callee.obj
            if obj is getattr:
                return self._getattr(call, into)
            if any(obj is iterating for iterating in ITERATING) and call.args:
                items = self.iterate(call.args[0], call.site, into)
                if obj is enumerate:
                    return frozenset({Seq((frozenset({Seq((NOTHING, items))}),))})
                return frozenset({Seq((items,))}) if obj is not len else NOTHING
            if isinstance(obj, type):
                return self._construct(obj, call, into)
            if isinstance(obj, types.FunctionType) and self.code.owns_function(obj):
                result = self.function(obj, self.bind(obj, call, None))
                into.merge(result)
                return result.returns
            return NOTHING
        if isinstance(callee, Method) and self.code.owns_function(callee.fn):
            result = self.function(callee.fn, self.bind(callee.fn, call, callee.receiver), callee.owner)
            into.merge(result)
            return result.returns
        if isinstance(callee, Bound):
            return self._container_call(callee, call)
        return NOTHING

    def _construct(self, cls: type, call: CallSite, into: Result) -> Values:
        if cls.__module__ == 'builtins':
            return NOTHING
        init = self.own_init(cls)
        found = self.sources.function(init) if init is not None else None
        if found is None:  # none, or made by a library (a dataclass's): not read
            return frozenset({Instance(cls)})
        # The instance remembers its arguments: ``self.namespace = namespace`` is then known.
        bindings = self.bind(init, call, Instance(cls))
        self_name = _parameters(found[0]).positional[:1]
        given = tuple(sorted((name, values) for name, values in bindings.items()
                             if name not in self_name and values != NOTHING))
        instance = Instance(cls, given)
        bindings.update({name: frozenset({instance}) for name in self_name})
        into.merge(self.function(init, bindings, cls))
        return frozenset({instance})

    def own_init(self, cls: type) -> Any:
        """The ``__init__`` of the operator's own classes that makes an instance of this one
        (the nearest in its MRO), if any."""
        for base in cls.__mro__:
            if self.code.owns_class(base) and isinstance(vars(base).get('__init__'), types.FunctionType):
                return vars(base)['__init__']
        return None

    def _getattr(self, call: CallSite, into: Result) -> Values:
        names = call.string(1)
        objects = call.arg(0) or NOTHING
        if names is not None:
            return union(*(self.attribute(value, name) for value in objects for name in names))
        if any(library.owns(value) for value in objects for library in self.libraries):
            into.add(Unresolved(call.site, f"a method of a client chosen at run time "
                                           f"(getattr({call.text(0)}, {call.text(1)})): its requests are not known"))
        return NOTHING

    def _container_call(self, bound: Bound, call: CallSite) -> Values:
        of, name = bound.of, bound.name
        if isinstance(of, Live) and isinstance(of.obj, str):
            return _computed(of.obj, name, call)
        keys = literals(call.arg(0) or NOTHING) if call.args else None
        if isinstance(of, Body):
            if name == 'get' and keys is not None and all(isinstance(k, str) for k in keys):
                return union(*(frozenset({Body((*of.path, key))}) for key in keys))
            return NOTHING
        pairs = _pairs(of)
        if pairs is None:
            return NOTHING
        if name in ('get', 'pop', 'setdefault'):
            found = [v for k, v in pairs if keys is None or _matches(k, keys)]
            default = call.arg(1)
            return union(*found, *([default] if default is not None else []))
        if name == 'items':
            return frozenset({Seq((frozenset({Seq((union(*(k for k, _ in pairs)), union(*(v for _, v in pairs))))}),))})
        if name == 'values':
            return frozenset({Seq((union(*(v for _, v in pairs)),))})
        if name == 'keys':
            return frozenset({Seq((union(*(k for k, _ in pairs)),))})
        return NOTHING

    def iterate(self, values: Values, site: Site, into: Result) -> Values:
        found: list[Values] = []
        for value in values:
            for library in self.libraries:
                iterated = library.iterate(value, site)
                if iterated is not None:
                    items, uses = iterated
                    found.append(items)
                    for use in uses:
                        into.add(use)
                    break
            else:
                if isinstance(value, Seq):
                    found.extend(value.items)
                elif isinstance(value, Mapping):
                    found.extend(value.keys)
                elif isinstance(value, Live) and isinstance(value.obj, (list, tuple, set, frozenset, dict)):
                    found.extend(live(item) for item in list(value.obj)[:MOST])
        return union(*found) if found else NOTHING

    def reference(self, site: Site, values: Values, into: Result) -> None:
        """Values named without a call: a client's request method is a request; the operator's
        own function is followed (a callback), its arguments not known."""
        for value in values:
            found = [use for library in self.libraries for use in library.reference(site, value)]
            for use in found:
                into.add(dataclasses.replace(use, via=f"{use.via} named without a call"))
            if not found and isinstance(value, Method) and value.receiver is not None and \
                    not value.fn.__name__.startswith('_') and \
                    any(library.owns(value.receiver) for library in self.libraries):
                into.kept.add((site, value.owner, value.fn))  # warned about unless called through (analyze)
            if isinstance(value, Live) and isinstance(value.obj, types.FunctionType) and \
                    self.code.owns_function(value.obj):
                into.merge(self.function(value.obj, {}))
            elif isinstance(value, Method) and self.code.owns_function(value.fn):
                into.merge(self.function(value.fn, self.bind(value.fn, _no_call(), value.receiver), value.owner))


def mangled(attr: str, qualname: str) -> str:
    """An attribute's name as Python compiles it in a class's code: ``self.__manage`` in class
    ``Config``'s methods is ``self._Config__manage``."""
    if not attr.startswith('__') or attr.endswith('__'):
        return attr
    # The nearest class around it: a function's scope is followed by '<locals>', a class's is not.
    parts = qualname.split('.')
    classes = [part for part, after in zip(parts, parts[1:], strict=False) if '<locals>' not in (part, after)]
    owner = classes[-1].lstrip('_') if classes else ''
    return f"_{owner}{attr}" if owner else attr


def _no_call() -> CallSite:
    return CallSite(site=Site('', 0, ''), args=[], keywords={}, arg_nodes=[], keyword_nodes={}, starred=False,
                    found=lambda item: None)


def _computed(text: str, method: str, call: CallSite) -> Values:
    """A string method's result on literal arguments, as Python gives it (each combination of
    the arguments' possible values, if few)."""
    options: list[list[Any]] = []
    for values in call.args:
        found = literals(values)
        if found is None:
            return NOTHING
        options.append(found)
    if call.keywords or call.starred:
        return NOTHING
    results: list[Values] = []
    for args in itertools.islice(itertools.product(*options), MOST + 1):
        try:
            results.append(live(getattr(text, method)(*args)))
        except (TypeError, ValueError):
            return NOTHING
    return union(*results) if len(results) <= MOST else NOTHING


def _pairs(value: Value) -> list[tuple[Values, Values]] | None:
    if isinstance(value, Mapping):
        return list(zip(value.keys, value.values, strict=False))
    if isinstance(value, Live) and isinstance(value.obj, dict):
        return [(live(k), live(v)) for k, v in list(value.obj.items())[:MOST]]
    return None


def _matches(keys: Values, wanted: list[Any]) -> bool:
    found = literals(keys)
    return found is None or any(key in wanted for key in found)


@dataclasses.dataclass
class Parameters:
    positional: list[str]
    keyword_only: list[str]
    varargs: str | None
    kwargs: str | None
    defaults: dict[str, ast.expr]
    annotations: dict[str, ast.expr]


def _parameters(node: FunctionNode) -> Parameters:
    args = node.args
    positional = [a.arg for a in [*args.posonlyargs, *args.args]]
    defaults = dict(zip(positional[len(positional) - len(args.defaults):], args.defaults, strict=False))
    defaults.update({a.arg: d for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=False) if d is not None})
    annotations = {a.arg: a.annotation for a in [*args.posonlyargs, *args.args, *args.kwonlyargs] if a.annotation}
    return Parameters(positional, [a.arg for a in args.kwonlyargs], args.vararg.arg if args.vararg else None,
                      args.kwarg.arg if args.kwarg else None, defaults, annotations)


class Frame:
    """One function's analysis: its names' values (flow-insensitive: any value a name is ever
    given), each expression evaluated once, and the requests it makes."""

    def __init__(self, interpreter: Interpreter, fn: Any, node: FunctionNode, parsed: Parsed,
                 bindings: dict[str, Values], cls: type | None) -> None:
        self.interpreter = interpreter
        self.fn = fn
        self.node = node
        self.parsed = parsed
        self.bindings = bindings
        self.cls = cls
        self.globals: dict[str, Any] = getattr(fn, '__globals__', {})
        self.closure: dict[str, Any] = {}
        code = fn.__code__
        for name, cell in zip(code.co_freevars, fn.__closure__ or (), strict=False):
            try:
                self.closure[name] = cell.cell_contents
            except ValueError:
                pass  # an empty cell: not known
        self.params = _parameters(node)
        self.assigns: dict[str, list[tuple[ast.expr | None, tuple[Any, ...], Values | None]]] = {}
        self.declared_global: set[str] = set()
        self.returns: list[ast.expr] = []
        self.cache: dict[int, Values] = {}
        self.busy: set[int] = set()
        self.forwarded: set[int] = set()  # functions handed to a forwarder: called there, not referenced
        self.result = Result(reached={fn})
        self.filename = code.co_filename
        self.qualname = getattr(fn, '__qualname__', code.co_name)
        self._prepare()

    def site(self, node: ast.AST) -> Site:
        line = getattr(node, 'lineno', self.node.lineno)
        return Site(self.interpreter.code.display(self.filename), line, self.qualname,
                    last=getattr(node, 'end_lineno', None) or line)

    # -- the walk -------------------------------------------------------------------------

    def _body(self) -> list[ast.AST]:
        node = self.node
        return [node.body] if isinstance(node, ast.Lambda) else list(node.body)

    def _prepare(self) -> None:
        def bind(target: ast.expr, source: ast.expr | None, path: tuple[Any, ...],
                 values: Values | None = None) -> None:
            if isinstance(target, ast.Name):
                self.assigns.setdefault(target.id, []).append((source, path, values))
            elif isinstance(target, (ast.Tuple, ast.List)):
                for index, element in enumerate(target.elts):
                    if isinstance(element, ast.Starred):
                        bind(element.value, None, (), NOTHING)
                    else:
                        bind(element, source, (*path, index), values)
            elif isinstance(target, ast.Starred):
                bind(target.value, None, (), NOTHING)

        def visit(node: ast.AST, top: bool) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.Assign):
                    for target in child.targets:
                        bind(target, child.value, ())
                elif isinstance(child, ast.AnnAssign) and child.value is not None:
                    bind(child.target, child.value, ())
                elif isinstance(child, (ast.For, ast.AsyncFor, ast.comprehension)):
                    bind(child.target, child.iter, ('iter',))
                elif isinstance(child, ast.withitem) and child.optional_vars is not None:
                    bind(child.optional_vars, child.context_expr, ())
                elif isinstance(child, ast.NamedExpr):
                    bind(child.target, child.value, ())
                elif isinstance(child, ast.Global):
                    self.declared_global.update(child.names)
                elif isinstance(child, (ast.Import, ast.ImportFrom)):
                    for alias in child.names:
                        name = alias.asname or alias.name.partition('.')[0]
                        self.assigns.setdefault(name, []).append((None, (), self._imported(child, alias)))
                elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    self.assigns.setdefault(child.name, []).append((None, (), NOTHING))
                elif isinstance(child, ast.ExceptHandler) and child.name:
                    self.assigns.setdefault(child.name, []).append((None, (), NOTHING))
                elif isinstance(child, ast.Return) and top and child.value is not None:
                    self.returns.append(child.value)
                inner = top and not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef))
                visit(child, inner)

        if isinstance(self.node, ast.Lambda):
            self.returns.append(self.node.body)
        for statement in self._body():
            wrapper = ast.Module(body=[statement], type_ignores=[]) if isinstance(statement, ast.stmt) else \
                ast.Expression(body=statement)  # type: ignore[arg-type]
            visit(wrapper, True)

    def _imported(self, node: ast.Import | ast.ImportFrom, alias: ast.alias) -> Values:
        if isinstance(node, ast.Import):
            module = sys.modules.get(alias.name if alias.asname else alias.name.partition('.')[0])
            return live(module) if module is not None else NOTHING
        base = node.module or ''
        if node.level:
            package = (self.globals.get('__package__') or '').split('.')
            package = package[:len(package) - node.level + 1] if node.level > 1 else package
            base = '.'.join([*package, *([base] if base else [])])
        module = sys.modules.get(base)
        if module is not None and alias.name in vars(module):
            return live(vars(module)[alias.name])
        submodule = sys.modules.get(f"{base}.{alias.name}")
        return live(submodule) if submodule is not None else NOTHING

    def run(self) -> Result:
        for statement in self._body():
            for node in ast.walk(statement):
                if isinstance(node, (ast.Call, ast.Attribute, ast.Name)) and \
                        isinstance(getattr(node, 'ctx', ast.Load()), ast.Load):
                    self.eval(node)
                elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
                    self.iterated(node.iter)
        returns = union(*(self.eval(node) for node in self.returns)) if self.returns else NOTHING
        if returns == NOTHING and not isinstance(self.node, ast.Lambda) and self.node.returns is not None:
            returns = self.annotated(self.node.returns)
        self.result.returns = returns
        return self.result

    # -- expressions ----------------------------------------------------------------------

    def eval(self, node: ast.expr) -> Values:
        key = id(node)
        if key in self.cache:
            return self.cache[key]
        if key in self.busy:
            return NOTHING
        self.busy.add(key)
        try:
            values = self._eval(node)
        finally:
            self.busy.discard(key)
        self.cache[key] = values
        return values

    def _in_call(self, node: ast.expr) -> bool:
        parent = self.parsed.parents.get(id(node))
        return isinstance(parent, ast.Call) and parent.func is node

    def _eval(self, node: ast.expr) -> Values:
        if isinstance(node, ast.Constant):
            return live(node.value)
        if isinstance(node, ast.Name):
            values = self.name(node.id)
            if not self._in_call(node) and id(node) not in self.forwarded:
                self.interpreter.reference(self.site(node), values, self.result)
            return values
        if isinstance(node, ast.Attribute):
            base = self.eval(node.value)
            attr = mangled(node.attr, getattr(self.fn, '__qualname__', ''))
            values = union(*(self.interpreter.attribute(value, attr) for value in base))
            if not self._in_call(node) and id(node) not in self.forwarded:
                self.interpreter.reference(self.site(node), values, self.result)
            return values
        if isinstance(node, ast.Call):
            return self.call(node)
        if isinstance(node, ast.Await):
            return self.eval(node.value)
        if isinstance(node, ast.Subscript):
            return self.subscript(node)
        if isinstance(node, ast.IfExp):
            self.eval(node.test)
            return union(self.eval(node.body), self.eval(node.orelse))
        if isinstance(node, ast.BoolOp):
            return union(*(self.eval(value) for value in node.values))
        if isinstance(node, ast.NamedExpr):
            return self.eval(node.value)
        if isinstance(node, ast.Starred):
            return self.eval(node.value)
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            if any(isinstance(element, ast.Starred) for element in node.elts):
                return NOTHING
            return frozenset({Seq(tuple(self.eval(element) for element in node.elts))})
        if isinstance(node, ast.Dict):
            pairs = [(key, value) for key, value in zip(node.keys, node.values, strict=False) if key is not None]
            return frozenset({Mapping(tuple(self.eval(k) for k, _ in pairs), tuple(self.eval(v) for _, v in pairs))})
        if isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp)):
            return frozenset({Seq((self.eval(node.elt),))})
        if isinstance(node, ast.DictComp):
            return frozenset({Mapping((self.eval(node.key),), (self.eval(node.value),))})
        if isinstance(node, ast.JoinedStr):
            return self.joined(node)
        if isinstance(node, ast.Slice):
            bounds = [literals(self.eval(part)) if part is not None else [None]
                      for part in (node.lower, node.upper, node.step)]
            if any(found is None or len(found) != 1 for found in bounds):
                return NOTHING
            return live(slice(*(found[0] for found in bounds if found is not None)))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            numbers = literals(self.eval(node.operand))
            if numbers and all(isinstance(n, int) for n in numbers):
                return union(*(live(-n) for n in numbers))
            return NOTHING
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            left, right = literals(self.eval(node.left)), literals(self.eval(node.right))
            if left and right and len(left) * len(right) <= MOST and \
                    all(isinstance(item, str) for item in [*left, *right]):
                return union(*(live(a + b) for a in left for b in right))
            return NOTHING
        return NOTHING

    def joined(self, node: ast.JoinedStr) -> Values:
        texts = ['']
        for part in node.values:
            if isinstance(part, ast.Constant):
                texts = [text + str(part.value) for text in texts]
                continue
            if not isinstance(part, ast.FormattedValue) or part.format_spec is not None or part.conversion != -1:
                return NOTHING
            found = literals(self.eval(part.value))
            if not found or not all(isinstance(item, str) for item in found) or len(texts) * len(found) > MOST:
                return NOTHING
            texts = [text + item for text in texts for item in found]
        return union(*(live(text) for text in texts))

    def name(self, name: str) -> Values:
        found: list[Values] = []
        if name in self.bindings:
            found.append(self.bindings[name])
        elif name in self.params.positional or name in self.params.keyword_only or name == self.params.kwargs:
            found.append(self.unbound(name))
        if name in self.assigns:
            found.extend(self.assigned(name))
        if found and name not in self.declared_global:
            return union(*found)
        if name in self.closure:
            found.append(live(self.closure[name]))
        elif name in self.globals:
            found.append(live(self.globals[name]))
            found.append(self.interpreter.reassigned(self.globals, self.filename, name))  # (empty: none)
        elif hasattr(builtins, name):
            found.append(live(getattr(builtins, name)))
        return union(*found) if found else NOTHING

    def unbound(self, name: str) -> Values:
        """A parameter that no call gave: its default, else its annotation's class."""
        found: list[Values] = []
        if name in self.params.defaults:
            found.append(self.eval(self.params.defaults[name]))
        if name in self.params.annotations:
            found.append(self.annotated(self.params.annotations[name]))
        return union(*found) if found else NOTHING

    def annotated(self, node: ast.expr) -> Values:
        """An annotation's class as the instances it describes (``Type[X]``: the class)."""
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            try:
                node = ast.parse(node.value, mode='eval').body
            except SyntaxError:
                return NOTHING
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
            return union(self.annotated(node.left), self.annotated(node.right))
        if isinstance(node, ast.Subscript):
            outer = self.static(node.value)
            if any(isinstance(v, Live) and (v.obj is type or getattr(v.obj, '_name', None) == 'Type') for v in outer):
                return union(*(live(v.obj) for v in self.static(node.slice)
                               if isinstance(v, Live) and isinstance(v.obj, type)))
            if any(isinstance(v, Live) and getattr(v.obj, '_name', None) == 'Optional' for v in outer):
                return self.annotated(node.slice)
            return NOTHING
        found = [frozenset({Instance(v.obj)}) for v in self.static(node)
                 if isinstance(v, Live) and isinstance(v.obj, type) and v.obj.__module__ != 'builtins']
        return union(*found) if found else NOTHING

    def static(self, node: ast.expr) -> Values:
        """A name or a dotted path in the module's namespace (annotations)."""
        if isinstance(node, ast.Name):
            if node.id in self.globals:
                return live(self.globals[node.id])
            return live(getattr(builtins, node.id)) if hasattr(builtins, node.id) else NOTHING
        if isinstance(node, ast.Attribute):
            return union(*(self.interpreter.attribute(v, node.attr) for v in self.static(node.value)))
        return NOTHING

    def assigned(self, name: str) -> list[Values]:
        found = []
        for source, path, values in self.assigns[name]:
            if values is None:
                values = self.eval(source) if source is not None else NOTHING
            for step in path:
                values = self.iterated(source) if step == 'iter' and source is not None else _index(values, step)
            found.append(values)
        return found

    def iterated(self, node: ast.expr) -> Values:
        """What iterating over an expression gives (each iteration's requests made once)."""
        key = -id(node)
        if key not in self.cache:
            self.cache[key] = NOTHING
            self.cache[key] = self.interpreter.iterate(self.eval(node), self.site(node), self.result)
        return self.cache[key]

    def subscript(self, node: ast.Subscript) -> Values:
        base = self.eval(node.value)
        index = self.eval(node.slice)
        keys = literals(index)
        found: list[Values] = []
        for value in base:
            if isinstance(value, Body):
                if keys is not None and all(isinstance(k, str) for k in keys):
                    found.extend(frozenset({Body((*value.path, key))}) for key in keys)
                continue
            if isinstance(value, Seq):
                found.extend(value.items[k] for k in (keys or range(len(value.items)))
                             if isinstance(k, int) and -len(value.items) <= k < len(value.items))
                continue
            pairs = _pairs(value)
            if pairs is not None:
                found.extend(v for k, v in pairs if keys is None or _matches(k, keys))
                continue
            if isinstance(value, Live) and isinstance(value.obj, str):
                text: str = value.obj
                slices: list[slice | int] = [v.obj for v in index if isinstance(v, Live) and isinstance(v.obj, slice)]
                slices += [k for k in keys or [] if isinstance(k, int) and -len(text) <= k < len(text)]
                found.extend(live(text[k]) for k in slices)
                continue
            if isinstance(value, Live) and isinstance(value.obj, (list, tuple)):
                items = [value.obj[k] for k in keys if isinstance(k, int) and -len(value.obj) <= k < len(value.obj)] \
                    if keys is not None else list(value.obj)[:MOST]
                found.extend(live(item) for item in items)
        return union(*found) if found else NOTHING

    def call(self, node: ast.Call) -> Values:
        callee = self.eval(node.func)
        if callee == NOTHING and isinstance(node.func, ast.Attribute):
            # On an object not known statically: a request method is known by its name alone.
            callee = next((by_name for library in self.interpreter.libraries
                           if (by_name := library.named(node.func.attr)) is not None), callee)
        own = any(isinstance(value, Live) and self.interpreter.code.owns_function(value.obj) or
                  isinstance(value, Method) and self.interpreter.code.owns_function(value.fn) for value in callee)
        if own:
            place = self.site(node)  # (whatever its name: not a request here)
            self.interpreter.followed.update((place.file, line) for line in place.lines())
        forwards = forwarding.forwarding(node, [value.obj for value in callee if isinstance(value, Live)], own)
        handed = forwarding.function_node(node, forwards) if forwards is not None else None
        if handed is not None:
            self.forwarded.add(id(handed))
        args: list[Values] = []
        arg_nodes: list[ast.expr] = []
        starred = False
        for arg in node.args:
            if isinstance(arg, ast.Starred):
                spread = self.eval(arg.value)
                [seq] = spread if len(spread) == 1 else [None]
                if isinstance(seq, Seq) and not starred:  # *args of a known length: its items
                    args.extend(seq.items)
                    arg_nodes.extend([arg.value] * len(seq.items))
                else:
                    starred = True
                continue
            if not starred:
                args.append(self.eval(arg))
                arg_nodes.append(arg)
            else:
                self.eval(arg)
        keywords: dict[str, Values] = {}
        keyword_nodes: dict[str, ast.expr] = {}
        for keyword in node.keywords:
            values = self.eval(keyword.value)
            if keyword.arg is not None:
                keywords[keyword.arg] = values
                keyword_nodes[keyword.arg] = keyword.value
                continue
            named = _keywords(values)
            if named is not None:  # **kwargs of known names
                for found, value in named.items():
                    keywords.setdefault(found, value)
                    keyword_nodes.setdefault(found, keyword.value)
            else:
                starred = True
        site = CallSite(site=self.site(node), args=args, keywords=keywords, arg_nodes=arg_nodes,
                        keyword_nodes=keyword_nodes, starred=starred, found=self.result.add)
        returned = union(*(self.interpreter.call(value, site, self.result) for value in callee)) if callee else NOTHING
        if forwards is not None and handed is not None:
            self.forward(forwards, handed, site, ast.unparse(node.func))
        return returned

    def forward(self, forwards: forwarding.Forwarding, handed: ast.expr, site: CallSite, handed_to: str) -> None:
        """The function handed to a forwarder (``handed_to``: its text), called as the forwarder
        will call it: with the arguments handed with it."""
        _, own_keyword = forwards.function
        args: list[Values] = []
        arg_nodes: list[ast.expr] = []
        starred = site.starred or forwards.more  # (what comes later is not known)
        if isinstance(forwards.args, int):
            args, arg_nodes = site.args[forwards.args:], site.arg_nodes[forwards.args:]
        elif isinstance(forwards.args, str) and forwards.args in site.keywords:
            [seq] = site.keywords[forwards.args] if len(site.keywords[forwards.args]) == 1 else [None]
            if isinstance(seq, Seq):
                args = list(seq.items)
                arg_nodes = [site.keyword_nodes[forwards.args]] * len(seq.items)
            else:
                starred = True  # a sequence not known: its items are not
        keywords: dict[str, Values] = {}
        keyword_nodes: dict[str, ast.expr] = {}
        if forwards.kwargs == '**':
            keywords = {k: v for k, v in site.keywords.items() if k != own_keyword}
            keyword_nodes = {k: v for k, v in site.keyword_nodes.items() if k != own_keyword}
        elif forwards.kwargs is not None and forwards.kwargs in site.keywords:
            named = _keywords(site.keywords[forwards.kwargs])
            if named is not None:
                keywords = named
                keyword_nodes = {found: site.keyword_nodes[forwards.kwargs] for found in named}
            else:
                starred = True
        called = dataclasses.replace(site, args=args, arg_nodes=arg_nodes, keywords=keywords,
                                     keyword_nodes=keyword_nodes, starred=starred, handed=handed_to)
        for function in self.eval(handed):
            self.interpreter.call(function, called, self.result)


def _keywords(values: Values) -> dict[str, Values] | None:
    """A mapping's items as keyword arguments, if it is one mapping with keys all known."""
    [mapping] = values if len(values) == 1 else [None]
    if not isinstance(mapping, Mapping):
        return None
    names = [strings(key) for key in mapping.keys]
    if not all(found and len(found) == 1 for found in names):
        return None
    return {found[0]: value for found, value in zip(names, mapping.values, strict=True) if found}


def _index(values: Values, index: int) -> Values:
    found: list[Values] = []
    for value in values:
        if isinstance(value, Seq) and -len(value.items) <= index < len(value.items):
            found.append(value.items[index])
        elif isinstance(value, Live) and isinstance(value.obj, (tuple, list)) and \
                -len(value.obj) <= index < len(value.obj):
            found.append(live(value.obj[index]))
    return union(*found) if found else NOTHING


__all__ = ["Code", "Findings", "analyze"]
