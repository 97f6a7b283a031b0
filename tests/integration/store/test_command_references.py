"""Completion commands that name updates, signals and timers of the run (issue 25 item 6).

The store checks each reference under the run lock of the completion that writes it; a
reference to nothing refuses the whole completion (`InvalidCommandReference`, an
`InvalidCommands` as the worker knows it) and writes nothing, on every completion path.
"""

from __future__ import annotations

from typing import Any

import pytest

from burrow.store import Store
from burrow.store import schema as s
from burrow.store.errors import InvalidCommandReference, InvalidCommands
from burrow.store.models import ClaimedWorkflowTask
from tests.support import store as shared
from tests.support.store import NS, blob, claim_wf, rows, start, sweep_until

RUN_TABLES = (*shared.RUN_TABLES, s.signals, s.updates)


def timer(seq: int, delay: float = 3600) -> dict[str, Any]:
    return {"type": "start_timer", "sequence": seq, "delay_seconds": delay}


async def snapshot(store: Store, run_id: str) -> dict[str, list[dict[str, Any]]]:
    return await shared.snapshot(store, run_id, RUN_TABLES)


async def event_types(store: Store, run_id: str) -> list[str]:
    return [e.event_type for e in await store.read_history(run_id=run_id)]


async def signalled(store: Store, signal_id: str) -> ClaimedWorkflowTask:
    """The workflow task a signal makes for the waiting run wf-1, claimed."""
    await store.signal_workflow(
        namespace=NS, workflow_id="wf-1", signal_name="poke", arguments=blob(), signal_id=signal_id
    )
    return await claim_wf(store)


async def waiting_on_timer(store: Store, delay: float = 3600) -> str:
    """A run whose first task started timer step 1."""
    run_id = await start(store)
    task = await claim_wf(store)
    await store.complete_workflow_task(lease=task.lease, commands=[timer(1, delay)])
    return run_id


async def test_unknown_update_is_refused_naming_the_command_and_the_update(store: Store) -> None:
    """Issue 25 item 6: `fail_update` for no accepted update raises InvalidCommandReference
    (an InvalidCommands, which the worker turns into a failed workflow task), naming what is
    missing; the run, its history and its task are left as they were."""
    run_id = await start(store)
    task = await claim_wf(store)
    before = await snapshot(store, run_id)
    fail = {"type": "fail_update", "update_id": "nope", "message": "made up"}
    with pytest.raises(InvalidCommandReference) as refused:
        await store.complete_workflow_task(lease=task.lease, commands=[timer(1), fail])
    assert isinstance(refused.value, InvalidCommands)
    assert (refused.value.command, refused.value.field, refused.value.value) == (
        "fail_update",
        "update_id",
        "nope",
    )
    assert await snapshot(store, run_id) == before


async def test_update_outcome_is_written_once_for_an_accepted_update(store: Store) -> None:
    """Issue 25 item 6: the update named must still wait for its outcome: a second outcome for
    it in the same completion is refused, and the first outcome is not written either."""
    run_id = await waiting_on_timer(store)
    await store.submit_update(
        namespace=NS, workflow_id="wf-1", update_name="bump", arguments=blob(), update_id="u1"
    )
    task = await claim_wf(store)
    before = await snapshot(store, run_id)
    done = {"type": "complete_update", "update_id": "u1", "result": blob(2)}
    fail = {"type": "fail_update", "update_id": "u1", "message": "late"}
    with pytest.raises(InvalidCommandReference, match="u1"):
        await store.complete_workflow_task(lease=task.lease, commands=[done, fail])
    assert await snapshot(store, run_id) == before
    await store.complete_workflow_task(lease=task.lease, commands=[done])
    update = await store.get_update(run_id=run_id, update_id="u1")
    assert update is not None and update.state == "completed"


async def test_skip_of_an_unknown_signal_is_refused_on_the_one_statement_path(
    store: Store,
) -> None:
    """Issue 25 item 6: a completion given its claim's position (the one-statement path the
    native worker takes) checks `skip_signal` too; before, it wrote `SignalSkipped` there."""
    run_id = await start(store)
    task = await claim_wf(store)
    assert task.position is not None
    before = await snapshot(store, run_id)
    skip = {"type": "skip_signal", "signal_id": "ghost", "signal_name": "poke", "reason": "x"}
    with pytest.raises(InvalidCommandReference, match="ghost"):
        await store.complete_workflow_task(
            lease=task.lease, commands=[timer(1), skip], position=task.position
        )
    assert await snapshot(store, run_id) == before


async def test_cancel_of_a_timer_that_already_fired_is_taken_without_an_event(
    store: Store,
) -> None:
    """Issue 25 item 6: the code may cancel a timer whose `TimerFired` it has not seen yet
    (it fired after the claim, or later in the same history): that cancel is no made-up
    reference, so the completion is taken and records no `TimerCancelled`."""
    run_id = await waiting_on_timer(store, delay=0.0)

    async def fired() -> bool:
        return any(t["state"] == "fired" for t in await rows(store, s.timers, run_id))

    await sweep_until(store, fired)
    task = await claim_wf(store)
    cancel = {"type": "cancel_timer", "sequence": 1}
    await store.complete_workflow_task(lease=task.lease, commands=[cancel, timer(2)])
    assert "TimerCancelled" not in await event_types(store, run_id)
    assert [(t["step_seq"], t["state"]) for t in await rows(store, s.timers, run_id)] == [
        (1, "fired"),
        (2, "pending"),
    ]


async def test_cancel_of_a_timer_already_cancelled_is_refused(store: Store) -> None:
    """Issue 25 item 6: `cancel_timer` must name a timer of the run that is not cancelled;
    a second cancel (before: taken, the task consumed with nothing written) is refused."""
    run_id = await waiting_on_timer(store)
    task = await signalled(store, "s1")
    cancel = {"type": "cancel_timer", "sequence": 1}
    await store.complete_workflow_task(lease=task.lease, commands=[cancel, timer(2)])
    task = await signalled(store, "s2")
    before = await snapshot(store, run_id)
    with pytest.raises(InvalidCommandReference, match="already cancelled"):
        await store.complete_workflow_task(lease=task.lease, commands=[cancel])
    assert await snapshot(store, run_id) == before
    assert (await event_types(store, run_id)).count("TimerCancelled") == 1
