"""Authoring calls reach the engine only through `workflow.context.Runtime` on the running loop."""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TypeVar

import pytest

from burrow import codec, workflow
from burrow.errors import NotInWorkflowError
from burrow.protocol.events import WorkflowStarted
from burrow.protocol.shapes import RetrySpec, SessionSpec
from burrow.replay.instance import RunContext, WorkflowInstance
from burrow.workflow import context

T = TypeVar("T")
AT = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


@dataclass
class FakeRuntime:
    """Records the queued activities asked for and answers each with its type name."""

    run: RunContext
    now: datetime = AT
    rng: random.Random = field(default_factory=lambda: random.Random(7))
    is_replaying: bool = False
    started: WorkflowStarted | None = None
    scheduled: list[tuple[str, tuple[object, ...], RetrySpec, str | None]] = field(
        default_factory=list
    )

    def schedule_activity(
        self,
        activity_type: str,
        args: Sequence[object],
        *,
        queue: str | None,
        retry_policy: RetrySpec,
        timeouts: Mapping[str, float | None],
        result_type: object,
        worker_session: SessionSpec | None = None,
        connection: str | None = None,
        cancellation_policy: str | None = None,
    ) -> asyncio.Future[object]:
        session = None if worker_session is None else worker_session.session_id
        self.scheduled.append((activity_type, tuple(args), retry_policy, session))
        future: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        future.set_result(activity_type)
        return future

    def cancel_activity(self, result: asyncio.Future[object], *, wait: bool) -> None:
        pass

    def local_activity(
        self,
        activity_type: str,
        args: Sequence[object],
        *,
        retry_policy: RetrySpec,
        timeouts: Mapping[str, float | None],
        result_type: object,
    ) -> asyncio.Future[object]:
        raise NotImplementedError

    def side_effect(self, fn: Callable[[], T]) -> T:
        return fn()

    def uuid4(self) -> uuid.UUID:
        return uuid.UUID(int=self.rng.getrandbits(128), version=4)

    def get_version(self, change_id: str, min_supported: int, max_supported: int) -> int:
        return max_supported

    def wait_condition(self, predicate: Callable[[], bool]) -> asyncio.Future[bool]:
        raise NotImplementedError


RUN = RunContext(
    run_id=str(uuid.UUID(int=3)),
    workflow_id="wf",
    workflow_type="Flow",
    namespace="default",
    task_queue="q",
    input=codec.encode([]),
)


def test_authoring_calls_use_the_runtime_installed_on_the_running_loop() -> None:
    runtime = FakeRuntime(run=RUN)

    async def code() -> tuple[object, ...]:
        session = workflow.worker_session("gpu", workflow.WorkerSessionOptions(queue="gpu"))
        return (
            workflow.now(),
            workflow.info().workflow_id,
            await workflow.activity("charge", 5),
            await session.activity("render", retry_policy=workflow.RetryPolicy(max_attempts=2)),
        )

    loop = asyncio.new_event_loop()
    try:
        context.install(loop, runtime)
        result = loop.run_until_complete(code())
    finally:
        loop.close()

    assert result == (AT, "wf", "charge", "render")
    (charge, render) = runtime.scheduled
    assert charge[:2] == ("charge", (5,)) and charge[3] is None
    assert charge[2] == workflow.RetryPolicy().to_spec()
    assert render[0] == "render" and render[2].max_attempts == 2 and render[3] == "gpu"


def test_outside_an_installed_loop_authoring_calls_refuse() -> None:
    with pytest.raises(NotInWorkflowError):
        workflow.now()
    assert not context.in_workflow()


def test_the_replay_instance_installs_itself_as_the_runtime() -> None:
    @workflow.defn
    class Flow:
        @workflow.run
        async def run(self) -> None:
            return None

    instance = WorkflowInstance(definition=workflow.get_definition(Flow), run=RUN)
    seen: list[context.Runtime] = []
    instance.loop.call_soon(lambda: seen.append(context.current()))
    instance.loop.run_ready()
    assert seen == [instance]
