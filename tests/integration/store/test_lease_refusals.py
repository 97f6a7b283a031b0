"""Fenced store calls say why they refused, from the one fenced statement (PROTOCOL.md 5.6).

A call names its lease by token (a worker's `Lease`) or by owner, attempt and namespace (the
server's `ClaimFence`); either way a refusal is a StaleLease whose reason and details come from
the task row the statement probed, in the documented order.
"""

from __future__ import annotations

import dataclasses
import uuid
from datetime import timedelta

import pytest

from burrow.protocol.shapes import Failure
from burrow.store import Store
from burrow.store import schema as s
from burrow.store.errors import LeaseRefusal, StaleLease
from burrow.store.models import ClaimedWorkflowTask, ClaimFence
from tests.support.store import (
    LEASE,
    NS,
    QUEUE,
    WF,
    blob,
    claim_act,
    claim_wf,
    execute,
    rows,
    schedule,
    start,
    start_with_activity,
)

FAILURE = Failure(exception_type="X", message="m")


def fence_of(claimed: ClaimedWorkflowTask, **changes: object) -> ClaimFence:
    """The fence the server builds for this claim's lease, with `changes`."""
    fence = ClaimFence(
        task_id=claimed.lease.task_id,
        namespace=NS,
        lease_owner=claimed.lease.lease_owner,
        attempt=claimed.lease.attempt,
    )
    return dataclasses.replace(fence, **changes)  # type: ignore[arg-type]


async def expire(store: Store, table: str, task_id: str) -> None:
    await execute(
        store,
        f"UPDATE {table} SET lease_expires_at = now() - interval '1 second' WHERE task_id = :t",
        t=task_id,
    )


async def heartbeat_refusal(store: Store, fence: ClaimFence) -> StaleLease:
    with pytest.raises(StaleLease) as refused:
        await store.heartbeat_workflow_task(lease=fence, lease_duration=LEASE)
    return refused.value


@pytest.mark.parametrize(
    "task_id, namespace",
    [(str(uuid.uuid4()), NS), ("not-a-uuid", NS), (None, "elsewhere")],
    ids=["unknown", "not-a-uuid", "other-namespace"],
)
async def test_an_unknown_task_is_refused_first(
    store: Store, task_id: str | None, namespace: str
) -> None:
    await start(store)
    claimed = await claim_wf(store)
    fence = fence_of(claimed, namespace=namespace, attempt=9, lease_owner="other")
    if task_id is not None:
        fence = dataclasses.replace(fence, task_id=task_id)

    refused = await heartbeat_refusal(store, fence)

    assert refused.reason is LeaseRefusal.TASK_NOT_FOUND
    assert refused.kind == "workflow task"


async def test_an_attempt_mismatch_names_the_current_attempt(store: Store) -> None:
    await start(store)
    claimed = await claim_wf(store)

    refused = await heartbeat_refusal(store, fence_of(claimed, attempt=2, lease_owner="other"))

    assert refused.reason is LeaseRefusal.ATTEMPT_MISMATCH
    assert (refused.current_attempt, refused.named_attempt) == (1, 2)


async def test_a_task_of_a_closed_run_names_the_run_status(store: Store) -> None:
    run_id = await start(store)
    claimed = await claim_wf(store)
    await store.terminate_workflow(namespace=NS, workflow_id="wf-1")

    with pytest.raises(StaleLease) as refused:
        await store.fail_workflow_task(lease=fence_of(claimed), failure=FAILURE)

    assert refused.value.reason is LeaseRefusal.RUN_CLOSED
    assert (refused.value.run_id, refused.value.run_status) == (run_id, "terminated")
    assert refused.value.task_status == "cancelled"


async def test_a_task_no_longer_leased_names_its_state(store: Store) -> None:
    await start(store)
    claimed = await claim_wf(store)
    await store.complete_workflow_task(lease=fence_of(claimed), commands=[schedule(1)])

    with pytest.raises(StaleLease) as refused:
        await store.complete_workflow_task(lease=fence_of(claimed), commands=[schedule(1)])

    assert refused.value.reason is LeaseRefusal.NOT_LEASED
    assert refused.value.task_status == "completed"


async def test_another_owner_is_named(store: Store) -> None:
    await start(store)
    claimed = await claim_wf(store, worker_id="w1")

    refused = await heartbeat_refusal(store, fence_of(claimed, lease_owner="w2"))

    assert refused.reason is LeaseRefusal.OWNER_MISMATCH
    assert refused.lease_owner == "w1"


async def test_an_expired_lease_is_refused_by_owner_and_attempt_but_not_by_token(
    store: Store,
) -> None:
    """The server's callers may not outlive their lease; a worker's token holds until reclaimed."""
    await start(store)
    claimed = await claim_wf(store)
    await expire(store, "workflow_tasks", claimed.lease.task_id)

    refused = await heartbeat_refusal(store, fence_of(claimed))

    assert refused.reason is LeaseRefusal.EXPIRED
    assert refused.task_status == "leased" and refused.lease_owner == "w1"
    assert refused.lease_expires_at is not None
    renewed = await store.heartbeat_workflow_task(lease=claimed.lease, lease_duration=LEASE)
    assert renewed.task is not None and renewed.task.run_id == claimed.run.run_id


async def test_a_fence_naming_another_run_is_refused_last(store: Store) -> None:
    run_id = await start(store)
    claimed = await claim_wf(store)

    refused = await heartbeat_refusal(store, fence_of(claimed, run_id=str(uuid.uuid4())))

    assert refused.reason is LeaseRefusal.RUN_MISMATCH
    assert refused.run_id == run_id


async def test_a_token_that_is_not_current_is_a_stale_token(store: Store) -> None:
    await start(store)
    claimed = await claim_wf(store)
    stale = dataclasses.replace(claimed.lease, lease_token=str(uuid.uuid4()))

    with pytest.raises(StaleLease) as refused:
        await store.fail_workflow_task(lease=stale, failure=FAILURE)

    assert refused.value.reason is LeaseRefusal.STALE_TOKEN
    [task] = await rows(store, s.workflow_tasks)
    assert task["state"] == "leased"  # nothing changed


async def test_a_claim_fence_completes_and_reports_the_task(store: Store) -> None:
    run_id = await start(store)
    claimed = await claim_wf(store)

    outcome = await store.complete_workflow_task(
        lease=fence_of(claimed), commands=[schedule(1)], sticky_ttl=None
    )

    assert outcome.task is not None
    assert (outcome.task.run_id, outcome.task.queue, outcome.task.namespace) == (
        run_id,
        QUEUE,
        NS,
    )


def attempt_fence(task_id: str, attempt_id: str, owner: str = "w1") -> ClaimFence:
    return ClaimFence(
        task_id=task_id, namespace=NS, lease_owner=owner, activity_attempt_id=attempt_id
    )


async def test_an_activity_attempt_is_fenced_by_its_attempt_id(store: Store) -> None:
    run_id = await start_with_activity(store)
    act = await claim_act(store)
    other = str(uuid.uuid4())

    for call in (
        store.complete_activity_task(lease=attempt_fence(act.lease.task_id, other), result=blob()),
        store.fail_activity_task(lease=attempt_fence(act.lease.task_id, other), failure=FAILURE),
        store.heartbeat_activity_task(
            lease=attempt_fence(act.lease.task_id, other), details=None, lease_duration=LEASE
        ),
    ):
        with pytest.raises(StaleLease) as refused:
            await call
        assert refused.value.reason is LeaseRefusal.ATTEMPT_MISMATCH
        assert refused.value.kind == "activity"
        assert refused.value.activity_attempt_id == act.activity_attempt_id
        assert refused.value.named_attempt_id == other

    done = await store.complete_activity_task(
        lease=attempt_fence(act.lease.task_id, act.activity_attempt_id), result=blob()
    )
    assert (done.task.run_id, done.task.queue) == (run_id, QUEUE)


async def test_an_activity_fail_by_another_owner_changes_nothing(store: Store) -> None:
    await start_with_activity(store)
    act = await claim_act(store)

    with pytest.raises(StaleLease) as refused:
        await store.fail_activity_task(
            lease=attempt_fence(act.lease.task_id, act.activity_attempt_id, owner="w2"),
            failure=FAILURE,
        )

    assert refused.value.reason is LeaseRefusal.OWNER_MISMATCH
    [row] = await rows(store, s.activity_tasks)
    assert (row["state"], row["attempt"]) == ("leased", 1)


async def test_a_query_task_checks_expiry_before_its_owner(store: Store) -> None:
    """PROTOCOL.md 6.3: an expired query lease is not leased, whoever names it."""
    await start(store)
    await store.submit_query(
        namespace=NS,
        workflow_id="wf-1",
        query_name="status",
        arguments=blob(),
        timeout=timedelta(seconds=30),
    )
    claimed = await store.claim_query_task(flt=WF, worker_id="w1", lease=LEASE)
    assert claimed is not None
    await expire(store, "query_tasks", claimed.lease.task_id)
    fence = ClaimFence(task_id=claimed.lease.task_id, namespace=NS, lease_owner="w2", attempt=1)

    with pytest.raises(StaleLease) as refused:
        await store.answer_query_task(lease=fence, result=blob(), failure=None)

    assert refused.value.reason is LeaseRefusal.EXPIRED
    assert refused.value.kind == "query"
