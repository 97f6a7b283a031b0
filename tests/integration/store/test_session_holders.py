"""The sessions a live worker holds: renewed by its heartbeat, handed over on a drain (W1, W5)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from burrow.protocol.shapes import SessionSpec
from burrow.store import Store
from burrow.store import schema as s
from burrow.store.models import SessionOutcome, SessionRefusal
from tests.integration.store.test_session_admission import (
    activity_rows,
    claim,
    register,
    schedule_in_sessions,
    session,
)
from tests.support.store import LEASE, NS, QUEUE, blob, db_now, execute, rows

LEASE_SECONDS = 60


async def _create(store: Store, worker_id: str, session_id: str, **options: Any) -> None:
    spec = SessionSpec(session_id=session_id, queue=QUEUE, lease_seconds=LEASE_SECONDS, **options)
    made = await store.create_worker_session(worker_id=worker_id, namespace=NS, options=spec)
    assert made.outcome == SessionOutcome.CREATED, made


async def _sessions(store: Store) -> dict[str, dict[str, Any]]:
    return {r["session_id"]: r for r in await rows(store, s.worker_sessions)}


async def _idled_almost_a_lease(store: Store) -> Any:
    """Every session idled all but one second of its lease since its last renewal; now()."""
    await execute(
        store,
        "UPDATE worker_sessions SET lease_expires_at = now() + interval '1 second',"
        " last_heartbeat_at = now() - make_interval(secs => lease_seconds - 1)",
    )
    return await db_now(store)


def _renewed_since(row: dict[str, Any], mark: Any) -> bool:
    """Renewed after `mark`, for the session's whole `lease_seconds` from that renewal."""
    return bool(
        row["last_heartbeat_at"] >= mark
        and row["lease_expires_at"] - row["last_heartbeat_at"]
        == timedelta(seconds=row["lease_seconds"])
    )


async def test_w1_a_worker_heartbeat_renews_every_session_it_holds(store: Store) -> None:
    """W1: a holder that runs no attempt keeps its sessions past lease_seconds by heartbeating."""
    await register(store, "gpu-a", capabilities=())
    await register(store, "gpu-b", capabilities=())
    await _create(store, "gpu-a", "idle-1")
    await _create(store, "gpu-a", "idle-2", allow_reacquire_after_failure=False)
    await _create(store, "gpu-b", "theirs")
    await _create(store, "gpu-a", "done")
    await store.close_worker_session(worker_id="gpu-a", namespace=NS, session_id="done")
    mark = await _idled_almost_a_lease(store)

    await store.heartbeat_worker(worker_id="gpu-a")

    after = await _sessions(store)
    assert {sid: _renewed_since(row, mark) for sid, row in after.items()} == {
        "idle-1": True,
        "idle-2": True,
        "theirs": False,
        "done": False,
    }
    assert {sid: row["state"] for sid, row in after.items()} == {
        "idle-1": "active",
        "idle-2": "active",
        "theirs": "active",
        "done": "closed",
    }
    # Past the lease the sessions had before the heartbeat, the repair pass leaves them held.
    await execute(
        store,
        "UPDATE worker_sessions SET lease_expires_at = lease_expires_at - interval '2 seconds'"
        " WHERE session_id = 'theirs'",
    )
    await store.sweep()
    after = await _sessions(store)
    assert {sid: (row["state"], row["owner_worker_id"]) for sid, row in after.items()} == {
        "idle-1": ("active", "gpu-a"),
        "idle-2": ("active", "gpu-a"),
        "theirs": ("expired", "gpu-b"),
        "done": ("closed", "gpu-a"),
    }


async def test_w1_a_lapsed_lease_or_a_draining_holder_is_not_renewed(store: Store) -> None:
    """W1, W5: the heartbeat renews only leases still running, and only for an active worker."""
    await register(store, "gpu-a", capabilities=())
    await _create(store, "gpu-a", "lapsed")
    await execute(
        store, "UPDATE worker_sessions SET lease_expires_at = now() - interval '1 second'"
    )
    mark = await db_now(store)
    await store.heartbeat_worker(worker_id="gpu-a")
    assert not _renewed_since((await _sessions(store))["lapsed"], mark)


async def test_w5_a_drain_hands_reacquirable_sessions_over_and_closes_the_others(
    store: Store,
) -> None:
    """W5: a planned stop orphans (`worker_shutdown`) what another worker may reacquire."""
    await register(store, "gpu-a", capabilities=())
    await register(store, "gpu-b", capabilities=())
    await _create(store, "gpu-a", "handed")
    await _create(store, "gpu-a", "pinned", allow_reacquire_after_failure=False)

    await store.drain_worker(worker_id="gpu-a")

    after = await _sessions(store)
    assert {
        sid: (row["state"], row["failure_reason"], row["close_reason"], row["owner_worker_id"])
        for sid, row in after.items()
    } == {
        "handed": ("orphaned", "worker_shutdown", None, "gpu-a"),
        "pinned": ("closed", None, "worker_shutdown", "gpu-a"),
    }
    info = await store.get_worker_session(namespace=NS, session_id="handed")
    assert info is not None and info.failure_reason == "worker_shutdown"
    spec = SessionSpec(session_id="handed", queue=QUEUE, lease_seconds=LEASE_SECONDS)
    taken = await store.create_worker_session(worker_id="gpu-b", namespace=NS, options=spec)
    assert taken.outcome == SessionOutcome.REACQUIRED
    pinned = SessionSpec(session_id="pinned", queue=QUEUE, lease_seconds=LEASE_SECONDS)
    refused = await store.create_worker_session(worker_id="gpu-b", namespace=NS, options=pinned)
    assert refused.reason == SessionRefusal.SESSION_CLOSED


async def test_w5_deregistration_hands_sessions_over_like_a_drain(store: Store) -> None:
    await register(store, "gpu-a", capabilities=())
    await _create(store, "gpu-a", "handed")
    await _create(store, "gpu-a", "pinned", allow_reacquire_after_failure=False)
    await store.deregister_worker(worker_id="gpu-a")
    after = await _sessions(store)
    assert {sid: (row["state"], row["failure_reason"]) for sid, row in after.items()} == {
        "handed": ("orphaned", "worker_shutdown"),
        "pinned": ("closed", None),
    }


async def test_w5_a_draining_worker_finishes_its_attempt_but_never_takes_the_session_back(
    store: Store,
) -> None:
    """W5, W7: the running attempt keeps its lease; its heartbeat does not reclaim the session,
    and the next step goes to another capable worker, which reacquires it."""
    await register(store, "gpu-a")
    await register(store, "gpu-b")
    run_id = await schedule_in_sessions(store, [session()] * 2)
    [first] = await claim(store, "gpu-a")
    await store.drain_worker(worker_id="gpu-a")

    beat = await store.heartbeat_activity_task(
        lease=first.lease, details=None, lease_duration=LEASE
    )
    assert beat.can_continue and beat.reason == SessionRefusal.SESSION_NOT_ACTIVE
    await store.heartbeat_worker(worker_id="gpu-a")
    row = (await _sessions(store))["gpu-render"]
    assert (row["state"], row["failure_reason"]) == ("orphaned", "worker_shutdown")
    # One attempt at a time in the session (W6): the next waits for the running one.
    assert await claim(store, "gpu-b") == []
    await store.complete_activity_task(lease=first.lease, result=blob(1))

    [second] = await claim(store, "gpu-b")
    assert second.lease.lease_owner == "gpu-b"
    row = (await _sessions(store))["gpu-render"]
    assert (row["state"], row["owner_worker_id"], row["reacquire_count"]) == ("active", "gpu-b", 1)
    states = sorted(r["state"] for r in await activity_rows(store, run_id))
    assert states == ["completed", "leased"]
