"""The base of every history event model, shared by the event modules of burrow.protocol."""

from __future__ import annotations

from typing import ClassVar, Literal

from burrow.protocol.shapes import WireModel

ExecutionMode = Literal["queued", "local"]


class Event(WireModel):
    """Base of every history event model; `event_type` is the catalogue name."""

    event_type: ClassVar[str]


def is_local(event: Event) -> bool:
    """Whether the event belongs to a local activity (recorded by its workflow task, A3)."""
    return bool(getattr(event, "local_activity", False))
