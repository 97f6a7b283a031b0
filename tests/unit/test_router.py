"""ReadyRouter: the one place that decides who hears about work a commit made ready (C1, C4)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime, timedelta

from burrow.broker.messages import TaskKind
from burrow.store.ready import ReadyTask
from burrow.testing.helpers import assert_eventually
from burrow.worker.router import ReadyRouter


class RecordingWakes:
    """Stands in for the broker link: records what would be published."""

    def __init__(self, *, healthy: bool) -> None:
        self.healthy = healthy
        self.published: list[ReadyTask] = []

    async def publish_ready(self, notices: Iterable[ReadyTask]) -> None:
        self.published.extend(notices)


def notice(
    kind: str = "workflow", queue: str = "q", *, in_seconds: float | None = None
) -> ReadyTask:
    at = None if in_seconds is None else datetime.now(UTC) + timedelta(seconds=in_seconds)
    return ReadyTask("default", "default", queue, kind, "t1", at)


def router(pokes: list[TaskKind]) -> ReadyRouter:
    return ReadyRouter(
        namespace="default",
        queue="q",
        kinds=[TaskKind.WORKFLOW, TaskKind.ACTIVITY],
        poke=pokes.append,
    )


async def test_healthy_wakes_publish_and_poke_nothing_locally() -> None:
    pokes: list[TaskKind] = []
    wakes = RecordingWakes(healthy=True)
    r = router(pokes)
    r.attach(wakes)
    await r.on_commit([notice(), notice("activity")])
    assert [n.kind for n in wakes.published] == ["workflow", "activity"]
    assert pokes == []


async def test_unhealthy_wakes_still_publish_and_poke_this_workers_queues() -> None:
    pokes: list[TaskKind] = []
    wakes = RecordingWakes(healthy=False)
    r = router(pokes)
    r.attach(wakes)
    await r.on_commit([notice(), notice(queue="other"), notice("query")])
    assert len(wakes.published) == 3
    assert pokes == [TaskKind.WORKFLOW]  # not another queue, not a kind this worker runs


async def test_without_wakes_a_future_notice_pokes_when_it_is_due() -> None:
    pokes: list[TaskKind] = []
    r = router(pokes)
    await r.on_commit([notice("activity", in_seconds=0.05)])
    assert pokes == []

    async def poked() -> bool:
        return bool(pokes)

    await assert_eventually(poked, timeout=5, interval=0.01)
    assert pokes == [TaskKind.ACTIVITY]
