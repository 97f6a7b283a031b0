"""Cold replay page by page gives the commands of a whole replay, holding about a page (issue 32).

Real flows (activities with a retry, a timer, a signal, a side effect, a version marker, local
activities, children) run on a worker that replays every workflow task cold from pages of two
events. Their recorded histories are then replayed again, fed in pages of 1, 2, 3 and 7 events
(from memory, and read from the store), and each activation's commands are compared with a
replay of the same events at once. A long run of short tasks shows how many parsed events a
paged replay holds at once: counted, not timed.
"""

from __future__ import annotations

import gc
import uuid
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from burrow import Client, Worker
from burrow.app import App
from burrow.handle import WorkflowHandle
from burrow.protocol import commands as cmd
from burrow.protocol import events as ev
from burrow.protocol.events import HistoryEvent
from burrow.replay.instance import activations, is_input
from burrow.replay.paged import PagedReplay
from burrow.store import Store, history
from burrow.store.models import RunInfo
from burrow.testing import assert_eventually
from tests.acceptance.conftest import fast_settings
from tests.apps import child_flows, flows, local_flows, paged_flows
from tests.support.history import replay_instance

PAGE_SIZES = (1, 2, 3, 7)
WORKER_PAGE = 2
STEPS = 20
CENSUS_PAGE = 3


@pytest.fixture
async def client(database_url: str) -> AsyncIterator[Client]:
    instance = await Client.connect(settings=fast_settings(database_url))
    yield instance
    await instance.close()


@pytest.fixture
def small_pages(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """Claims and the worker's reads page a history by `WORKER_PAGE` events.

    Yields the size of every page read after a claim (by the worker's paged cold replays).
    """
    monkeypatch.setattr(history, "HISTORY_PAGE_EVENTS", WORKER_PAGE)
    read = Store.read_history_page
    sizes: list[int] = []

    async def counted(self: Store, **kwargs: Any) -> list[HistoryEvent]:
        page = await read(self, **kwargs)
        sizes.append(len(page))
        return page

    monkeypatch.setattr(Store, "read_history_page", counted)
    yield sizes


def _worker(app: App, database_url: str, capacity: int = 0) -> Worker:
    """A worker; without a sticky cache (capacity 0) every workflow task is a cold replay."""
    settings = fast_settings(database_url)
    worker = settings.worker.model_copy(update={"sticky_cache_capacity": capacity})
    return Worker(app, settings=settings.model_copy(update={"worker": worker}))


def _start(client: Client, workflow: Any, *args: Any, queue: str) -> Any:
    name = getattr(workflow, "__qualname__", "run").split(".")[0]
    return client.start_workflow(
        workflow, *args, id=f"{name}-{uuid.uuid4().hex[:6]}", task_queue=queue
    )


async def _order(client: Client, tmp_path: Path) -> WorkflowHandle[Any]:
    handle = await _start(client, flows.OrderFlow.run, "ada", queue=flows.TASK_QUEUE)
    assert await handle.signal("approve", "grace")
    result = await handle.result(timeout=30)
    assert result["approved_by"] == "grace" and result["total"] == 5
    return handle


async def _locals(client: Client, tmp_path: Path) -> WorkflowHandle[Any]:
    path = str(tmp_path / "locals.log")
    mixed = await _start(client, local_flows.LocalMixed.run, path, queue=local_flows.TASK_QUEUE)
    assert await mixed.result(timeout=30) == [
        "hello, one",
        "hello, queued",
        "hello, two",
        "hello, after",
    ]
    handle = await _start(
        client, local_flows.LocalThenSignal.run, path, queue=local_flows.TASK_QUEUE
    )

    async def waiting() -> bool:
        return (await handle.describe()).workflow_task is None

    await assert_eventually(waiting, message="the first local activity committed")
    assert await handle.signal("proceed")
    assert await handle.result(timeout=30) == ["hello, first", "hello, second"]
    return handle


async def _family(client: Client, tmp_path: Path) -> WorkflowHandle[Any]:
    handle = await _start(client, child_flows.Family.run, 5, queue=child_flows.TASK_QUEUE)
    result = await handle.result(timeout=60)
    assert result["first"] == 10 and result["pair"] == [12, 14] and result["released"] == "go"
    return handle


def _alike(commands: Sequence[cmd.Command]) -> list[cmd.Command]:
    """Commands to compare: a new side effect's value is drawn again by each replay."""
    return [
        c.model_copy(update={"result": ""}) if isinstance(c, cmd.RecordSideEffect) else c
        for c in commands
    ]


def _in_pages(events: Sequence[HistoryEvent], size: int) -> list[list[HistoryEvent]]:
    return [list(events[i : i + size]) for i in range(0, len(events), size)]


def _prefixes(events: Sequence[HistoryEvent]) -> list[list[HistoryEvent]]:
    """What each workflow task replayed: every earlier task's events, then its own inputs."""
    groups = activations(events)
    return [
        [e for g in groups[:index] for e in g] + [e for e in group if is_input(e)]
        for index, group in enumerate(groups)
    ]


def _assert_pages_replay_alike(app: App, run: RunInfo, events: Sequence[HistoryEvent]) -> None:
    for prefix in _prefixes(events):
        whole = replay_instance(app, run).activate(prefix)
        assert whole.failure is None, whole.failure
        for size in PAGE_SIZES:
            paged = PagedReplay(replay_instance(app, run))
            for page in _in_pages(prefix, size):
                paged.feed(page)
            assert paged.diverged is None, (size, paged.diverged)
            activation = paged.finish()
            assert activation.failure is None, activation.failure
            assert _alike(activation.commands) == _alike(whole.commands), (size, len(prefix))
            assert activation.local_activities == whole.local_activities


async def test_recorded_flows_replay_page_by_page_as_whole(
    client: Client, store: Store, database_url: str, tmp_path: Path, small_pages: list[int]
) -> None:
    """Issue 32, S12: cold workers paging by two events run the flows; every page size agrees."""
    cases = [
        (flows.app, _order),
        (local_flows.app, _locals),
        (child_flows.app, _family),
    ]
    with capture_logs() as logs:
        handles = []
        for app, run_flow in cases:
            async with _worker(app, database_url) as worker:
                handles.append((app, await run_flow(client, tmp_path)))
            assert worker.sticky_cache.hits == 0
    assert not [e for e in logs if e["event"] == "paged_replay_diverged"]
    assert small_pages and max(small_pages) <= WORKER_PAGE  # cold replays read pages
    # Warm: a cached instance resumes from a tail longer than a page, read whole.
    for app, run_flow in cases:
        async with _worker(app, database_url, capacity=100) as worker:
            await run_flow(client, tmp_path)
        assert worker.sticky_cache.hits > 0
    for app, handle in handles:
        run = (await handle.describe()).run
        events = await store.read_history(run_id=run.run_id)
        assert len(events) > 2 * WORKER_PAGE  # the worker's claims came in several pages
        _assert_pages_replay_alike(app, run, events)
        # The store's pages, read one transaction each, give what the list does.
        for size in PAGE_SIZES:
            paged = PagedReplay(replay_instance(app, run))
            async for page in store.history_pages(run_id=run.run_id, page_events=size):
                assert len(page) <= size
                paged.feed(page)
            assert paged.diverged is None and paged.events == len(events)
            whole = replay_instance(app, run).activate(events)
            assert paged.finish().commands == whole.commands


def _census() -> tuple[int, int]:
    """Parsed history events alive now, and recorded step events alive now."""
    gc.collect()
    found = [o for o in gc.get_objects() if isinstance(o, (HistoryEvent, *ev.STEP_EVENTS))]
    return (
        sum(isinstance(o, HistoryEvent) for o in found),
        sum(isinstance(o, ev.STEP_EVENTS) for o in found),
    )


async def test_a_paged_cold_replay_holds_about_a_page_of_events(
    client: Client, store: Store, database_url: str
) -> None:
    """Issue 32: a long history read by pages of 3 never has more than ~a page parsed at once."""
    async with _worker(paged_flows.app, database_url):
        handle = await _start(
            client, paged_flows.ManySteps.run, STEPS, queue=paged_flows.TASK_QUEUE
        )
        assert await handle.result(timeout=60) == STEPS
    run = (await handle.describe()).run
    events = await store.read_history(run_id=run.run_id)
    total = len(events)
    longest = max(len(group) for group in activations(events))
    whole = replay_instance(paged_flows.app, run).activate(events).commands
    del events
    # Objects alive now are frozen out of the collector's generations, so each census walks
    # only what the replay made (a long-lived test process holds a large heap).
    gc.collect()
    gc.freeze()
    try:
        baseline, baseline_steps = _census()
        paged = PagedReplay(replay_instance(paged_flows.app, run))
        held: list[tuple[int, int]] = []
        async for page in store.history_pages(run_id=run.run_id, page_events=CENSUS_PAGE):
            paged.feed(page)
            del page
            events_now, steps_now = _census()
            held.append((events_now - baseline, steps_now - baseline_steps))
    finally:
        gc.unfreeze()
    assert paged.diverged is None
    assert paged.finish().commands == whole
    bound = CENSUS_PAGE + longest + 1  # the page, the open task's events, the generator's last
    assert total > 4 * bound  # a whole replay would hold every one of them
    assert len(held) >= total // CENSUS_PAGE
    print(f"census: {total} events, longest task {longest}, held {max(held)}")
    assert max(n for n, _ in held) <= bound, held
    assert max(n for _, n in held) <= bound, held
