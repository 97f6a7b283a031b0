"""A workflow task completed at its claimed position: one statement, the same durable outcome.

The worker passes `ClaimedWorkflowTask.position`; the store then writes the completion in one
statement outside a transaction block, or, when the run is no longer where the claim left it
(or the lease is stale), writes nothing there and takes the transactional path. Either way the
result must be what the transactional path alone would have written (store invariants 2 and 3).
"""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from burrow.store import Store, claims, runs, signals
from burrow.store import schema as s
from burrow.store.completion import transactional
from burrow.store.completion.effects import CompletionOutcome
from burrow.store.errors import StaleLease
from burrow.store.models import RunStatus
from burrow.store.ready import ReadyTask, RunChanged
from burrow.store.transactions import Txn
from burrow.testing.helpers import assert_eventually
from tests.support.store import (
    ACT,
    LEASE,
    QUEUE,
    blob,
    claim_wf,
    durable_outcome,
    rows,
    schedule,
    snapshot,
    start,
)

TTL = timedelta(minutes=5)


def timer(seq: int, delay: float = 30.0) -> dict[str, Any]:
    return {"type": "start_timer", "sequence": seq, "delay_seconds": delay}


def complete(value: int = 9) -> dict[str, Any]:
    return {"type": "complete_workflow", "result": blob(value)}


def side_effect(seq: int) -> dict[str, Any]:
    return {"type": "record_side_effect", "sequence": seq, "result": blob(seq)}


COMMANDS: dict[str, list[dict[str, Any]]] = {
    "nothing": [],
    "one activity": [schedule(1)],
    "two activities and a timer": [schedule(1), schedule(2), timer(3)],
    "side effect then complete": [side_effect(1), complete()],
    "fail": [{"type": "fail_workflow", "message": "boom", "exception_type": "ValueError"}],
    "cancel": [{"type": "cancel_workflow", "message": "stop"}],
    "activity then complete": [schedule(1), complete()],
}
# Work started by a task that also closes its run is cancelled with it, in the transaction.
TRANSACTIONAL = {"activity then complete"}


def _transactions_counted(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The task ids of completions that take the transactional path, as they happen."""
    transactions: list[str] = []
    in_transaction = transactional.complete_workflow_task

    async def counted(*args: Any, **kwargs: Any) -> CompletionOutcome:
        transactions.append(kwargs["lease"].task_id)
        return await in_transaction(*args, **kwargs)

    monkeypatch.setattr(transactional, "complete_workflow_task", counted)
    return transactions


async def _completed(store: Store, name: str, *, position: bool) -> str:
    run_id = await start(store, workflow_id=f"{name}-{position}")
    task = await claim_wf(store)
    await store.complete_workflow_task(
        lease=task.lease,
        commands=COMMANDS[name],
        sticky_ttl=TTL,
        position=task.position if position else None,
    )
    return run_id


@pytest.mark.parametrize("name", list(COMMANDS))
async def test_a_completion_at_its_position_writes_what_the_transaction_writes(
    store: Store, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Store invariant 3: events, run, tasks, activities and timers as the transactional path."""
    transactions = _transactions_counted(monkeypatch)

    folded = await _completed(store, name, position=True)
    took_transaction = bool(transactions)
    transactional = await _completed(store, name, position=False)

    assert await durable_outcome(store, folded) == await durable_outcome(store, transactional)
    assert took_transaction == (name in TRANSACTIONAL)


async def test_a_closing_completion_completes_its_own_task_and_cancels_nothing_else(
    store: Store, run_changes: list[RunChanged]
) -> None:
    """Store invariant 3: the task the statement completes is not also cancelled by the close."""
    run_id = await start(store)
    task = await claim_wf(store)

    await store.complete_workflow_task(
        lease=task.lease, commands=[complete(4)], position=task.position
    )

    [task_row] = await rows(store, s.workflow_tasks, run_id)
    assert task_row["state"] == "completed"
    [run] = await rows(store, s.runs, run_id)
    assert run["status"] == RunStatus.COMPLETED
    assert run["closed_at"] is not None
    closed = [c for c in run_changes if c.key == run_id and c.outcome is not None]
    assert [c.outcome.status for c in closed if c.outcome] == ["completed"]


async def test_a_stale_lease_at_its_position_writes_nothing(store: Store) -> None:
    """Store invariant 2: a lease that is no longer current changes nothing, on either path."""
    run_id = await start(store)
    task = await claim_wf(store)
    stale = dataclasses.replace(task.lease, lease_token="00000000-0000-0000-0000-000000000000")
    before = await snapshot(store, run_id)

    with pytest.raises(StaleLease):
        await store.complete_workflow_task(
            lease=stale, commands=[schedule(1)], position=task.position
        )

    assert await snapshot(store, run_id) == before


async def test_a_run_that_moved_since_the_claim_is_completed_by_the_transaction(
    store: Store,
) -> None:
    """A position older than the run writes nothing itself; the transaction completes the task."""
    run_id = await start(store)
    task = await claim_wf(store)
    assert task.position is not None
    behind = dataclasses.replace(
        task.position,
        run=dataclasses.replace(task.position.run, last_event_seq=0),
    )

    await store.complete_workflow_task(lease=task.lease, commands=[schedule(1)], position=behind)

    events = await rows(store, s.history_events, run_id)
    assert [e["event_type"] for e in events] == ["WorkflowStarted", "ActivityScheduled"]
    assert [a["state"] for a in await rows(store, s.activity_tasks, run_id)] == ["ready"]


async def test_events_arriving_after_the_claim_make_the_next_task(
    store: Store, noticed: list[ReadyTask]
) -> None:
    """Store invariant 4: a signal that arrived while the task ran wakes a follow-up task."""
    run_id = await start(store)
    task = await claim_wf(store)
    await store.signal_workflow(
        namespace=task.run.namespace,
        workflow_id=task.run.workflow_id,
        signal_name="go",
        arguments=blob(1),
        signal_id="go-1",
    )

    outcome = await store.complete_workflow_task(
        lease=task.lease, commands=[], sticky_ttl=TTL, position=task.position
    )

    assert outcome.workflow_task_created
    [open_task] = [t for t in await rows(store, s.workflow_tasks, run_id) if t["state"] == "ready"]
    assert open_task["sticky_worker_id"] == "w1"  # S4: the new task inherits the binding
    assert [n.task_id for n in noticed if n.kind == "workflow"][-1] == str(open_task["task_id"])


async def test_a_timer_fires_at_the_database_time_of_the_completion_plus_its_delay(
    store: Store,
) -> None:
    """The claim's database clock plus the time since then stands for the completion's now."""
    run_id = await start(store)
    task = await claim_wf(store)
    assert task.position is not None

    await store.complete_workflow_task(
        lease=task.lease, commands=[timer(1, delay=60)], position=task.position
    )

    [row] = await rows(store, s.timers, run_id)
    fire_after_claim = row["fire_at"] - task.position.claimed_at
    assert timedelta(seconds=60) <= fire_after_claim < timedelta(seconds=70)


EAGER_COMMANDS: dict[str, list[dict[str, Any]]] = {
    "one activity": [schedule(1)],
    "two activities, one slot": [schedule(1), schedule(2), timer(3)],
    "a type the worker does not run": [schedule(1, activity_type="refund"), schedule(2)],
    "another queue": [schedule(1, queue="elsewhere")],
}


async def _eagerly_completed(
    store: Store, name: str, *, position: bool
) -> tuple[str, list[dict[str, Any]]]:
    """Complete with eager dispatch (one slot); the run and what was leased, without ids."""
    workflow_id = f"eager-{name}-{position}"
    run_id = await start(store, workflow_id=workflow_id)
    task = await claim_wf(store)
    outcome = await store.complete_workflow_task(
        lease=task.lease,
        commands=EAGER_COMMANDS[name],
        eager=claims.EagerClaim(flt=ACT, worker_id="w1", lease=LEASE, limit=1),
        position=task.position if position else None,
    )
    leased = []
    for attempt in outcome.eager_activities:
        fields = dataclasses.asdict(attempt)
        lease = fields.pop("lease")
        assert lease["lease_owner"] == "w1"
        assert lease["lease_expires_at"] - fields.pop("scheduled_at") == LEASE
        for key in ("activity_execution_id", "activity_attempt_id"):
            fields.pop(key)
        ours = fields["run_id"] == run_id and fields["workflow_id"] == workflow_id
        leased.append(fields | {"run_id": ours, "workflow_id": ours, "attempt": lease["attempt"]})
    return run_id, leased


async def _leases(store: Store, run_id: str) -> dict[str, Any]:
    """Activity rows as a claim leaves them, and the ActivityStarted events it queued."""
    inbox = await rows(store, s.inbox_events, run_id)
    return {
        "activities": sorted(
            (
                a["step_seq"],
                a["activity_type"],
                a["state"],
                a["lease_owner"],
                a["lease_token"] is not None,
                a["started_at"] is not None,
                a["claimed_at"] is not None,
                None if a["lease_expires_at"] is None else a["lease_expires_at"] - a["started_at"],
            )
            for a in await rows(store, s.activity_tasks, run_id)
        ),
        "started": sorted(
            (
                (e["idempotency_key"].split(":")[-2:], e["wakes_workflow"], _without_ids(e))
                for e in inbox
                if e["event_type"] == "ActivityStarted"
            ),
            key=lambda started: started[2]["sequence"],
        ),
    }


def _without_ids(event: dict[str, Any]) -> dict[str, Any]:
    unlike = ("activity_execution_id", "activity_attempt_id", "lease_expires_at", "started_at")
    return {key: value for key, value in event["payload"].items() if key not in unlike}


@pytest.mark.parametrize("name", list(EAGER_COMMANDS))
async def test_activities_leased_eagerly_at_the_position_are_leased_as_a_claim_leases_them(
    store: Store, name: str, noticed: list[ReadyTask], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Eager dispatch written by the completion's one statement: the same attempts leased (on
    the worker's queue and types, up to its slots), the same rows and ActivityStarted events as
    the transactional path's claim, and wakes only for the attempts left ready."""
    transactions = _transactions_counted(monkeypatch)

    noticed.clear()
    folded, folded_leased = await _eagerly_completed(store, name, position=True)
    folded_wakes = sorted(n.task_id for n in noticed if n.kind == "activity")
    assert not transactions
    noticed.clear()
    transactional, transactional_leased = await _eagerly_completed(store, name, position=False)
    transactional_wakes = sorted(n.task_id for n in noticed if n.kind == "activity")

    assert folded_leased == transactional_leased
    assert await durable_outcome(store, folded) == await durable_outcome(store, transactional)
    assert await _leases(store, folded) == await _leases(store, transactional)
    for run_id, wakes in ((folded, folded_wakes), (transactional, transactional_wakes)):
        ready_ids = [
            str(a["task_id"])
            for a in await rows(store, s.activity_tasks, run_id)
            if a["state"] == "ready"
        ]
        assert wakes == sorted(ready_ids)


async def test_a_session_activity_on_the_eager_queue_is_admitted_by_the_transaction(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """W6: an eagerly dispatched session attempt needs admission, which the claim decides."""
    transactions = _transactions_counted(monkeypatch)
    run_id = await start(store)
    task = await claim_wf(store)
    session = {"session_id": "s-1", "queue": QUEUE, "requirements": []}

    await store.complete_workflow_task(
        lease=task.lease,
        commands=[schedule(1, worker_session=session)],
        eager=claims.EagerClaim(flt=ACT, worker_id="w1", lease=LEASE),
        position=task.position,
    )

    assert transactions == [task.lease.task_id]
    assert [a["session_id"] for a in await rows(store, s.activity_tasks, run_id)] == ["s-1"]


async def _waiting_for_a_lock(store: Store) -> bool:
    async with store.engine.connect() as conn:
        waiting = await conn.execute(
            sa.text(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE datname = current_database() AND wait_event_type = 'Lock'"
            )
        )
        return bool(waiting.scalar_one())


async def test_a_signal_committed_while_the_completion_waits_for_the_run_is_followed_up(
    store: Store,
) -> None:
    """Store invariant 4: an event the completion's snapshot cannot see still gets its task.

    The signal's transaction holds the run when the completion's statement starts; the signal
    finds the task leased (so makes none), and the completion, once it has the run, cannot see
    the signal in the inbox. The flag the signal left on the leased task makes the next task.
    """
    run_id = await start(store)
    task = await claim_wf(store)
    async with store.transactions.begin() as conn:
        run = await runs.lock_run(conn, run_id=run_id)
        assert await signals.signal_run(
            Txn(conn), run=run, signal_name="go", arguments=blob(1), signal_id="go-1"
        )
        completing = asyncio.ensure_future(
            store.complete_workflow_task(
                lease=task.lease, commands=[schedule(1)], position=task.position
            )
        )
        await assert_eventually(lambda: _waiting_for_a_lock(store), message="blocked on the run")

    outcome = await completing

    assert outcome.workflow_task_created
    assert [t["state"] for t in await rows(store, s.workflow_tasks, run_id)].count("ready") == 1
    [pending] = [e for e in await rows(store, s.inbox_events, run_id) if not e["applied"]]
    assert pending["event_type"] == "SignalReceived"
