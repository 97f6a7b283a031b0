"""Slots reserved for work a completion may lease here: kept by started tasks, else given back."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import pytest
from structlog.testing import capture_logs

from burrow import activity
from burrow.app import App
from burrow.protocol import commands as cmd
from burrow.store import errors as store_errors
from burrow.store.models import Lease
from burrow.worker import completion
from burrow.worker.completion import CompletionOutcome
from burrow.worker.env import TaskEnv
from burrow.worker.slots import Slots
from burrow.worker.sticky_cache import StickyCache

QUEUE = "q"
LEASE = Lease(
    task_id="t1",
    run_id="r1",
    lease_token="tok",
    lease_owner="w1",
    attempt=1,
    lease_expires_at=datetime(2030, 1, 1, tzinfo=UTC),
)


@activity.defn(name="charge")
async def charge() -> None:
    """An activity this worker runs, so its attempts may be leased here."""


@dataclass
class FakeStore:
    """Answers a completion with `answer`, or raises it when it is an exception."""

    answer: object = None
    calls: list[dict[str, Any]] = field(default_factory=list)

    async def _write(self, **kwargs: Any) -> Any:
        self.calls.append(kwargs)
        if isinstance(self.answer, BaseException):
            raise self.answer
        return self.answer

    complete_workflow_task = _write

    async def complete_activity_task(self, **kwargs: Any) -> Any:
        """The follow-up task is `answer` (store.worker_plane.AttemptCompleted)."""
        return SimpleNamespace(follow_up=await self._write(**kwargs))


@dataclass
class Harness:
    store: FakeStore
    env: TaskEnv
    started: list[object]


def harness(answer: object, *, eager_claim_fails: bool = False) -> Harness:
    store = FakeStore(answer)
    started: list[object] = []

    def eager_claim(types: Any, limit: int) -> Any:
        if eager_claim_fails:
            raise RuntimeError("no claim today")
        return SimpleNamespace(types=sorted(types), limit=limit)

    env = TaskEnv(
        store=store,  # type: ignore[arg-type]
        app=App(task_queue=QUEUE, activities=[charge]),
        worker_id="w1",
        task_queue=QUEUE,
        lease=timedelta(seconds=30),
        max_payload_bytes=1024,
        executor=ThreadPoolExecutor(max_workers=1),
        workflow_slots=Slots(2),
        activity_slots=Slots(5),
        eager_claim=eager_claim,
        start_workflow_task=started.append,
        start_activity_task=started.append,
        is_stopping=lambda: False,
        sticky_cache=StickyCache(capacity=0, max_bytes=0),
        sticky_ttl=None,
        build_id=None,
        lease_expires_at=lambda task_id: None,
    )
    return Harness(store, env, started)


def schedules(count: int) -> list[cmd.Command]:
    arguments = {"codec": "json", "blob": "[]"}
    return [
        cmd.ScheduleActivity(activity_type="charge", queue=QUEUE, arguments=arguments)
        for _ in range(count)
    ]


async def complete_workflow_task(h: Harness, commands: list[cmd.Command]) -> CompletionOutcome:
    claimed = SimpleNamespace(lease=LEASE, position=None)
    return await completion.complete_workflow_task(h.env, claimed, commands)  # type: ignore[arg-type]


async def complete_activity(h: Harness) -> None:
    task = SimpleNamespace(lease=LEASE)
    result = {"codec": "json", "blob": "1"}
    await completion.complete_activity(h.env, task, result, started=0.0)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "failure", [store_errors.StoreUnavailable("down"), asyncio.CancelledError()]
)
async def test_a_workflow_task_write_that_raises_gives_back_every_reserved_slot(
    failure: BaseException,
) -> None:
    h = harness(failure)
    with pytest.raises(type(failure)):
        await complete_workflow_task(h, schedules(3))
    assert h.store.calls[0]["eager"].limit == 3
    assert h.env.activity_slots.free == 5


async def test_activities_leased_by_the_write_keep_their_slots_and_the_rest_go_back() -> None:
    attempt = object()
    h = harness(CompletionOutcome(eager_activities=[attempt]))  # type: ignore[list-item]
    await complete_workflow_task(h, schedules(3))
    assert h.started == [attempt]
    assert h.env.activity_slots.free == 4  # the started attempt's job gives its slot back


async def test_an_eager_claim_that_cannot_be_built_leaks_no_slot() -> None:
    h = harness(CompletionOutcome(), eager_claim_fails=True)
    with pytest.raises(RuntimeError):
        await complete_workflow_task(h, schedules(2))
    with pytest.raises(RuntimeError):
        await complete_activity(h)
    assert (h.env.activity_slots.free, h.env.workflow_slots.free) == (5, 2)


async def test_a_follow_up_leased_here_is_started_on_the_reserved_workflow_slot() -> None:
    follow_up = object()
    h = harness(follow_up)
    with capture_logs() as logs:
        await complete_activity(h)
    assert h.started == [follow_up]
    assert h.env.workflow_slots.free == 1
    assert [e.get("follow_up") for e in logs if e["event"] == "activity_completed"] == [
        "leased here"
    ]


@pytest.mark.parametrize(
    "failure", [store_errors.StaleLease(task_id="t1", lease_token="tok"), asyncio.CancelledError()]
)
async def test_an_activity_write_that_raises_gives_back_its_workflow_slot(
    failure: BaseException,
) -> None:
    h = harness(failure)
    with pytest.raises(type(failure)):
        await complete_activity(h)
    assert h.store.calls[0]["eager"] is not None
    assert h.env.workflow_slots.free == 2


async def test_without_a_free_workflow_slot_the_result_is_written_plainly() -> None:
    h = harness(None)
    h.env.workflow_slots.reserve(2)
    with capture_logs() as logs:
        await complete_activity(h)
    assert h.store.calls[0]["eager"] is None
    assert h.env.workflow_slots.free == 0
    [completed] = [e for e in logs if e["event"] == "activity_completed"]
    assert "follow_up" not in completed
