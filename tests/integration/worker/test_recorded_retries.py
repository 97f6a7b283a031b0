"""An outcome retried after its commit reply was lost is recognised as recorded (W7, M6, D2).

The store keeps a lease's token on the row its holder's completion or failure takes out of
`leased`, so the same call repeated with that token is refused as `already_recorded`, and the
worker logs `..._recorded` instead of a lost lease or an unconfirmed outcome. The lost reply is
simulated: the store call commits, then raises StoreUnavailable as a dropped connection would.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta
from typing import Any

import pytest
from structlog.testing import capture_logs

from burrow import App, Client, Settings, Worker, activity, workflow
from burrow.config import WakeSettings
from burrow.store import Store
from burrow.store import errors as store_errors
from burrow.store.claims import EagerClaim
from tests.acceptance.conftest import fast_settings
from tests.support.store import ACT, LEASE, blob, claim_act, claim_wf, schedule, start

QUEUE = "recorded-retries"
LOST_LEASE_LINES = {
    "activity_lease_lost",
    "activity_outcome_unconfirmed",
    "activity_outcome_discarded",
    "workflow_task_lease_lost",
    "workflow_task_outcome_unconfirmed",
}
RUNS: dict[str, int] = {}


@activity.defn
def double(value: int) -> int:
    RUNS["double"] = RUNS.get("double", 0) + 1
    return value * 2


@activity.defn
def fails_once(value: int) -> int:
    RUNS["fails_once"] = RUNS.get("fails_once", 0) + 1
    if RUNS["fails_once"] == 1:
        raise RuntimeError("first attempt fails")
    return value * 2


@workflow.defn
class Doubling:
    @workflow.run
    async def run(self, value: int) -> int:
        result: int = await workflow.activity(double, value, start_to_close_timeout=30)
        return result


@workflow.defn
class RetriedActivity:
    @workflow.run
    async def run(self, value: int) -> int:
        result: int = await workflow.activity(
            fails_once,
            value,
            start_to_close_timeout=30,
            # The backoff outlasts the worker's store retry: a retry attempt claimed before the
            # repeated failure arrives rotates the token, and that case is not recognised.
            retry_policy=workflow.RetryPolicy(initial_interval=2.0),
        )
        return result


@workflow.defn
class FailsFirstTask:
    """Its first workflow task fails (a bug, retried); the next one completes."""

    @workflow.run
    async def run(self, value: int) -> int:
        RUNS["task"] = RUNS.get("task", 0) + 1
        if RUNS["task"] == 1:
            raise RuntimeError("a bug in the first task")
        return value + 1


app = App(
    task_queue=QUEUE,
    workflows=[Doubling, RetriedActivity, FailsFirstTask],
    activities=[double, fails_once],
)


def _settings(database_url: str, *, sticky: bool) -> Settings:
    """Short leases: work the lost commit leased here eagerly is handed out again once its
    lease expires (the worker never learned of it)."""
    base = fast_settings(database_url)
    worker = base.worker.model_copy(update={"sticky_cache_capacity": 100 if sticky else 0})
    return base.model_copy(update={"worker": worker, "wakes": WakeSettings(enabled=False)})


def _lose_first_reply(monkeypatch: pytest.MonkeyPatch, store: Store, method: str) -> dict[str, int]:
    """The first call of `store.method` commits, then its reply is lost (StoreUnavailable)."""
    calls = {"lost": 0}
    real: Callable[..., Awaitable[Any]] = getattr(store, method)

    async def committed_then_lost(**kwargs: Any) -> Any:
        outcome = await real(**kwargs)
        if calls["lost"] == 0 and outcome is not None:
            calls["lost"] += 1
            raise store_errors.StoreUnavailable("database unavailable: connection reset")
        return outcome

    monkeypatch.setattr(store, method, committed_then_lost)
    return calls


@pytest.fixture(autouse=True)
def _fresh_counts() -> None:
    RUNS.clear()


@pytest.fixture
async def worker_store(database_url: str) -> AsyncIterator[Store]:
    instance = Store.connect(database_url, pool_size=4)
    yield instance
    await instance.close()


async def _run(
    database_url: str, store: Store, flow: type, *, sticky: bool = False
) -> tuple[object, list[dict[str, Any]]]:
    settings = _settings(database_url, sticky=sticky)
    with capture_logs() as logs:
        async with Worker(app, settings=settings, store=store):
            client = await Client.connect(settings=settings)
            try:
                handle = await client.start_workflow(flow, 20, task_queue=QUEUE)
                result = await handle.result(timeout=30)
            finally:
                await client.close()
    return result, logs


def _events(logs: list[dict[str, Any]]) -> list[str]:
    return [str(e["event"]) for e in logs]


@pytest.mark.parametrize(
    ("method", "sticky"),
    [("complete_activity_task", False), ("complete_activity_with_workflow_task", True)],
    ids=["plain", "written with its workflow task"],
)
async def test_m6_a_retried_activity_completion_is_logged_as_recorded(
    database_url: str,
    worker_store: Store,
    monkeypatch: pytest.MonkeyPatch,
    method: str,
    sticky: bool,
) -> None:
    """W7, M6, D2: the retry is refused as already recorded: `activity_completion_recorded`."""
    lost = _lose_first_reply(monkeypatch, worker_store, method)
    result, logs = await _run(database_url, worker_store, Doubling, sticky=sticky)
    assert result == 40
    assert lost["lost"] == 1
    assert RUNS["double"] == 1  # recorded once, never run again
    events = _events(logs)
    assert "activity_completion_recorded" in events
    assert not LOST_LEASE_LINES & set(events), events


async def test_m6_a_retried_activity_failure_is_logged_as_recorded(
    database_url: str, worker_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """W7, M6: a failure whose retry was scheduled, repeated: `activity_failure_recorded`."""
    lost = _lose_first_reply(monkeypatch, worker_store, "fail_activity_task")
    result, logs = await _run(database_url, worker_store, RetriedActivity)
    assert result == 40
    assert lost["lost"] == 1
    assert RUNS["fails_once"] == 2  # the failed attempt, then its one retry
    events = _events(logs)
    assert "activity_failure_recorded" in events
    assert not LOST_LEASE_LINES & set(events), events


async def test_m6_a_retried_workflow_task_completion_is_logged_as_recorded(
    database_url: str, worker_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """W7, M6: the workflow task completion's retry: `workflow_task_completion_recorded`."""
    lost = _lose_first_reply(monkeypatch, worker_store, "complete_workflow_task")
    result, logs = await _run(database_url, worker_store, Doubling)
    assert result == 40
    assert lost["lost"] == 1
    events = _events(logs)
    assert "workflow_task_completion_recorded" in events
    assert not LOST_LEASE_LINES & set(events), events


async def test_m6_a_retried_workflow_task_failure_is_logged_as_recorded(
    database_url: str, worker_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """W7, M6: the failed task's hand-back, repeated: `workflow_task_failure_recorded`."""
    lost = _lose_first_reply(monkeypatch, worker_store, "fail_workflow_task")
    result, logs = await _run(database_url, worker_store, FailsFirstTask)
    assert result == 21
    assert lost["lost"] == 1
    events = _events(logs)
    assert "workflow_task_failure_recorded" in events
    assert not LOST_LEASE_LINES & set(events), events


# -- the store's side --------------------------------------------------------------------------


async def test_m6_the_same_token_after_its_completion_is_refused_as_already_recorded(
    store: Store,
) -> None:
    """M6: a completion repeated with its token is `already_recorded`; another token is not."""
    await start(store, workflow_id="recorded-store")
    task = await claim_wf(store)
    await store.complete_workflow_task(lease=task.lease, commands=[schedule(1)])
    with pytest.raises(store_errors.StaleLease) as again:
        await store.complete_workflow_task(lease=task.lease, commands=[schedule(1)])
    assert again.value.reason == store_errors.LeaseRefusal.ALREADY_RECORDED

    attempt = await claim_act(store)
    await store.complete_activity_task(lease=attempt.lease, result=blob(5))
    with pytest.raises(store_errors.StaleLease) as repeated:
        await store.complete_activity_task(lease=attempt.lease, result=blob(5))
    assert repeated.value.reason == store_errors.LeaseRefusal.ALREADY_RECORDED
    other = dataclasses.replace(attempt.lease, lease_token=attempt.lease.task_id)
    with pytest.raises(store_errors.StaleLease) as foreign:
        await store.complete_activity_task(lease=other, result=blob(5))
    assert foreign.value.reason != store_errors.LeaseRefusal.ALREADY_RECORDED


async def test_m6_a_renewal_tells_a_recorded_attempt_from_a_lost_lease(store: Store) -> None:
    """W7: the lease keeper is told the attempt's outcome is recorded, so it cancels nothing."""
    await start(store, workflow_id="recorded-renewal")
    task = await claim_wf(store)
    outcome = await store.complete_workflow_task(
        lease=task.lease,
        commands=[schedule(1)],
        eager=EagerClaim(flt=ACT, worker_id="w1", lease=LEASE),
    )
    [attempt] = outcome.eager_activities
    await store.complete_activity_task(lease=attempt.lease, result=blob(5))
    renewal = await store.renew_leases(
        workflow=[], activity=[attempt.lease], lease=timedelta(seconds=30)
    )
    assert renewal.activity == set()
    assert renewal.recorded == {attempt.lease.task_id}
