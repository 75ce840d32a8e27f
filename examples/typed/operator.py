"""An operator whose resource is declared as a Python model (not in Kopf): the CRD comes from
the model, with its descriptions, bounds and enums, so that the API server itself refuses what
the model refuses, and `kubectl explain` tells what each field means.

    kopf crd generate examples/typed/operator.py | kubectl apply -f -
    kopf run -n default examples/typed/operator.py

The handlers get the spec and the status as the models (validated: an object that does not fit
fails the handler permanently, with the errors); `regreet`'s result, a model, is stored in the
status under its name, as a dict would be.
"""

from enum import StrEnum
from typing import Annotated, Any

import kopf
from pydantic import BaseModel, Field


class Tone(StrEnum):
    WARM = 'warm'
    FORMAL = 'formal'


class BeaconSpec(BaseModel):
    """What the beacon says, and how."""

    who: Annotated[str, kopf.CEL("self != 'nobody'", message="nobody cannot be greeted")] = Field(
        description="Whom to greet.", min_length=1, max_length=63)
    tone: Tone = Field(Tone.WARM, description="How to greet: warm or formal.")
    repeat: int = Field(1, ge=1, le=5, description="How many times to say it.")
    tags: list[str] = Field(default_factory=list, description="Free labels, for the operator's users.")


class BeaconStatus(BaseModel):
    """What the operator did."""

    message: str | None = Field(None, description="The greeting, as said.")


class Beacon(kopf.CustomResource, group='typed.kopf.dev', version='v1', short_names=['bc'],
             printer_columns=[kopf.PrinterColumn('Who', '.spec.who'),
                              kopf.PrinterColumn('Message', '.status.message')]):
    """A beacon: the operator greets whom its spec names."""

    spec: BeaconSpec
    status: BeaconStatus | None = None


@kopf.on.create(Beacon)
def greet(spec: BeaconSpec, patch: kopf.Patch, logger: kopf.Logger, **_: Any) -> None:
    opening = 'Hello' if spec.tone is Tone.WARM else 'Good day'
    message = ' '.join([f"{opening}, {spec.who}!"] * spec.repeat)
    patch.status['message'] = message
    logger.info(f"Said: {message}")


@kopf.on.update(Beacon, field='spec.who')
def regreet(spec: BeaconSpec, status: BeaconStatus | None, **_: Any) -> BeaconStatus:
    before = status.message if status is not None else None
    return BeaconStatus(message=f"Hello again, {spec.who}! (Before: {before})")
