"""Conversion handlers (``@kopf.on.convert``) called for the objects of a conversion review.

The core chooses each object's chain of steps (the handlers, in order) and sends all objects of
a review at once; here each object goes through its chain: every handler sees the object as
the previous step made it (in that step's version), and the next step starts from what it
returned. The core then checks what a conversion may not change and answers the API server.
"""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kopf._bridge.protocol import ConversionAnswer, ConversionRequest
from kopf._handling import models
from kopf._handling.execution import is_async_fn
from kopf._handling.handlers import ConversionHandler
from kopf._logs.loggers import LocalObjectLogger
from kopf._structures.dicts import plain
from kopf._structures.errors import PermanentError, TemporaryError
from kopf._structures.memos import ObjectMemos
from kopf._structures.references import Resource
from kopf._structures.settings import OperatorSettings
from kopf._structures.structs import Body, Patch


class ConversionError(Exception):
    """A step could not convert an object: the message says which, and why."""


class Converting:
    """The steps of one operator and what their calls share: memos, indices, settings."""

    def __init__(self, *, handlers: Sequence[ConversionHandler], settings: OperatorSettings,
                 memos: ObjectMemos, indices: Mapping[str, Any]) -> None:
        self.handlers = list(handlers)
        self.settings = settings
        self.memos = memos
        self.indices = dict(indices)

    async def convert(self, request: ConversionRequest, resource: Resource) -> ConversionAnswer:
        """All objects through their chains: all converted, or the first failure's message.
        Chains of synchronous steps only run in the executor at once (one hop for the review)."""
        objects = request['objects']
        steps = {step for _, chain in objects for step in chain}
        try:
            if any(is_async_fn(self.handlers[step].fn) for step in steps):
                converted = [await self._chain(obj, chain, resource) for obj, chain in objects]
            else:
                loop = asyncio.get_running_loop()
                convert_all = functools.partial(self._all_sync, objects, resource)
                converted = await loop.run_in_executor(self.settings.execution.executor, convert_all)
        except ConversionError as e:
            return {'error': str(e)}
        return {'converted': _json(converted)}

    def convert_here(self, request: ConversionRequest, resource: Resource) -> ConversionAnswer:
        """All objects through chains of synchronous steps, in this thread."""
        try:
            return {'converted': _json(self._all_sync(request['objects'], resource))}
        except ConversionError as e:
            return {'error': str(e)}

    def _all_sync(self, objects: list[tuple[dict[str, Any], list[int]]], resource: Resource) -> list[dict[str, Any]]:
        converted = []
        for obj, chain in objects:
            for step in chain:
                handler = self.handlers[step]
                kwargs, patch = self._kwargs(handler, obj, resource)
                result = self._called(handler, obj, functools.partial(handler.fn, **kwargs))
                obj = self._applied(handler, obj, patch, result)
            converted.append(obj)
        return converted

    async def _chain(self, obj: dict[str, Any], chain: list[int], resource: Resource) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        for step in chain:
            handler = self.handlers[step]
            kwargs, patch = self._kwargs(handler, obj, resource)
            if is_async_fn(handler.fn):
                try:
                    result = await handler.fn(**kwargs)
                except Exception as e:
                    raise self._failed(handler, obj, e) from e
            else:
                call = functools.partial(self._called, handler, obj, functools.partial(handler.fn, **kwargs))
                result = await loop.run_in_executor(self.settings.execution.executor, call)
            obj = self._applied(handler, obj, patch, result)
        return obj

    def _kwargs(self, handler: ConversionHandler, obj: dict[str, Any],
                resource: Resource) -> tuple[dict[str, Any], Patch]:
        body = Body(obj)
        meta = body.meta
        ref = _ref(obj)
        name, namespace, uid = ref['name'], ref['namespace'], ref['uid']
        patch = Patch(body=body)
        kwargs = {
            'body': body, 'spec': body.spec, 'meta': meta, 'status': body.status,
            'labels': meta.labels, 'annotations': meta.annotations,
            'name': name, 'namespace': namespace, 'uid': uid,
            'logger': LocalObjectLogger._made(ref, self.settings),
            'memo': self.memos.existing(uid or ''),
            'resource': resource, 'patch': patch, 'param': handler.param,
            'source': handler.source, 'target': handler.target,
            **self.indices,
        }
        return kwargs, patch

    def _called(self, handler: ConversionHandler, obj: Mapping[str, Any], call: Callable[[], Any]) -> Any:
        try:
            return call()
        except Exception as e:
            raise self._failed(handler, obj, e) from e

    def _failed(self, handler: ConversionHandler, obj: Mapping[str, Any], error: Exception) -> ConversionError:
        """The failure as the API server will show it; the traceback in the operator's log
        (not for Kopf's own errors, which say all there is to say)."""
        what = _described(obj)
        text = str(error) or type(error).__name__
        message = f"{handler} failed to convert {what} from {handler.source} to {handler.target}: {text}"
        logger = LocalObjectLogger._made(_ref(obj), self.settings)
        if isinstance(error, (PermanentError, TemporaryError)):
            logger.error(message)
        else:
            logger.exception(message)
        return ConversionError(message)

    def _applied(self, handler: ConversionHandler, obj: dict[str, Any], patch: Patch, result: Any) -> dict[str, Any]:
        """The object after a step: its ``patch`` applied, then the fields it returned put in
        place (``metadata``'s given keys only); in the step's target version."""
        result = models.plain(result)  # a model: the fields it was given
        if result is not None and not isinstance(result, Mapping):
            raise self._failed(handler, obj, TypeError(
                f"it returned {type(result).__name__}, not the converted object's fields (a dict, a model) or None"))
        # The object is this call's own (made from the core's JSON, or by the previous step):
        # a shallow copy suffices; the returned values become plain data (views as dicts).
        converted = patch._changed(obj)[1] if patch else dict(obj)
        for key, value in (result or {}).items():
            if key == 'metadata' and isinstance(value, Mapping):
                converted['metadata'] = {**converted.get('metadata', {}), **plain(value)}
            else:
                converted[key] = plain(value)
        group = str(obj.get('apiVersion', '')).rpartition('/')[0]
        converted['apiVersion'] = f'{group}/{handler.target}'
        return converted


def _json(objects: list[dict[str, Any]]) -> str:
    return json.dumps(objects, separators=(',', ':'), ensure_ascii=False)


def _ref(obj: Mapping[str, Any]) -> dict[str, Any]:
    meta = obj.get('metadata') or {}
    return {'apiVersion': obj.get('apiVersion'), 'kind': obj.get('kind'), 'name': meta.get('name'),
            'uid': meta.get('uid'), 'namespace': meta.get('namespace')}


def _described(obj: Mapping[str, Any]) -> str:
    ref = _ref(obj)
    where = f"{ref['namespace']}/{ref['name']}" if ref['namespace'] else f"{ref['name']}"
    return f"{ref['kind']} {where}"
