"""History events of durable selection (`select`, PROTOCOL.md 8.2); re-exported by `events`."""

from __future__ import annotations

from typing import ClassVar

from burrow.protocol.event_base import Event
from burrow.protocol.shapes import JsonDict


class SelectionGroupOpened(Event):
    """A task opened a first-completion group: steps `base_sequence` on, one per member.

    A Burrow event (the SDK carries the group on its commands' metadata, which Burrow's step
    events do not keep): the server shows each member step's `parallel_group_path` from it.
    `members` are `{key, index, base_sequence, size, kind}`, as the SDK named them.
    """

    event_type: ClassVar[str] = "SelectionGroupOpened"
    selection_group_id: str
    parallel_group_kind: str
    base_sequence: int
    size: int
    members: list[JsonDict]


class SelectionResolved(Event):
    """The group's winner: the first member whose step closed (`resolution_event_*`)."""

    event_type: ClassVar[str] = "SelectionResolved"
    selection_group_id: str
    selection_group_base_sequence: int
    selection_group_size: int
    member_key: int | str
    member_index: int
    member_base_sequence: int
    member_size: int
    operation_kind: str
    operation_identity: str
    outcome: str
    resolution_event_id: str
    resolution_event_type: str


class SelectionOperationCancelled(Event):
    """Workflow code cancelled a member that had not closed (`cancel_selection_operation`)."""

    event_type: ClassVar[str] = "SelectionOperationCancelled"
    selection_group_id: str
    member_key: int | str
    member_index: int
    member_base_sequence: int
    member_size: int
    operation_kind: str
    operation_identity: str
