"""Workflow updates for SDK-run workflows (PROTOCOL.md 5.1, 7, 8.2; SPEC M4b).

An SDK worker runs an accepted update in a workflow task of its own: the task carries
`workflow_update_id`, the worker replays, runs only that handler and answers with one
`complete_update` / `fail_update` command. The store then records `UpdateApplied` (where the
handler ran, so later replays run it there again) and `UpdateCompleted`, and gives the run a
follow-up workflow task in which its code goes on with the update's effects.
"""

from __future__ import annotations

from collections.abc import Sequence

from burrow.protocol import events as ev
from burrow.protocol.shapes import JsonDict
from burrow.store.models import HistoryEvent

UPDATE_COMMANDS = frozenset({"complete_update", "fail_update"})


def pending_update(history: Sequence[HistoryEvent]) -> str | None:
    """The oldest update accepted in `history` that has no `UpdateCompleted` yet, or None."""
    completed = {e.event.update_id for e in history if isinstance(e.event, ev.UpdateCompleted)}
    for record in history:
        event = record.event
        if isinstance(event, ev.UpdateAccepted) and event.update_id not in completed:
            return event.update_id
    return None


def is_update_batch(commands: Sequence[JsonDict]) -> bool:
    """Whether a completion answers an update task: only update commands, at least one."""
    return bool(commands) and all(c.get("type") in UPDATE_COMMANDS for c in commands)
