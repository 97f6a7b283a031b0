"""Bad input gets a clear, typed error and loses nothing (D1, M3, M6, M7)."""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa

from burrow import (
    ActivityError,
    App,
    ApplicationError,
    Client,
    PayloadError,
    PayloadTooLarge,
    UnknownWorkflowType,
    UnstorableText,
    Worker,
    WorkflowFailureError,
    activity,
    workflow,
)
from burrow.store import errors as store_errors
from burrow.store import schema
from burrow.testing import assert_eventually
from tests.acceptance.conftest import fast_settings
from tests.apps import flows

pytestmark = pytest.mark.slow


async def _run_count(client: Client) -> int:
    async with client.store.engine.connect() as conn:
        return int(
            (await conn.execute(sa.select(sa.func.count()).select_from(schema.runs))).scalar_one()
        )


async def _task_failure(handle: Any) -> dict[str, Any]:
    async def failed() -> dict[str, Any] | None:
        task = (await handle.describe()).workflow_task
        return None if task is None else task.last_failure

    return await assert_eventually(failed, message="workflow task failure recorded")


async def test_unknown_workflow_type_refused_when_live_workers_lack_it(
    client: Client, database_url: str
) -> None:
    """M3: a type no live worker on the queue declares is refused before anything is written."""
    async with Worker(flows.app, settings=fast_settings(database_url)):
        with pytest.raises(UnknownWorkflowType, match="NoSuchFlow"):
            await client.start_workflow("NoSuchFlow", id="x", task_queue=flows.TASK_QUEUE)
    assert await _run_count(client) == 0


@workflow.defn(name="LateFlow")
class LateFlow:
    @workflow.run
    async def run(self) -> str:
        return "late"


async def test_type_checks_reuse_an_acceptance_but_never_a_refusal(
    client: Client, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """M3 costs a stream of starts one read of the live workers per second, not one each; a
    refusal is read afresh, so a worker that just started with the type is seen at once."""
    reads = 0
    live_workers = client.store.live_workers

    async def counted(**kwargs: Any) -> Any:
        nonlocal reads
        reads += 1
        return await live_workers(**kwargs)

    monkeypatch.setattr(client.store, "live_workers", counted)
    monkeypatch.setattr("burrow.client.WORKER_TYPES_CACHE_SECONDS", 60.0)
    late_app = App(task_queue=flows.TASK_QUEUE, workflows=[LateFlow])
    async with Worker(flows.app, settings=fast_settings(database_url)):
        for i in range(5):
            await client.start_workflow(
                flows.ClockFlow.run, id=f"known-{i}", task_queue=flows.TASK_QUEUE
            )
        assert reads == 1
        with pytest.raises(UnknownWorkflowType, match="LateFlow"):
            await client.start_workflow("LateFlow", id="late-1", task_queue=flows.TASK_QUEUE)
        assert reads == 2
        async with Worker(late_app, settings=fast_settings(database_url)):
            handle = await client.start_workflow(
                LateFlow.run, id="late-2", task_queue=flows.TASK_QUEUE
            )
            assert reads == 3
            assert await handle.result(timeout=30) == "late"


async def test_unknown_workflow_type_waits_visibly_without_workers(client: Client) -> None:
    """M9: accepted with no live worker, and describe() names the compatibility gap."""
    handle = await client.start_workflow("NoSuchFlow", id="gap-1", task_queue="empty-queue")
    description = await handle.describe()
    assert description.compatibility_gap is not None
    assert "NoSuchFlow" in description.compatibility_gap


@workflow.defn(name="CallsMissingActivity")
class CallsMissingActivity:
    @workflow.run
    async def run(self) -> Any:
        return await workflow.activity("no_such_activity")


async def test_unknown_activity_type_fails_the_workflow_task_and_keeps_the_run(
    client: Client, database_url: str
) -> None:
    """A1, runtime invariant 1: typed error on the task (retried, visible); the run is kept."""
    app = App(task_queue="missing-acts", workflows=[CallsMissingActivity], activities=[flows.greet])
    async with Worker(app, settings=fast_settings(database_url)):
        handle = await client.start_workflow(
            CallsMissingActivity, id="missing-1", task_queue="missing-acts"
        )
        failure = await _task_failure(handle)
    assert failure["exception_type"] == "UnknownActivityType"
    assert "no_such_activity" in failure["message"]
    description = await handle.describe()
    assert description.run.status == "running"
    assert [e.event_type for e in await handle.history()] == ["WorkflowStarted"]


@pytest.mark.runs_no_workflow_code
async def test_unencodable_input_is_refused_before_anything_is_written(client: Client) -> None:
    """Malformed payloads: a clear PayloadError, no run created."""
    with pytest.raises(PayloadError):
        await client.start_workflow(
            flows.OrderFlow, object(), id="bad-1", task_queue=flows.TASK_QUEUE
        )
    assert await _run_count(client) == 0


async def test_malformed_payload_in_a_signal_is_skipped_visibly(
    client: Client, database_url: str
) -> None:
    """Issue 13 item 1: an undecodable signal never fails a task: recorded, skipped, counted."""
    handle = await client.start_workflow(
        flows.OrderFlow, "ada", id="corrupt-1", task_queue=flows.TASK_QUEUE
    )
    await client.store.signal_workflow(
        namespace="default",
        workflow_id="corrupt-1",
        signal_name="approve",
        arguments={"codec": "avro", "blob": "not-base64-avro!!"},
        signal_id="bad-signal",
    )

    async def skipped() -> int:
        return (await handle.describe()).skipped_signals

    async with Worker(flows.app, settings=fast_settings(database_url)):
        assert await assert_eventually(skipped, message="signal skipped") == 1
    description = await handle.describe()
    assert description.run.status == "running"
    assert description.workflow_task is None or description.workflow_task.last_failure is None


@pytest.mark.runs_no_workflow_code
async def test_oversized_payload_is_refused_before_anything_is_written(client: Client) -> None:
    """Oversized payloads (over 2 MiB by default) raise PayloadTooLarge and write nothing."""
    with pytest.raises(PayloadTooLarge, match="over the 2097152 byte limit"):
        await client.start_workflow(
            flows.OrderFlow, "x" * (3 * 1024 * 1024), id="big-1", task_queue=flows.TASK_QUEUE
        )
    assert await _run_count(client) == 0


async def test_wrong_namespace_sees_nothing_and_claims_nothing(
    client: Client, database_url: str
) -> None:
    """M7: namespaces partition runs, tasks and workers."""
    handle = await client.start_workflow(
        flows.OrderFlow, "ada", id="ns-1", task_queue=flows.TASK_QUEUE
    )
    other = await Client.connect(settings=fast_settings(database_url, namespace="other"))
    try:
        with pytest.raises(store_errors.RunNotFound, match="namespace 'other'"):
            await other.get_handle("ns-1").describe()
        with pytest.raises(store_errors.RunNotFound):
            await other.get_handle("ns-1").signal("approve", "mallory")
        async with Worker(
            flows.app, settings=fast_settings(database_url, namespace="other")
        ) as worker:
            await worker.store.sweep()
            claimed = await worker.store.claim_workflow_task(
                flt=worker._filter(flows.app.workflows), worker_id="probe", lease=worker.lease
            )
            assert claimed is None
    finally:
        await other.close()
    assert [e.event_type for e in await handle.history()] == ["WorkflowStarted"]


async def test_wall_clock_in_workflow_code_fails_the_task_with_a_sandbox_error(
    client: Client, database_url: str
) -> None:
    """D1: time.sleep() in workflow code is detected; the task fails, the run is kept."""
    async with Worker(flows.app, settings=fast_settings(database_url)):
        handle = await client.start_workflow(
            flows.ClockFlow, id="clock-1", task_queue=flows.TASK_QUEUE
        )
        failure = await _task_failure(handle)
    assert failure["exception_type"] == "WorkflowSandboxError"
    assert "workflow.sleep" in failure["message"]


@activity.defn(name="greet")
async def wave(name: str) -> str:
    return f"wave {name}"


@workflow.defn(name="Evolving")
class EvolvingV1:
    @workflow.run
    async def run(self) -> str:
        await workflow.sleep(0.5)
        return str(await workflow.activity(flows.greet, "v1"))


@workflow.defn(name="Evolving")
class EvolvingV2:
    @workflow.run
    async def run(self) -> str:
        await workflow.activity(flows.greet, "early")  # an unguarded change at step 1
        await workflow.sleep(0.5)
        return "v2"


async def test_nondeterministic_change_fails_the_task_and_the_old_code_resumes(
    client: Client, database_url: str
) -> None:
    """D1, runtime invariant 1: non-determinism fails the workflow task, never the run."""
    settings = fast_settings(database_url)
    v1 = App(task_queue="evolving", workflows=[EvolvingV1], activities=[flows.greet])
    v2 = App(task_queue="evolving", workflows=[EvolvingV2], activities=[flows.greet])
    handle = await client.start_workflow("Evolving", id="evolve-1", task_queue="evolving")
    async with Worker(
        v1,
        settings=settings.model_copy(
            update={"worker": settings.worker.model_copy(update={"repair": False})}
        ),
    ):

        async def timer_scheduled() -> bool:
            return any(e.event_type == "TimerScheduled" for e in await handle.history())

        await assert_eventually(timer_scheduled, message="v1 started its timer")
    recorded = len(await handle.history())
    async with Worker(v2, settings=settings):
        failure = await _task_failure(handle)
    assert failure["exception_type"] == "NondeterminismError"
    assert (
        "step 1" in failure["message"]
        and "greet" in failure["message"]
        and "timer" in failure["message"]
    )
    history = await handle.history()
    assert [e.event_type for e in history][recorded:] in ([], ["TimerFired"])
    async with Worker(v1, settings=settings):
        assert await handle.result(timeout=30) == "hello, v1"


@pytest.mark.runs_no_workflow_code
async def test_a_nul_character_in_an_id_name_or_reason_is_refused_and_writes_nothing(
    client: Client, database_url: str
) -> None:
    """Bad input: Postgres text holds no NUL. A typed UnstorableText, never a driver error."""
    with pytest.raises(UnstorableText, match="NUL"):
        await client.start_workflow(flows.OrderFlow, "ada", id="a\x00b", task_queue="orders")
    assert await _run_count(client) == 0
    with pytest.raises(UnstorableText):
        await client.start_workflow(flows.OrderFlow, "ada", id="q-1", task_queue="ord\x00ers")
    assert await _run_count(client) == 0
    with pytest.raises(UnstorableText):
        await client.get_handle("a\x00b").describe()
    handle = await client.start_workflow(
        flows.OrderFlow, "ada", id="nul-1", task_queue=flows.TASK_QUEUE
    )
    with pytest.raises(UnstorableText):
        await handle.signal("appr\x00ove", "bob")
    with pytest.raises(UnstorableText):
        await handle.terminate(reason="o\x00ps")
    description = await handle.describe()
    assert description.run.status == "running"
    assert [e.event_type for e in await handle.history()] == ["WorkflowStarted"]


@pytest.mark.runs_no_workflow_code
async def test_an_empty_id_is_refused_rather_than_replaced_by_a_random_one(client: Client) -> None:
    """Bad input: `id=""` (an unset variable, say) would start a new run on every retry."""
    with pytest.raises(ValueError, match="workflow id '' is empty"):
        await client.start_workflow(flows.OrderFlow, "ada", id="", task_queue=flows.TASK_QUEUE)
    assert await _run_count(client) == 0
    handle = await client.start_workflow(
        flows.OrderFlow, "ada", id="ids-1", task_queue=flows.TASK_QUEUE
    )
    with pytest.raises(ValueError, match="signal_id ' ' is empty or blank"):
        await handle.signal(flows.OrderFlow.approve, "bob", signal_id=" ")
    async with client.store.engine.connect() as conn:
        inbox = sa.select(sa.func.count()).select_from(schema.inbox_events)
        assert (await conn.execute(inbox)).scalar_one() == 0


@activity.defn
async def refuse_with_nul(order: str) -> str:
    raise RuntimeError(f"card\x00declined for {order}")


@activity.defn
async def refuse_locally(order: str) -> str:
    raise ApplicationError(f"local\x00refusal for {order}", type="Refused\x00", non_retryable=True)


@workflow.defn(name="NulFailures")
class NulFailures:
    @workflow.run
    async def run(self, order: str) -> list[str]:
        seen = []
        try:
            await workflow.activity(
                refuse_with_nul,
                order,
                start_to_close_timeout=5,
                retry_policy=workflow.RetryPolicy(max_attempts=2, initial_interval=0.1),
            )
        except ActivityError as exc:
            seen.append(f"{exc.type}: {exc.message}")
        try:
            await workflow.local_activity(refuse_locally, order)
        except ActivityError as exc:
            seen.append(f"{exc.type}: {exc.message}")
        raise ApplicationError(" | ".join(seen), type="Gave\x00Up", non_retryable=True)


async def test_failures_whose_text_holds_a_nul_character_are_recorded(
    client: Client, database_url: str
) -> None:
    """D2, A3: a user exception's message is recorded as written, with NUL shown as `\\x00`.

    Before, a queued activity's failure could not be written (its attempts ended as lost
    leases) and a run failing with such a message never closed.
    """
    app = App(
        task_queue="nul-failures",
        workflows=[NulFailures],
        activities=[refuse_with_nul, refuse_locally],
    )
    async with Worker(app, settings=fast_settings(database_url)):
        handle = await client.start_workflow(
            NulFailures.run, "o-1", id="nul-f", task_queue="nul-failures"
        )
        with pytest.raises(WorkflowFailureError) as failed:
            await handle.result(timeout=30)
    cause = failed.value.cause
    assert isinstance(cause, ApplicationError)
    assert cause.type == "Gave\\x00Up"
    assert cause.message == (
        "RuntimeError: card\\x00declined for o-1 | Refused\\x00: local\\x00refusal for o-1"
    )
    history = await handle.history()
    failed_attempts = [e for e in history if e.event_type == "ActivityFailed"]
    assert [e.payload["attempt_number"] for e in failed_attempts] == [2, 1]
    stack = failed_attempts[0].payload["exception"]["stack"]
    assert stack.endswith("RuntimeError: card\\x00declined for o-1\n")
