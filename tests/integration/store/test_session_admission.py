"""Worker sessions in the store: admission, limits under concurrent claims, lease lifecycle (W)."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest
from structlog.testing import capture_logs

from burrow.protocol import events
from burrow.protocol.shapes import Failure, SessionSpec
from burrow.store import Store
from burrow.store import errors as store_errors
from burrow.store import schema as s
from burrow.store.models import (
    ClaimedActivityTask,
    SessionFailureReason,
    SessionOutcome,
    SessionRefusal,
    SessionState,
)
from burrow.store.ready import ReadyTask
from tests.support.store import (
    ACT,
    LEASE,
    NS,
    QUEUE,
    blob,
    claim_wf,
    execute,
    rows,
    schedule,
    start,
    warm,
)

GPU = "gpu:nvidia-l4"


def session(session_id: str = "gpu-render", **options: Any) -> dict[str, Any]:
    """The `worker_session` object of a schedule_activity command (W4)."""
    return {
        "session_id": session_id,
        "queue": QUEUE,
        "requirements": [GPU],
        "lease_seconds": 120,
        "ttl_seconds": 1800,
        "max_concurrent_activities": 1,
        **options,
    }


async def register(
    store: Store, worker_id: str, *, capabilities: tuple[str, ...] = (GPU,), max_sessions: int = 10
) -> None:
    await store.register_worker(
        worker_id=worker_id,
        namespace=NS,
        task_queue=QUEUE,
        workflow_types=["Flow"],
        activity_types=["charge"],
        concurrency=8,
        capabilities=capabilities,
        max_concurrent_worker_sessions=max_sessions,
    )


async def schedule_in_sessions(
    store: Store, sessions: list[dict[str, Any]], workflow_id: str = "wf-1"
) -> str:
    """A run whose first workflow task scheduled one session activity per `sessions` entry."""
    run_id = await start(store, workflow_id)
    task = await claim_wf(store)
    commands = [schedule(i + 1, worker_session=ws) for i, ws in enumerate(sessions)]
    await store.complete_workflow_task(lease=task.lease, commands=commands)
    return run_id


async def claim(store: Store, worker_id: str, limit: int = 1) -> list[ClaimedActivityTask]:
    return await store.claim_activity_tasks(flt=ACT, worker_id=worker_id, lease=LEASE, limit=limit)


async def session_row(store: Store, session_id: str = "gpu-render") -> dict[str, Any]:
    [row] = [r for r in await rows(store, s.worker_sessions) if r["session_id"] == session_id]
    return row


async def activity_rows(store: Store, run_id: str) -> list[dict[str, Any]]:
    return await rows(store, s.activity_tasks, run_id)


async def test_w3_only_a_worker_with_the_capability_is_admitted_and_creates_the_session(
    store: Store,
) -> None:
    await register(store, "cpu", capabilities=())
    await register(store, "gpu")
    run_id = await schedule_in_sessions(store, [session()])
    [task_row] = await activity_rows(store, run_id)
    assert task_row["session_id"] == "gpu-render"
    assert task_row["worker_session"]["requirements"] == [GPU]

    assert await claim(store, "cpu", limit=4) == []
    why = await store.explain_session_admission(task_id=task_row["task_id"], worker_id="cpu")
    assert why.reason == SessionRefusal.SESSION_REQUIREMENTS_NOT_MET
    assert why.missing_requirements == [GPU]
    assert await rows(store, s.worker_sessions) == []  # explaining takes nothing
    await store.register_worker(
        worker_id="gpu-elsewhere",
        namespace=NS,
        task_queue="other-queue",
        workflow_types=[],
        activity_types=["charge"],
        concurrency=1,
        capabilities=[GPU],
    )
    routed = await store.explain_session_admission(
        task_id=task_row["task_id"], worker_id="gpu-elsewhere"
    )
    assert routed.reason == SessionRefusal.SESSION_QUEUE_MISMATCH

    [claimed] = await claim(store, "gpu")
    assert claimed.worker_session is not None
    assert claimed.worker_session.state == SessionState.ACTIVE
    assert claimed.worker_session.lease_owner == "gpu"
    row = await session_row(store)
    assert (row["state"], row["owner_worker_id"], row["requirements"]) == ("active", "gpu", [GPU])


async def test_w4_the_snapshot_is_recorded_in_activity_options(store: Store) -> None:
    await register(store, "gpu")
    run_id = await schedule_in_sessions(store, [session(lease_seconds=60)])
    history = await store.read_history(run_id=run_id)
    [scheduled] = [e.event for e in history if isinstance(e.event, events.ActivityScheduled)]
    assert scheduled.activity.worker_session == SessionSpec(
        session_id="gpu-render", queue=QUEUE, requirements=[GPU], lease_seconds=60
    )


async def test_w4_a_malformed_session_snapshot_is_refused_and_writes_nothing(
    store: Store,
) -> None:
    run_id = await start(store)
    task = await claim_wf(store)
    with pytest.raises(store_errors.InvalidCommands):
        await store.complete_workflow_task(
            lease=task.lease, commands=[schedule(1, worker_session={"session_id": ""})]
        )
    assert await activity_rows(store, run_id) == []


async def test_w6_max_concurrent_activities_holds_under_concurrent_polls(store: Store) -> None:
    await register(store, "gpu")
    run_id = await schedule_in_sessions(store, [session()] * 4)
    await warm(store)
    batches = await asyncio.gather(*(claim(store, "gpu", limit=2) for _ in range(6)))
    leased = [task for batch in batches for task in batch]
    assert len(leased) == 1
    states = sorted(r["state"] for r in await activity_rows(store, run_id))
    assert states == ["leased", "ready", "ready", "ready"]

    # The attempt ends: the next one of the session is admitted to the same owner (reused).
    await store.complete_activity_task(lease=leased[0].lease, result=blob(1))
    [after] = await claim(store, "gpu", limit=4)
    assert after.worker_session is not None and after.worker_session.lease_owner == "gpu"


async def test_w6_max_concurrent_worker_sessions_holds_under_concurrent_polls(
    store: Store,
) -> None:
    await register(store, "gpu", max_sessions=2)
    run_id = await schedule_in_sessions(store, [session(f"s-{i}") for i in range(5)])
    await warm(store)
    batches = await asyncio.gather(*(claim(store, "gpu", limit=1) for _ in range(5)))
    leased = [task for batch in batches for task in batch]
    assert len(leased) == 2
    held = [r for r in await rows(store, s.worker_sessions) if r["state"] == "active"]
    assert len(held) == 2 and {r["owner_worker_id"] for r in held} == {"gpu"}
    waiting = [r for r in await activity_rows(store, run_id) if r["state"] == "ready"]
    why = await store.explain_session_admission(task_id=waiting[0]["task_id"], worker_id="gpu")
    assert why.reason == SessionRefusal.WORKER_SESSION_LIMIT_EXCEEDED
    assert why.max_concurrent_worker_sessions == 2


async def test_w1_racing_workers_never_share_a_session(store: Store) -> None:
    for worker in ("gpu-a", "gpu-b", "gpu-c"):
        await register(store, worker)
    run_id = await schedule_in_sessions(store, [session(max_concurrent_activities=3)] * 3)
    await warm(store)
    batches = await asyncio.gather(
        *(claim(store, worker, limit=1) for worker in ("gpu-a", "gpu-b", "gpu-c") * 2)
    )
    owners = {task.lease.lease_owner for batch in batches for task in batch}
    row = await session_row(store)
    assert owners == {row["owner_worker_id"]}
    leased = [r for r in await activity_rows(store, run_id) if r["state"] == "leased"]
    assert {r["lease_owner"] for r in leased} == owners


async def test_w5_explicit_create_heartbeat_and_close(store: Store) -> None:
    await register(store, "gpu")
    await register(store, "gpu-2")
    options = SessionSpec(session_id="explicit", queue=QUEUE, requirements=[GPU])

    created = await store.create_worker_session(worker_id="gpu", namespace=NS, options=options)
    assert (created.admitted, created.outcome) == (True, SessionOutcome.CREATED)
    again = await store.create_worker_session(worker_id="gpu", namespace=NS, options=options)
    assert again.outcome == SessionOutcome.REUSED
    other = await store.create_worker_session(worker_id="gpu-2", namespace=NS, options=options)
    assert other.reason == SessionRefusal.SESSION_OWNED_BY_ANOTHER_WORKER

    before = (await session_row(store, "explicit"))["lease_expires_at"]
    beat = await store.heartbeat_worker_session(
        worker_id="gpu", namespace=NS, session_id="explicit"
    )
    assert beat.outcome == SessionOutcome.HEARTBEAT_RECORDED
    assert (await session_row(store, "explicit"))["lease_expires_at"] > before
    short = await store.heartbeat_worker_session(
        worker_id="gpu", namespace=NS, session_id="explicit", lease_seconds=5
    )
    assert short.session is not None and short.session.last_heartbeat_at is not None
    renewed_for = short.session.lease_expires_at - short.session.last_heartbeat_at
    assert renewed_for == timedelta(seconds=5)
    with pytest.raises(ValueError, match="lease_seconds"):
        await store.heartbeat_worker_session(
            worker_id="gpu", namespace=NS, session_id="explicit", lease_seconds=0
        )
    stranger = await store.heartbeat_worker_session(
        worker_id="gpu-2", namespace=NS, session_id="explicit"
    )
    assert stranger.reason == SessionRefusal.SESSION_OWNER_MISMATCH
    missing = await store.heartbeat_worker_session(worker_id="gpu", namespace=NS, session_id="nope")
    assert missing.reason == SessionRefusal.SESSION_NOT_FOUND

    closed = await store.close_worker_session(worker_id="gpu", namespace=NS, session_id="explicit")
    assert closed.outcome == SessionOutcome.CLOSED
    assert closed.session is not None and closed.session.close_reason == "worker_shutdown"
    twice = await store.close_worker_session(worker_id="gpu", namespace=NS, session_id="explicit")
    assert twice.outcome == SessionOutcome.ALREADY_CLOSED
    # Close is terminal for that id (W5).
    reopened = await store.create_worker_session(worker_id="gpu", namespace=NS, options=options)
    assert reopened.reason == SessionRefusal.SESSION_CLOSED


async def test_w3_explicit_create_checks_registration_queue_and_requirements(
    store: Store,
) -> None:
    await register(store, "cpu", capabilities=())
    options = SessionSpec(session_id="x", requirements=[GPU])
    unknown = await store.create_worker_session(worker_id="ghost", namespace=NS, options=options)
    assert unknown.reason == SessionRefusal.WORKER_NOT_REGISTERED
    lacking = await store.create_worker_session(worker_id="cpu", namespace=NS, options=options)
    assert lacking.reason == SessionRefusal.SESSION_REQUIREMENTS_NOT_MET
    elsewhere = SessionSpec(session_id="x", queue="other-queue")
    wrong = await store.create_worker_session(worker_id="cpu", namespace=NS, options=elsewhere)
    assert wrong.reason == SessionRefusal.SESSION_QUEUE_MISMATCH
    absent = SessionSpec(session_id="x", create_if_missing=False)
    none = await store.create_worker_session(worker_id="cpu", namespace=NS, options=absent)
    assert none.reason == SessionRefusal.SESSION_MISSING
    assert await rows(store, s.worker_sessions) == []


async def test_w1_an_activity_heartbeat_renews_the_session_lease(store: Store) -> None:
    await register(store, "gpu")
    await schedule_in_sessions(store, [session()])
    [task] = await claim(store, "gpu")
    await execute(
        store, "UPDATE worker_sessions SET lease_expires_at = now() + interval '1 second'"
    )
    beat = await store.heartbeat_activity_task(lease=task.lease, details=None, lease_duration=LEASE)
    assert beat.can_continue and beat.worker_session is not None
    assert beat.worker_session.lease_expires_at - beat.lease_expires_at > timedelta(seconds=60)


async def test_w1_the_lease_keeper_renews_the_sessions_of_held_attempts(store: Store) -> None:
    await register(store, "gpu")
    await schedule_in_sessions(store, [session()])
    [task] = await claim(store, "gpu")
    await execute(
        store, "UPDATE worker_sessions SET lease_expires_at = now() + interval '1 second'"
    )
    renewal = await store.renew_leases(workflow=[], activity=[task.lease], lease=LEASE)
    assert renewal.activity == {task.lease.task_id}
    row = await session_row(store)
    assert row["lease_expires_at"] - row["last_heartbeat_at"] > timedelta(seconds=60)


async def test_w8_cancellation_reaches_a_session_attempt_through_its_heartbeat(
    store: Store,
) -> None:
    await register(store, "gpu")
    await schedule_in_sessions(store, [session()])
    [task] = await claim(store, "gpu")
    await store.cancel_workflow(namespace=NS, workflow_id="wf-1")
    beat = await store.heartbeat_activity_task(lease=task.lease, details=None, lease_duration=LEASE)
    assert beat.cancel_requested and beat.can_continue
    assert beat.worker_session is not None and beat.worker_session.state == SessionState.ACTIVE


async def test_w5_lease_lapse_expires_the_session_and_another_capable_worker_reacquires(
    store: Store,
) -> None:
    await register(store, "gpu-a")
    await register(store, "gpu-b")
    run_id = await schedule_in_sessions(store, [session()])
    [first] = await claim(store, "gpu-a")
    assert await claim(store, "gpu-b") == []
    # The holder goes silent: the attempt's lease and the session's lease both lapse.
    await execute(
        store,
        "UPDATE activity_tasks SET lease_expires_at = now() - interval '1 second'"
        " WHERE state = 'leased'",
    )
    await execute(
        store, "UPDATE worker_sessions SET lease_expires_at = now() - interval '1 second'"
    )
    await store.sweep()
    row = await session_row(store)
    assert (row["state"], row["failure_reason"]) == ("expired", "lease_expired")
    listed, counts = await store.list_worker_sessions(namespace=NS)
    assert [info.state for info in listed] == [SessionState.EXPIRED] and counts.expired == 1

    [retry] = await claim(store, "gpu-b")
    assert retry.attempt_number == 2
    assert retry.worker_session is not None and retry.worker_session.lease_owner == "gpu-b"
    row = await session_row(store)
    assert (row["state"], row["owner_worker_id"], row["reacquire_count"]) == ("active", "gpu-b", 1)
    # W7: the old holder's completion names a lease that is no longer current.
    with pytest.raises(store_errors.StaleLease):
        await store.complete_activity_task(lease=first.lease, result=blob(9))
    beat = await store.heartbeat_activity_task(
        lease=retry.lease, details=None, lease_duration=LEASE
    )
    assert beat.can_continue
    assert [r["state"] for r in await activity_rows(store, run_id)] == ["leased"]


async def test_w5_a_stale_holder_registration_orphans_the_session(store: Store) -> None:
    await register(store, "gpu-a")
    await register(store, "gpu-b")
    await schedule_in_sessions(store, [session()])
    await claim(store, "gpu-a")
    await execute(
        store,
        "UPDATE worker_registrations SET heartbeat_at = now() - interval '1 hour'"
        " WHERE worker_id = 'gpu-a'",
    )
    await store.sweep()
    row = await session_row(store)
    assert (row["state"], row["failure_reason"]) == ("orphaned", "worker_heartbeat_stale")
    info = await store.get_worker_session(namespace=NS, session_id="gpu-render")
    assert info is not None and info.holder is not None and info.holder.is_stale
    assert info.active_activity_count == 1
    _, counts = await store.list_worker_sessions(namespace=NS)
    assert counts.orphaned == 1 and counts.total == 1


async def _stranded_failure(store: Store, run_id: str, task_id: str) -> dict[str, Any]:
    """After a sweep: the waiting attempt failed for good, its ActivityFailed on the way."""
    result = await store.sweep()
    assert result.stranded_session_activities == 1
    [task] = [r for r in await activity_rows(store, run_id) if r["task_id"] == task_id]
    assert task["state"] == "failed"
    [failed] = [
        r["payload"]
        for r in await rows(store, s.inbox_events, run_id)
        if r["event_type"] == "ActivityFailed"
    ]
    assert failed["exception_type"] == "WorkerSessionClosed" and failed["non_retryable"]
    return failed


async def test_w5_sessions_that_may_not_be_reacquired_fail_for_good(store: Store) -> None:
    await register(store, "gpu-a")
    await register(store, "gpu-b")
    run_id = await schedule_in_sessions(store, [session(allow_reacquire_after_failure=False)] * 2)
    [first] = await claim(store, "gpu-a")
    await store.complete_activity_task(lease=first.lease, result=blob(1))
    await execute(
        store, "UPDATE worker_sessions SET lease_expires_at = now() - interval '1 second'"
    )
    # The claim refreshes the session first (PROTOCOL.md 12): lease lapsed, no reacquiring.
    assert await claim(store, "gpu-b") == []
    row = await session_row(store)
    assert (row["state"], row["failure_reason"]) == ("failed", "lease_expired")
    [waiting] = [r for r in await activity_rows(store, run_id) if r["state"] == "ready"]
    why = await store.explain_session_admission(task_id=waiting["task_id"], worker_id="gpu-a")
    assert why.reason == SessionRefusal.SESSION_REACQUIRE_DISALLOWED
    failed = await _stranded_failure(store, run_id, waiting["task_id"])
    assert "failed (lease_expired)" in failed["message"]


async def test_w5_ttl_expiry_is_terminal(store: Store) -> None:
    await register(store, "gpu")
    run_id = await schedule_in_sessions(store, [session()] * 2)
    [first] = await claim(store, "gpu")
    await store.complete_activity_task(lease=first.lease, result=blob(1))
    await execute(store, "UPDATE worker_sessions SET ttl_expires_at = now() - interval '1 second'")
    assert await claim(store, "gpu") == []
    row = await session_row(store)
    assert (row["state"], row["failure_reason"]) == ("expired", "ttl_expired")
    [waiting] = [r for r in await activity_rows(store, run_id) if r["state"] == "ready"]
    why = await store.explain_session_admission(task_id=waiting["task_id"], worker_id="gpu")
    assert why.reason == SessionRefusal.SESSION_CLOSED
    assert why.session is not None
    assert why.session.failure_reason == SessionFailureReason.TTL_EXPIRED
    await _stranded_failure(store, run_id, waiting["task_id"])


async def test_w5_the_repair_pass_expires_by_ttl_too(store: Store) -> None:
    await register(store, "gpu")
    await schedule_in_sessions(store, [session()])
    await claim(store, "gpu")
    await execute(store, "UPDATE worker_sessions SET ttl_expires_at = now() - interval '1 second'")
    result = await store.sweep()
    assert result.ended_sessions == 1
    row = await session_row(store)
    assert (row["state"], row["failure_reason"]) == ("expired", "ttl_expired")


async def test_w5_waiting_attempts_of_a_closed_session_fail_instead_of_waiting_forever(
    store: Store,
) -> None:
    await register(store, "gpu")
    run_id = await schedule_in_sessions(store, [session()] * 2)
    [first] = await claim(store, "gpu")
    await store.close_worker_session(worker_id="gpu", namespace=NS, session_id="gpu-render")
    [waiting] = [r for r in await activity_rows(store, run_id) if r["state"] == "ready"]
    failed = await _stranded_failure(store, run_id, waiting["task_id"])
    assert "closed (worker_shutdown)" in failed["message"]
    # The attempt already running keeps its own lease (W7).
    await store.complete_activity_task(lease=first.lease, result=blob(1))


async def test_w5_w8_a_draining_worker_hands_over_or_closes_its_sessions(store: Store) -> None:
    """W5: reacquirable sessions are orphaned for another worker; the others are closed."""
    await register(store, "gpu")
    await schedule_in_sessions(
        store, [session("a"), session("b", allow_reacquire_after_failure=False)]
    )
    claimed = await claim(store, "gpu", limit=2)
    assert len(claimed) == 2
    await store.drain_worker(worker_id="gpu")
    states = {
        r["session_id"]: (r["state"], r["failure_reason"], r["close_reason"])
        for r in await rows(store, s.worker_sessions)
    }
    assert states == {
        "a": ("orphaned", "worker_shutdown", None),
        "b": ("closed", None, "worker_shutdown"),
    }
    # W7: the running attempts keep their own leases and may still complete.
    beat = await store.heartbeat_activity_task(
        lease=claimed[0].lease, details=None, lease_duration=LEASE
    )
    assert beat.can_continue
    await store.complete_activity_task(lease=claimed[0].lease, result=blob(1))


async def test_w9_operator_metrics_count_sessions_per_state(store: Store) -> None:
    await register(store, "gpu")
    await schedule_in_sessions(store, [session("a"), session("b")])
    await claim(store, "gpu", limit=2)
    await store.close_worker_session(worker_id="gpu", namespace=NS, session_id="a")
    snapshot = await store.operator_metrics(
        namespace=NS, sticky_enabled=True, sticky_ttl_seconds=300
    )
    figures = snapshot.model_dump(mode="json")["worker_sessions"]
    assert figures == {
        "total": 2,
        "active": 1,
        "closed": 1,
        "expired": 0,
        "failed": 0,
        "orphaned": 0,
    }


async def test_w6_plain_activities_are_claimed_beside_refused_session_ones(
    store: Store,
) -> None:
    await register(store, "cpu", capabilities=())
    run_id = await start(store)
    task = await claim_wf(store)
    await store.complete_workflow_task(
        lease=task.lease, commands=[schedule(1, worker_session=session()), schedule(2)]
    )
    claimed = await claim(store, "cpu", limit=2)
    assert [c.step_seq for c in claimed] == [2]
    assert claimed[0].worker_session is None
    assert {r["step_seq"]: r["state"] for r in await activity_rows(store, run_id)} == {
        1: "ready",
        2: "leased",
    }


@pytest.mark.parametrize("outcome", ["completed", "failed"])
async def test_w6_an_ended_session_attempt_announces_the_session_s_waiting_ones(
    store: Store, noticed: list[ReadyTask], outcome: str
) -> None:
    await register(store, "gpu")
    run_id = await schedule_in_sessions(store, [session()] * 2)
    [first] = await claim(store, "gpu", limit=2)  # the second waits for the session's limit
    [waiting] = [r["task_id"] for r in await activity_rows(store, run_id) if r["state"] == "ready"]
    noticed.clear()
    if outcome == "completed":
        await store.complete_activity_task(lease=first.lease, result=blob(1))
    else:
        failure = Failure(exception_type="Boom", message="no", non_retryable=True)
        await store.fail_activity_task(lease=first.lease, failure=failure)
    assert waiting in {notice.task_id for notice in noticed if notice.kind == "activity"}
    [second] = await claim(store, "gpu")
    assert second.lease.task_id == waiting


async def test_w6_a_refused_session_attempt_is_logged_with_its_typed_reason(store: Store) -> None:
    await register(store, "gpu", max_sessions=1)
    run_id = await schedule_in_sessions(store, [session("a"), session("b")])
    [held] = await claim(store, "gpu", limit=2)
    with capture_logs() as logs:
        assert await claim(store, "gpu") == []
    [refused] = [e for e in logs if e["event"] == "session_activity_refused"]
    [waiting] = [r for r in await activity_rows(store, run_id) if r["state"] == "ready"]
    assert refused["reason"] == "worker_session_limit_exceeded"
    assert (refused["namespace"], refused["queue"], refused["worker_id"]) == (NS, QUEUE, "gpu")
    assert (refused["run_id"], refused["task_id"]) == (run_id, waiting["task_id"])
    assert held.worker_session is not None
    assert refused["session_id"] != held.worker_session.session_id
