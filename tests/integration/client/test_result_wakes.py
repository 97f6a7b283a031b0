"""Clients hear results, update completions and query answers from the broker (issue 12).

Each client waits on one exclusive queue bound to the runs it awaits; a lost wake costs the
fallback interval only, and however many waiters there are, the fallback is one query per
interval, not one per waiter.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import pytest

from burrow import App, Client, Settings, Worker, workflow
from burrow import handle as handle_module
from burrow.errors import WorkflowFailureError
from burrow.store.ready import MAX_OUTCOME_BYTES
from tests.acceptance.conftest import fast_settings

QUEUE = "result-wakes"
T = TypeVar("T")


@workflow.defn
class Counter:
    """Waits for updates to count up to its target; answers queries meanwhile."""

    def __init__(self) -> None:
        self.count = 0

    @workflow.update
    def bump(self, by: int) -> int:
        self.count += by
        return self.count

    @workflow.query
    def current(self) -> int:
        return self.count

    @workflow.run
    async def run(self, target: int) -> int:
        await workflow.wait_condition(lambda: self.count >= target)
        return self.count


app = App(task_queue=QUEUE, workflows=[Counter])


def _settings(database_url: str, fallback_seconds: float) -> Settings:
    settings = fast_settings(database_url)
    wakes = settings.wakes.model_copy(update={"result_fallback_seconds": fallback_seconds})
    return settings.model_copy(update={"wakes": wakes})


class Calls:
    """Counts calls of a store method on one client (the real method still runs)."""

    def __init__(self, client: Client, name: str) -> None:
        self.count = 0
        self.called = asyncio.Event()
        original: Callable[..., Awaitable[Any]] = getattr(client.store, name)

        async def counted(*args: Any, **kwargs: Any) -> Any:
            self.count += 1
            result = await original(*args, **kwargs)
            self.called.set()
            return result

        setattr(client.store, name, counted)


class _SignallingWatch:
    """A waiter's watch that sets `waiting` each time the waiter starts to wait on it."""

    def __init__(self, watch: Any, waiting: asyncio.Event) -> None:
        self._watch = watch
        self._waiting = waiting

    def __getattr__(self, name: str) -> Any:
        return getattr(self._watch, name)

    async def wait(self, timeout: float | None) -> None:
        self._waiting.set()
        await self._watch.wait(timeout)


class Waiting:
    """Tells when a waiter of this client waits on its watch: bound (or heard on the starter
    queue) and done with its first read, so what the test does next can only wake it."""

    def __init__(self, client: Client) -> None:
        self.event = asyncio.Event()
        watch = client.runs.watch
        event = self.event

        @contextlib.asynccontextmanager
        async def signalling(*args: Any, **kwargs: Any) -> AsyncIterator[Any]:
            async with watch(*args, **kwargs) as inner:
                yield _SignallingWatch(inner, event)

        client.runs.watch = signalling  # type: ignore[method-assign]

    async def wait(self) -> None:
        await asyncio.wait_for(self.event.wait(), timeout=10)


async def _losing_every_wake(database_url: str) -> Client:
    """A client whose queue is bound to keys nobody publishes: wakes seem to flow, all are lost."""
    client = await Client.connect(settings=_settings(database_url, 0.2))
    listener = client.runs.listener
    assert listener is not None
    bind = listener.bind

    async def bind_elsewhere(key: str) -> bool:
        return await bind(f"elsewhere.{key}")

    listener.bind = bind_elsewhere  # type: ignore[method-assign]
    client.runs.notify_queue = lambda: "amq.gen-nobody-reads-this"  # type: ignore[method-assign]
    return client


async def test_result_timeout_bounds_a_bind_the_broker_has_not_answered(
    database_url: str,
) -> None:
    """A broker slow to answer the watch's bind does not stretch `result(timeout=)`: the waiter
    stops waiting for the bind at its own deadline, reads the run, and raises TimeoutError."""
    client = await Client.connect(settings=_settings(database_url, 60.0))
    listener = client.runs.listener
    assert listener is not None
    unanswered = asyncio.Event()

    async def stalled_bind(key: str) -> bool:
        await unanswered.wait()
        return True

    listener.bind = stalled_bind  # type: ignore[method-assign]
    reads = Calls(client, "get_run")
    try:
        handle = await client.start_workflow(Counter.run, 1, task_queue=QUEUE)  # no worker
        async with asyncio.timeout(4):  # the listener's own bind timeout is 5 s
            with pytest.raises(TimeoutError, match="still running"):
                await handle.result(timeout=0.3)
    finally:
        await client.close()
    assert reads.count == 1  # never times out unread


@pytest.fixture
async def no_fallback(database_url: str) -> AsyncIterator[Client]:
    """A client whose fallback poll would take a minute: only a wake explains a prompt answer."""
    client = await Client.connect(settings=_settings(database_url, 60.0))
    yield client
    await client.close()


async def test_result_is_woken_by_the_run_closing(database_url: str, no_fallback: Client) -> None:
    """The wake carries the outcome as committed: the waiter on a run it did not just start
    reads its run before waiting, and again only if the update's change (same key) arrived
    before the close."""
    polls = Calls(no_fallback, "closed_runs")
    async with Worker(app, settings=_settings(database_url, 60.0)):
        started = await no_fallback.start_workflow(Counter.run, 1, task_queue=QUEUE)
        handle = no_fallback.get_handle(started.workflow_id, run_id=started.run_id)
        reads = Calls(no_fallback, "get_run")
        waiter = Waiting(no_fallback)
        waiting = asyncio.create_task(handle.result(timeout=30))
        await waiter.wait()
        assert await handle.update(Counter.bump, 1, timeout=30) == 1
        assert await waiting == 1
    assert polls.count == 0
    assert 1 <= reads.count <= 2


@workflow.defn
class Large:
    @workflow.run
    async def run(self, size: int) -> str:
        return "x" * size


large_app = App(task_queue=QUEUE, workflows=[Large])


async def test_a_run_just_started_is_answered_by_its_close_wake_without_a_read(
    database_url: str, no_fallback: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """start_workflow then result(): the run was open an instant ago, so the waiter reads
    nothing; the close wake answers (the fallback poll would take a minute)."""
    # A loaded machine may take more than the real millisecond between the two calls; what is
    # tested is the rule, not the width of its window.
    monkeypatch.setattr(handle_module, "JUST_STARTED_SECONDS", 0.5)
    async with Worker(app, settings=_settings(database_url, 60.0)):
        reads = Calls(no_fallback, "get_run")
        polls = Calls(no_fallback, "closed_runs")
        handle = await no_fallback.start_workflow(Counter.run, 0, task_queue=QUEUE)
        assert await handle.result(timeout=30) == 0
        again = await no_fallback.start_workflow(Counter.run, 0, task_queue=QUEUE)
        await asyncio.sleep(0.6)  # no longer just started: read first, as any waiter
        assert await again.result(timeout=30) == 0
    assert (reads.count, polls.count) == (1, 0)


async def _queue_declared(client: Client) -> str:
    """The client's queue for run changes (a client declares it when it first starts a run)."""
    listener = client.runs.listener
    assert listener is not None
    assert await listener.open()
    queue = client.runs.notify_queue()
    assert queue is not None
    return queue


async def test_a_client_that_never_waited_names_no_queue_for_its_runs(
    database_url: str, no_fallback: Client
) -> None:
    """Fire-and-forget starts cost the broker nothing: until the client first waits (and so
    declares its queue), its runs name no starter queue, and their changes reach no one."""
    first = await no_fallback.start_workflow(Counter.run, 5, task_queue=QUEUE)
    assert no_fallback.runs.notify_queue() is None
    assert await first.describe() is not None  # a read, not a wait: still no queue
    assert no_fallback.runs.notify_queue() is None
    with pytest.raises(TimeoutError):
        await first.result(timeout=0.2)  # the first wait declares the queue
    queue = no_fallback.runs.notify_queue()
    assert queue is not None
    second = await no_fallback.start_workflow(Counter.run, 5, task_queue=QUEUE)
    assert second._notify_queue == queue
    assert first._notify_queue is None


async def test_the_starter_hears_the_close_on_its_own_queue_without_binding(
    database_url: str, no_fallback: Client
) -> None:
    """A run started while the client's queue is up names it (`runs.notify_queue`); its close is
    sent there too, so the waiter binds nothing, reads nothing and needs no fallback poll."""
    queue = await _queue_declared(no_fallback)
    listener = no_fallback.runs.listener
    assert listener is not None
    binds: list[str] = []
    bind = listener.bind

    async def counted(key: str) -> bool:
        binds.append(key)
        return await bind(key)

    listener.bind = counted  # type: ignore[method-assign]
    reads, polls = Calls(no_fallback, "get_run"), Calls(no_fallback, "closed_runs")
    async with Worker(app, settings=_settings(database_url, 60.0)):
        handle = await no_fallback.start_workflow(Counter.run, 0, task_queue=QUEUE)
        assert await handle.result(timeout=30) == 0
        assert reads.count == 0
        updated = await no_fallback.start_workflow(Counter.run, 2, task_queue=QUEUE)
        waiting = asyncio.create_task(updated.result(timeout=30))
        assert await updated.update(Counter.bump, 2, timeout=30) == 2  # same key, joins the watch
        assert await waiting == 2
    rows = await no_fallback.store.list_workflows(namespace=no_fallback.namespace, limit=10)
    assert {r.run_id for r in rows} >= {handle.run_id, updated.run_id}
    assert binds == []
    # The second waiter's: one unless it was just started, one more if the update's change
    # (same key, no outcome) woke it before the close.
    assert reads.count <= 2
    assert polls.count == 0
    assert queue == listener.queue_name


async def test_a_run_whose_starter_queue_is_gone_is_bound_as_any_other(
    database_url: str, no_fallback: Client
) -> None:
    """After a reconnect the client's queue is a new one: a run that named the old one is
    watched by binding its key, and its close arrives that way."""
    await _queue_declared(no_fallback)
    async with Worker(app, settings=_settings(database_url, 60.0)):
        handle = await no_fallback.start_workflow(Counter.run, 1, task_queue=QUEUE)
        handle._notify_queue = "amq.gen-gone-with-the-old-connection"
        reads = Calls(no_fallback, "get_run")
        waiter = Waiting(no_fallback)
        waiting = asyncio.create_task(handle.result(timeout=30))
        await waiter.wait()
        assert await handle.update(Counter.bump, 1, timeout=30) == 1
        assert await waiting == 1
    assert reads.count <= 2


async def test_a_just_started_run_whose_close_wake_is_lost_is_answered_by_the_poll(
    database_url: str,
) -> None:
    """Had a just-started run closed before its waiter was bound, or its wake been lost, no
    wake comes and no read was made: the fallback poll answers, at its interval."""
    client = await _losing_every_wake(database_url)
    polls = Calls(client, "closed_runs")
    reads = Calls(client, "get_run")
    try:
        async with Worker(app, settings=_settings(database_url, 0.2)):
            handle = await client.start_workflow(Counter.run, 0, task_queue=QUEUE)
            assert await handle.result(timeout=30) == 0
    finally:
        await client.close()
    assert polls.count >= 1
    assert reads.count == 0  # the poll that saw the run closed also said how


async def test_an_outcome_too_large_for_its_wake_is_read_back(
    database_url: str, no_fallback: Client
) -> None:
    """Above MAX_OUTCOME_BYTES the wake comes without the outcome: the waiter reads the run."""
    size = MAX_OUTCOME_BYTES * 2
    started = await no_fallback.start_workflow(Large.run, size, task_queue=QUEUE)
    handle = no_fallback.get_handle(started.workflow_id, run_id=started.run_id)
    reads = Calls(no_fallback, "get_run")
    waiting = asyncio.ensure_future(handle.result(timeout=30))
    await asyncio.wait_for(reads.called.wait(), timeout=10)  # read while still open
    async with Worker(large_app, settings=_settings(database_url, 60.0)):
        assert await waiting == "x" * size
    assert reads.count >= 2  # before waiting, and after the wake


async def test_a_terminated_run_raises_from_its_wake(
    database_url: str, no_fallback: Client
) -> None:
    async with Worker(app, settings=_settings(database_url, 60.0)):
        handle = await no_fallback.start_workflow(Counter.run, 9, task_queue=QUEUE)
        waiter = Waiting(no_fallback)
        waiting = asyncio.create_task(handle.result(timeout=30))
        await waiter.wait()
        reads = Calls(no_fallback, "get_run")
        await handle.terminate(reason="enough")
        with pytest.raises(WorkflowFailureError) as raised:
            await waiting
    assert raised.value.status == "terminated"
    assert "enough" in str(raised.value)
    assert reads.count == 0  # the waiter heard the outcome


async def test_update_and_query_answers_are_woken(database_url: str, no_fallback: Client) -> None:
    async with Worker(app, settings=_settings(database_url, 60.0)):
        handle = await no_fallback.start_workflow(Counter.run, 5, task_queue=QUEUE)
        assert await handle.update(Counter.bump, 2, timeout=30) == 2
        assert await handle.query(Counter.current, timeout=30) == 2
        assert await handle.update(Counter.bump, 3, timeout=30) == 5
        assert await handle.result(timeout=30) == 5


async def test_lost_result_wakes_cost_only_the_fallback_interval(database_url: str) -> None:
    """Every result wake lost (the client's queue is bound to keys nobody publishes, so wakes
    seem to flow): the fallback poll at its interval answers."""
    client = await _losing_every_wake(database_url)
    polls = Calls(client, "closed_runs")
    reads = Calls(client, "get_run")
    try:
        started = await client.start_workflow(Counter.run, 0, task_queue=QUEUE)
        handle = client.get_handle(started.workflow_id, run_id=started.run_id)
        waiting = asyncio.ensure_future(handle.result(timeout=30))
        await asyncio.wait_for(reads.called.wait(), timeout=10)  # read while still open
        async with Worker(app, settings=_settings(database_url, 0.2)):
            assert await waiting == 0
    finally:
        await client.close()
    assert polls.count >= 1
    # Once before waiting (and once more if a resync woke it early): the poll that saw the run
    # closed also said how, so no read follows it.
    assert reads.count <= 2


async def test_many_waiters_share_one_fallback_query(database_url: str) -> None:
    """300 result() waiters for 2 s: each reads its run at most twice, and the fallback asks
    Postgres once per interval for all of them."""
    waiters, seconds, interval = 300, 2.0, 0.1
    client = await Client.connect(settings=_settings(database_url, interval))
    try:
        handles = [
            await client.start_workflow(Counter.run, 1, task_queue=QUEUE, check_workers=False)
            for _ in range(waiters)
        ]
        reads = Calls(client, "get_run")
        polls = Calls(client, "closed_runs")
        outcomes = await asyncio.gather(
            *(h.result(timeout=seconds) for h in handles), return_exceptions=True
        )
    finally:
        await client.close()
    assert all(isinstance(o, TimeoutError) for o in outcomes)
    # Once watched, and once more if its wait ended before the deadline (the timeout): never
    # once per interval.
    assert waiters <= reads.count <= 2 * waiters
    assert polls.count <= seconds / interval + 5
