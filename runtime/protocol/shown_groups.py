"""Parallel groups as the server shows them on step events (PROTOCOL.md 8.3)."""

from __future__ import annotations

from typing import Final

from burrow.protocol.shapes import JsonDict

# What the server adds to a step event's payload when it shows the step's parallel group to the
# SDK (server/parallel_groups.annotate). Derived from other events and never stored, so a
# history export read back (replay/bundle.py) drops them before it types the event.
PARALLEL_GROUP_SHOWN_KEYS: Final = (
    "parallel_group_id",
    "parallel_group_kind",
    "parallel_group_base_sequence",
    "parallel_group_size",
    "parallel_group_index",
    "parallel_group_path",
)
PARALLEL_GROUP_SHOWN_ON: Final = ("Activity", "Timer", "Child")


def without_shown_group(event_type: str, payload: JsonDict) -> JsonDict:
    """`payload` less the group fields the server shows on a step event of `event_type`."""
    if not event_type.startswith(PARALLEL_GROUP_SHOWN_ON):
        return payload
    return {k: v for k, v in payload.items() if k not in PARALLEL_GROUP_SHOWN_KEYS}
