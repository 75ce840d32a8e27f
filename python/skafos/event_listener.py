"""The base class of Skafos' listeners: subclasses handle one resource's events."""

from __future__ import annotations

import logging
from typing import Any


class EventListener:
    """Handles the events of the watched resource: override ``create``, ``update``,
    ``delete`` and ``error`` (and ``rollback`` to undo them when a later listener fails).

    A listener given to ``StreamWatch`` as an instance is reused for every event; given as
    a class, a new instance is made for each event, as ``cls(api_client, event)``. Before
    the methods are called, ``self.event`` is the raw watch event (``type``, ``object``,
    ``raw_object``), ``self.event_obj`` its object and ``self.metadata`` the object's
    metadata.
    """

    def __init__(self, api_client: Any = None, event: dict[str, Any] | None = None) -> None:
        self.logger = logging.getLogger('skafos')
        self.ev_state: dict[str, Any] | None = None
        self.api_client = api_client
        self.event: dict[str, Any] | None = None
        self.event_obj: Any = None
        self.metadata: Any = None
        self.process_event(event, self.ev_state)

    def process_event(self, event: dict[str, Any] | None, ev_state: dict[str, Any] | None) -> None:
        """Remember the event (and the state shared by the listeners of this event)."""
        if not event:
            return
        self.ev_state = ev_state
        self.event = event
        self.event_obj = event['object']
        if isinstance(self.event_obj, dict):
            self.metadata = self.event_obj.get('metadata')
        else:
            self.metadata = getattr(self.event_obj, 'metadata', None)

    def process(self, event: dict[str, Any] | None = None, ev_state: dict[str, Any] | None = None) -> bool:
        """Call the method of the event's type; whether it succeeded (``None`` counts as success).

        An exception is logged and counts as a failure: the stream goes on.
        """
        if event:
            self.process_event(event, ev_state)
        methods = {'ADDED': self.create, 'MODIFIED': self.update, 'DELETED': self.delete, 'ERROR': self.error}
        kind = (self.event or {}).get('type')
        try:
            method = methods.get(kind or '')
            if method is None:
                self.logger.warning(f"No method for the event of type {kind!r}: {self.event}")
                return True
            succeeded = method() is not False
        except Exception:
            self.logger.exception(f"{self._object_name()} :: {self.get_name()} failed")
            return False
        outcome = 'succeeded' if succeeded else 'failed'
        self.logger.info(f"{self._object_name()} :: {self.get_name()} completed with status: {outcome}")
        return succeeded

    def create(self) -> bool | None:
        """An object was added (``ADDED``; also every existing object when the stream starts).

        Return ``False`` to roll back this event's listeners; ``None`` means success.
        """
        return None

    def update(self) -> bool | None:
        """An object was modified (``MODIFIED``)."""
        return None

    def delete(self) -> bool | None:
        """An object was deleted (``DELETED``)."""
        return None

    def error(self) -> bool | None:
        """The stream reported an error (``ERROR``): ``self.event_obj`` is the API's ``Status``."""
        return None

    def rollback(self) -> None:
        """Undo what this listener did for the event: a later listener of it failed.
        Listeners are rolled back in reverse order."""

    def get_name(self) -> str:
        """The listener's name in the logs: its class name."""
        return self.__class__.__name__

    def _object_name(self) -> str:
        metadata = self.metadata
        name = metadata.get('name') if isinstance(metadata, dict) else getattr(metadata, 'name', None)
        return str(name) if name is not None else '(no name)'
