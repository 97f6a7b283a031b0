"""Once-only history on a real Postgres: D3 and store invariants 3-4."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa
import sqlalchemy.exc as sa_exc

from burrow.errors import PayloadTooLarge
from burrow.store import Store
from burrow.store import schema as s
from burrow.store.errors import (
    InvalidCommands,
    RunNotFound,
    RunNotRunning,
    StaleLease,
    WorkflowAlreadyStarted,
)
from burrow.store.models import RunStatus
from tests.support import store as shared
from tests.support.store import (
    LEASE,
    NS,
    QUEUE,
    WF,
    blob,
    claim_act,
    claim_wf,
    execute,
    open_workflow_tasks,
    rows,
    start,
    warm,
)

RUN_TABLES = (*shared.RUN_TABLES, s.signals)
STEP_EVENTS = {
    "ActivityScheduled",
    "ActivityStarted",
    "ActivityCompleted",
    "TimerScheduled",
    "TimerFired",
    "SideEffectRecorded",
    "VersionMarkerRecorded",
}


def schedule(seq: int, **options: Any) -> dict[str, Any]:
    return shared.schedule(seq, backoff_seconds=[0.1], **options)


def timer(seq: int, delay: float = 3600) -> dict[str, Any]:
    return {"type": "start_timer", "sequence": seq, "delay_seconds": delay}


def complete(value: int = 1) -> dict[str, Any]:
    return {"type": "complete_workflow", "result": blob(value)}


async def snapshot(store: Store, run_id: str) -> dict[str, list[dict[str, Any]]]:
    return await shared.snapshot(store, run_id, RUN_TABLES)


async def count(store: Store, table: sa.Table) -> int:
    async with store.engine.connect() as conn:
        return (await conn.execute(sa.select(sa.func.count()).select_from(table))).scalar_one()


async def event_types(store: Store, run_id: str) -> list[str]:
    return [e.event_type for e in await store.read_history(run_id=run_id)]


async def test_history_sequences_are_contiguous_from_one_and_steps_carry_their_number(
    store: Store,
) -> None:
    """D3, store invariant 3: events are numbered 1..n, WorkflowStarted first, steps 1-based."""
    run_id = await start(store)
    first = await claim_wf(store)
    await store.complete_workflow_task(
        lease=first.lease,
        commands=[
            schedule(1),
            timer(2),
            {"type": "record_side_effect", "sequence": 3, "result": blob(3)},
            {
                "type": "record_version_marker",
                "sequence": 4,
                "change_id": "change-a",
                "version": 1,
                "min_supported": 0,
                "max_supported": 1,
            },
        ],
    )
    act = await claim_act(store)
    await store.complete_activity_task(lease=act.lease, result=blob(10))
    assert await store.signal_workflow(
        namespace=NS, workflow_id="wf-1", signal_name="go", arguments=blob(), signal_id="s1"
    )
    await execute(store, "UPDATE timers SET fire_at = now() WHERE run_id = :r", r=run_id)
    assert (await store.sweep()).timers_fired == 1
    second = await claim_wf(store)
    await store.complete_workflow_task(lease=second.lease, commands=[timer(5), complete()])

    history = await store.read_history(run_id=run_id)
    assert [e.sequence for e in history] == list(range(1, len(history) + 1))
    assert history[0].event_type == "WorkflowStarted"
    assert history[0].payload["workflow_run_id"] == run_id
    assert second.history == history[: len(second.history)]
    steps = [(e.event_type, e.payload["sequence"]) for e in history if e.event_type in STEP_EVENTS]
    assert steps == [
        ("ActivityScheduled", 1),
        ("TimerScheduled", 2),
        ("SideEffectRecorded", 3),
        ("VersionMarkerRecorded", 4),
        ("ActivityStarted", 1),
        ("ActivityCompleted", 1),
        ("TimerFired", 2),
        ("TimerScheduled", 5),
    ]
    assert [e.event_type for e in history].count("SignalReceived") == 1
    assert history[-1].event_type == "WorkflowCompleted"
    run = await store.get_run(namespace=NS, workflow_id="wf-1")
    assert run.last_event_seq == len(history)
    assert run.status == RunStatus.COMPLETED


async def test_duplicate_workflow_task_completion_records_nothing_new(store: Store) -> None:
    """D3, store invariants 2-3: the same completion delivered twice is applied once."""
    run_id = await start(store)
    claimed = await claim_wf(store)
    commands = [schedule(1), timer(2)]
    await store.complete_workflow_task(lease=claimed.lease, commands=commands)
    before = await snapshot(store, run_id)

    with pytest.raises(StaleLease):
        await store.complete_workflow_task(lease=claimed.lease, commands=commands)

    assert await snapshot(store, run_id) == before
    assert await event_types(store, run_id) == [
        "WorkflowStarted",
        "ActivityScheduled",
        "TimerScheduled",
    ]
    assert len(before["activity_tasks"]) == 1
    assert len(before["timers"]) == 1


async def test_signal_sent_twice_with_the_same_id_is_recorded_once(store: Store) -> None:
    """D3, store invariant 3: a redelivered signal id records nothing new."""
    run_id = await start(store)

    first = await store.signal_workflow(
        namespace=NS, workflow_id="wf-1", signal_name="go", arguments=blob(1), signal_id="s1"
    )
    second = await store.signal_workflow(
        namespace=NS, workflow_id="wf-1", signal_name="go", arguments=blob(2), signal_id="s1"
    )
    other = await store.signal_workflow(
        namespace=NS, workflow_id="wf-1", signal_name="go", arguments=blob(3), signal_id="s2"
    )

    assert (first, second, other) == (True, False, True)
    signals = await rows(store, s.signals, run_id)
    assert [(r["signal_id"], r["arguments"]) for r in signals] == [("s1", blob(1)), ("s2", blob(3))]
    inbox = await rows(store, s.inbox_events, run_id)
    assert [e["payload"]["signal_id"] for e in inbox] == ["s1", "s2"]
    assert len(await open_workflow_tasks(store, run_id)) == 1

    history = (await claim_wf(store)).history
    received = [e.payload for e in history if e.event_type == "SignalReceived"]
    assert [(p["signal_id"], p["arguments"]) for p in received] == [
        ("s1", blob(1)),
        ("s2", blob(3)),
    ]
    assert await store.read_history(run_id=run_id) == history


async def test_duplicate_signal_after_it_reached_history_is_still_refused(store: Store) -> None:
    """D3: once a signal id is in history, sending it again adds no inbox event or task."""
    run_id = await start(store)
    assert await store.signal_workflow(
        namespace=NS, workflow_id="wf-1", signal_name="go", arguments=blob(), signal_id="s1"
    )
    task = await claim_wf(store)
    await store.complete_workflow_task(lease=task.lease, commands=[])
    before = await snapshot(store, run_id)

    again = await store.signal_workflow(
        namespace=NS, workflow_id="wf-1", signal_name="go", arguments=blob(), signal_id="s1"
    )

    assert again is False
    assert await snapshot(store, run_id) == before
    assert await open_workflow_tasks(store, run_id) == []
    assert (await event_types(store, run_id)).count("SignalReceived") == 1


async def test_a_resent_signal_id_is_a_duplicate_after_the_run_closed(store: Store) -> None:
    """D3: a sender retrying a delivered signal after the run completed is told "duplicate";
    a new signal id on the closed run is still refused, and neither writes anything."""
    run_id = await start(store)
    assert await store.signal_workflow(
        namespace=NS, workflow_id="wf-1", signal_name="go", arguments=blob(), signal_id="s1"
    )
    task = await claim_wf(store)
    await store.complete_workflow_task(lease=task.lease, commands=[complete()])
    before = await snapshot(store, run_id)

    again = await store.signal_workflow(
        namespace=NS, workflow_id="wf-1", signal_name="go", arguments=blob(), signal_id="s1"
    )
    with pytest.raises(RunNotRunning):
        await store.signal_workflow(
            namespace=NS, workflow_id="wf-1", signal_name="go", arguments=blob(), signal_id="s2"
        )

    assert again is False
    assert await snapshot(store, run_id) == before


async def test_at_most_one_open_workflow_task_when_activity_signal_and_timer_fire_together(
    store: Store, database_url: str
) -> None:
    """Store invariant 4, D3: concurrent wake-ups coalesce into one open workflow task per run."""
    workflow_ids = [f"wf-{i}" for i in range(5)]
    run_ids: list[str] = []
    leases = []
    for workflow_id in workflow_ids:
        run_id = await start(store, workflow_id)
        task = await claim_wf(store)
        assert task.lease.run_id == run_id
        await store.complete_workflow_task(lease=task.lease, commands=[schedule(1), timer(2)])
        leases.append((await claim_act(store)).lease)
        run_ids.append(run_id)
    for run_id in run_ids:
        assert await open_workflow_tasks(store, run_id) == []
    await execute(store, "UPDATE timers SET fire_at = now() - interval '1 second'")

    stores = [Store.connect(database_url, pool_size=2) for _ in range(3)]
    completer, signaller, sweeper = stores
    try:
        await asyncio.gather(*(warm(other) for other in stores))
        await asyncio.gather(
            *(completer.complete_activity_task(lease=lease, result=blob(9)) for lease in leases),
            *(
                signaller.signal_workflow(
                    namespace=NS,
                    workflow_id=workflow_id,
                    signal_name="go",
                    arguments=blob(),
                    signal_id="s1",
                )
                for workflow_id in workflow_ids
            ),
            sweeper.sweep(),
            sweeper.sweep(),
            store.sweep(),
        )
    finally:
        await asyncio.gather(*(other.close() for other in stores))

    assert all(t["state"] == "fired" for t in await rows(store, s.timers))
    for run_id in run_ids:
        [open_task] = await open_workflow_tasks(store, run_id)
        assert open_task["state"] == "ready"
    claimed = [await claim_wf(store) for _ in run_ids]
    assert await store.claim_workflow_task(flt=WF, worker_id="w1", lease=LEASE) is None
    assert sorted(c.lease.run_id for c in claimed) == sorted(run_ids)
    for task in claimed:
        kinds = [e.event_type for e in task.history]
        for kind in ("ActivityCompleted", "SignalReceived", "TimerFired"):
            assert kinds.count(kind) == 1, (kind, kinds)
        assert [e.sequence for e in task.history] == list(range(1, len(kinds) + 1))


async def test_database_refuses_a_second_open_workflow_task_for_a_run(store: Store) -> None:
    """Store invariant 4: the partial unique index holds even for a direct insert."""
    run_id = await start(store)

    with pytest.raises(sa_exc.IntegrityError):
        await execute(
            store,
            "INSERT INTO workflow_tasks (task_id, run_id, workflow_type, namespace, queue)"
            " VALUES (gen_random_uuid(), :r, 'Flow', :ns, :q)",
            r=run_id,
            ns=NS,
            q=QUEUE,
        )

    assert len(await open_workflow_tasks(store, run_id)) == 1


async def test_events_arriving_during_a_leased_task_join_history_after_its_commands(
    store: Store,
) -> None:
    """D1, D3, store invariant 3: inbox events wait for the next claim, after the task's events."""
    run_id = await start(store)
    first = await claim_wf(store)
    await store.complete_workflow_task(lease=first.lease, commands=[schedule(1)])
    act = await claim_act(store)
    await store.complete_activity_task(lease=act.lease, result=blob(5))
    running = await claim_wf(store)
    assert [e.event_type for e in running.history][-2:] == ["ActivityStarted", "ActivityCompleted"]

    assert await store.signal_workflow(
        namespace=NS, workflow_id="wf-1", signal_name="go", arguments=blob(), signal_id="s1"
    )
    assert "SignalReceived" not in await event_types(store, run_id)
    [only] = await open_workflow_tasks(store, run_id)
    assert only["task_id"] == running.lease.task_id

    outcome = await store.complete_workflow_task(lease=running.lease, commands=[timer(2)])

    assert outcome.workflow_task_created is True
    assert "SignalReceived" not in await event_types(store, run_id)
    follow_up = await claim_wf(store)
    assert follow_up.lease.task_id != running.lease.task_id
    history = follow_up.history
    assert [e.event_type for e in history] == [
        "WorkflowStarted",
        "ActivityScheduled",
        "ActivityStarted",
        "ActivityCompleted",
        "TimerScheduled",
        "SignalReceived",
    ]
    assert history[4].workflow_task_id == running.lease.task_id
    assert history[5].workflow_task_id == follow_up.lease.task_id
    assert [e.sequence for e in history] == [1, 2, 3, 4, 5, 6]


INVALID_BATCHES = {
    "skips-a-step": [schedule(1), timer(3)],
    "repeats-a-step": [schedule(1), timer(1)],
    "starts-at-zero": [timer(0)],
    "starts-at-two": [schedule(2)],
    "terminal-not-last": [complete(), schedule(1)],
    "unknown-type": [schedule(1), {"type": "launch_missiles"}],
}


@pytest.mark.parametrize("commands", list(INVALID_BATCHES.values()), ids=list(INVALID_BATCHES))
async def test_completion_with_invalid_step_numbers_raises_and_writes_nothing(
    store: Store, commands: list[dict[str, Any]]
) -> None:
    """D3, store invariant 3: a batch whose steps skip or repeat is refused as a whole."""
    run_id = await start(store)
    claimed = await claim_wf(store)
    before = await snapshot(store, run_id)

    with pytest.raises(InvalidCommands):
        await store.complete_workflow_task(lease=claimed.lease, commands=commands)

    assert await snapshot(store, run_id) == before
    # Nothing was written, so the lease is still current and a valid batch applies.
    await store.complete_workflow_task(lease=claimed.lease, commands=[schedule(1)])
    assert await event_types(store, run_id) == ["WorkflowStarted", "ActivityScheduled"]


async def test_step_numbers_continue_from_the_runs_last_step(store: Store) -> None:
    """D3: a later task's steps continue after the run's last recorded step, never restart."""
    run_id = await start(store)
    first = await claim_wf(store)
    await store.complete_workflow_task(lease=first.lease, commands=[schedule(1), timer(2, 0.0)])
    await store.sweep()
    second = await claim_wf(store)
    before = await snapshot(store, run_id)

    with pytest.raises(InvalidCommands):
        await store.complete_workflow_task(lease=second.lease, commands=[timer(1)])
    with pytest.raises(InvalidCommands):
        await store.complete_workflow_task(lease=second.lease, commands=[timer(2)])
    assert await snapshot(store, run_id) == before

    await store.complete_workflow_task(lease=second.lease, commands=[timer(3)])
    history = await store.read_history(run_id=run_id)
    scheduled = [e.payload["sequence"] for e in history if e.event_type == "TimerScheduled"]
    assert scheduled == [2, 3]


async def test_terminate_closes_the_run_cancels_open_work_and_refuses_later_signals(
    store: Store,
) -> None:
    """D3, M6: terminate closes the run, cancels its tasks and timers; signals then fail."""
    run_id = await start(store)
    first = await claim_wf(store)
    await store.complete_workflow_task(lease=first.lease, commands=[schedule(1), timer(2)])
    act = await claim_act(store)
    assert await store.signal_workflow(
        namespace=NS, workflow_id="wf-1", signal_name="go", arguments=blob(), signal_id="s1"
    )
    running = await claim_wf(store)

    await store.terminate_workflow(namespace=NS, workflow_id="wf-1", reason="operator")

    run = await store.get_run(namespace=NS, workflow_id="wf-1")
    assert run.status == RunStatus.TERMINATED
    assert run.closed_at is not None
    history = await store.read_history(run_id=run_id)
    assert history[-1].event_type == "WorkflowTerminated"
    assert history[-1].payload["reason"] == "operator"
    assert run.last_event_seq == len(history)
    assert await open_workflow_tasks(store, run_id) == []
    [timer_row] = await rows(store, s.timers, run_id)
    assert timer_row["state"] == "cancelled"
    [act_row] = await rows(store, s.activity_tasks, run_id)
    assert act_row["cancel_requested"] is True
    beat = await store.heartbeat_activity_task(
        lease=act.lease, details=None, lease_duration=timedelta(seconds=30)
    )
    assert beat.cancel_requested is True

    with pytest.raises(StaleLease):
        await store.complete_workflow_task(lease=running.lease, commands=[timer(3)])
    with pytest.raises(RunNotRunning):
        await store.signal_workflow(
            namespace=NS, workflow_id="wf-1", signal_name="go", arguments=blob(), signal_id="s2"
        )
    with pytest.raises(RunNotRunning):
        await store.cancel_workflow(namespace=NS, workflow_id="wf-1")
    with pytest.raises(RunNotRunning):
        await store.terminate_workflow(namespace=NS, workflow_id="wf-1")

    # A late activity result and a sweep add nothing to a closed run.
    await store.complete_activity_task(lease=act.lease, result=blob())
    await execute(store, "UPDATE timers SET fire_at = now() - interval '1 second'")
    await store.sweep()
    assert await store.read_history(run_id=run_id) == history
    assert await open_workflow_tasks(store, run_id) == []
    assert await store.claim_workflow_task(flt=WF, worker_id="w1", lease=LEASE) is None
    assert "s2" not in [r["signal_id"] for r in await rows(store, s.signals, run_id)]


async def test_lookups_in_the_wrong_namespace_raise_run_not_found(store: Store) -> None:
    """M7: a run is invisible from another namespace (tenant isolation)."""
    run_id = await start(store)
    before = await snapshot(store, run_id)
    other = "other"

    with pytest.raises(RunNotFound):
        await store.get_run(namespace=other, workflow_id="wf-1")
    with pytest.raises(RunNotFound):
        await store.get_run(namespace=other, workflow_id="wf-1", run_id=run_id)
    with pytest.raises(RunNotFound):
        await store.describe_workflow(namespace=other, workflow_id="wf-1")
    with pytest.raises(RunNotFound):
        await store.signal_workflow(
            namespace=other, workflow_id="wf-1", signal_name="go", arguments=blob(), signal_id="s"
        )
    with pytest.raises(RunNotFound):
        await store.cancel_workflow(namespace=other, workflow_id="wf-1")
    with pytest.raises(RunNotFound):
        await store.terminate_workflow(namespace=other, workflow_id="wf-1")
    with pytest.raises(RunNotFound):
        await store.get_run(namespace=NS, workflow_id="no-such-workflow")

    assert await snapshot(store, run_id) == before
    assert (await store.get_run(namespace=NS, workflow_id="wf-1")).run_id == run_id


async def test_start_with_a_running_workflow_id_raises_already_started(store: Store) -> None:
    """D3, M7: one running run per workflow id and namespace; closing frees the id."""
    run_id = await start(store)

    with pytest.raises(WorkflowAlreadyStarted):
        await start(store)

    assert [r["run_id"] for r in await rows(store, s.runs)] == [run_id]
    assert len(await rows(store, s.history_events)) == 1
    assert len(await rows(store, s.workflow_tasks)) == 1

    other_namespace = await start(store, namespace="tenant-b")
    assert other_namespace != run_id

    task = await claim_wf(store)
    await store.complete_workflow_task(lease=task.lease, commands=[complete()])
    rerun = await start(store)
    assert rerun != run_id
    assert (await store.get_run(namespace=NS, workflow_id="wf-1")).run_id == rerun
    assert await count(store, s.runs) == 3


async def test_oversized_payloads_raise_payload_too_large_and_write_nothing(store: Store) -> None:
    """D3, C2: a payload over `max_payload_bytes` is refused before anything is written."""
    huge = {"codec": "avro", "blob": "A" * (store.max_payload_bytes + 1)}

    with pytest.raises(PayloadTooLarge):
        await store.start_workflow(
            namespace=NS, workflow_id="wf-big", workflow_type="Flow", task_queue=QUEUE, input=huge
        )
    assert await count(store, s.runs) == 0
    assert await count(store, s.history_events) == 0
    assert await count(store, s.workflow_tasks) == 0

    run_id = await start(store)
    claimed = await claim_wf(store)
    before = await snapshot(store, run_id)
    with pytest.raises(PayloadTooLarge):
        await store.complete_workflow_task(
            lease=claimed.lease, commands=[schedule(1, arguments=huge)]
        )
    with pytest.raises(PayloadTooLarge):
        await store.complete_workflow_task(
            lease=claimed.lease, commands=[{"type": "complete_workflow", "result": huge}]
        )
    with pytest.raises(PayloadTooLarge):
        await store.signal_workflow(
            namespace=NS, workflow_id="wf-1", signal_name="go", arguments=huge, signal_id="s1"
        )
    assert await snapshot(store, run_id) == before

    await store.complete_workflow_task(lease=claimed.lease, commands=[schedule(1)])
    act = await claim_act(store)
    before = await snapshot(store, run_id)
    with pytest.raises(PayloadTooLarge):
        await store.complete_activity_task(lease=act.lease, result=huge)
    with pytest.raises(PayloadTooLarge):
        await store.heartbeat_activity_task(
            lease=act.lease, details=huge, lease_duration=timedelta(seconds=30)
        )
    assert await snapshot(store, run_id) == before
    assert await count(store, s.runs) == 1


async def test_timer_started_and_cancelled_in_one_task_is_recorded_as_cancelled(
    store: Store,
) -> None:
    """D3: a timer cancelled by the task that started it never fires (no pending row)."""
    run_id = await start(store)
    claimed = await claim_wf(store)
    await store.complete_workflow_task(
        lease=claimed.lease,
        commands=[timer(1, 0.0), {"type": "cancel_timer", "sequence": 1}, timer(2)],
    )
    history = await store.read_history(run_id=run_id)
    assert [(e.event_type, e.payload.get("sequence")) for e in history[1:]] == [
        ("TimerScheduled", 1),
        ("TimerCancelled", 1),
        ("TimerScheduled", 2),
    ]
    assert [r["step_seq"] for r in await rows(store, s.timers, run_id)] == [2]
    assert (await store.sweep()).timers_fired == 0
