"""Kopf's ``kopf._cogs.structs.bodies``: the object's body and its parts as handlers get them."""

from kopf._structures.structs import (
    Annotations,
    Body,
    BodyEssence,
    Labels,
    Meta,
    ObjectReference,
    OwnerReference,
    RawBody,
    RawEvent,
    RawEventType,
    Spec,
    Status,
    build_object_reference,
    build_owner_reference,
)

__all__ = ['Annotations', 'Body', 'BodyEssence', 'Labels', 'Meta', 'ObjectReference', 'OwnerReference',
           'RawBody', 'RawEvent', 'RawEventType', 'Spec', 'Status',
           'build_object_reference', 'build_owner_reference']
