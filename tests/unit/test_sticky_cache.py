"""The worker's sticky cache (S1, S2, S6, S10): LRU by count and bytes, stale entries never used.

Entries hold real suspended instances of a small workflow that waits for signals, so each
entry's `last_seq` is what its instance really applied.
"""

from __future__ import annotations

import dataclasses
import gc
import sys
import uuid
import weakref
from datetime import UTC, datetime

import pytest

from burrow import codec, workflow
from burrow.protocol import events
from burrow.protocol.events import HistoryEvent
from burrow.replay.instance import RunContext, WorkflowInstance
from burrow.store.models import StickyCacheReport
from burrow.store.server_epochs import ServerEpochs
from burrow.worker.sticky_cache import (
    INSTANCE_BYTES,
    CachedRun,
    Eviction,
    StickyCache,
)
from burrow.workflow.definition import WorkflowDefinition, get_definition


@workflow.defn(name="Counter")
class Counter:
    def __init__(self) -> None:
        self.count = 0

    @workflow.signal
    def bump(self) -> None:
        self.count += 1

    @workflow.run
    async def run(self) -> int:
        await workflow.wait_condition(lambda: self.count >= 1_000)
        return self.count


@workflow.defn(name="Counter")
class CounterRedeployed:
    """The same workflow type, loaded again: another definition (S8: the fingerprint decides)."""

    @workflow.run
    async def run(self) -> int:
        return 0


@workflow.defn(name="Napper")
class Napper:
    @workflow.run
    async def run(self) -> None:
        await workflow.sleep(3600)  # suspended on a durable timer, whose cleanup cancels it


COUNTER = get_definition(Counter)
NAPPER = get_definition(Napper)
REDEPLOYED = get_definition(CounterRedeployed)
AT = datetime(2024, 1, 1, tzinfo=UTC)


def started(run_id: str, workflow_type: str) -> tuple[RunContext, HistoryEvent]:
    """A run of `workflow_type` without input, and its WorkflowStarted event (step 1)."""
    context = RunContext(
        run_id=run_id,
        workflow_id=f"wf-{run_id}",
        workflow_type=workflow_type,
        namespace="default",
        task_queue="q",
        input=codec.encode([]),
    )
    event = events.WorkflowStarted(
        workflow_type=workflow_type,
        workflow_instance_id=context.workflow_id,
        workflow_run_id=run_id,
    )
    return context, HistoryEvent(run_id, 1, event, AT, workflow_task_id="task-1")


def suspended(run_id: str, last_seq: int) -> WorkflowInstance:
    """An instance of Counter that applied WorkflowStarted and signals up to `last_seq`.

    Each event is its own activation, as if each signal had woken a workflow task.
    """
    context, first = started(run_id, "Counter")
    history = [first]
    for seq in range(2, last_seq + 1):
        signal = events.SignalReceived(
            signal_id=f"s{seq}",
            signal_name="bump",
            workflow_instance_id=context.workflow_id,
            workflow_run_id=run_id,
            arguments=codec.encode([]),
        )
        history.append(HistoryEvent(run_id, seq, signal, AT, workflow_task_id=f"task-{seq}"))
    instance = WorkflowInstance(definition=COUNTER, run=context)
    activation = instance.activate(history)
    assert activation.failure is None, activation.failure
    assert instance.last_seq == last_seq
    return instance


def entry(
    run_id: str | None = None,
    *,
    last_seq: int = 1,
    size: int = 10,
    build_id: str | None = "b1",
    definition: WorkflowDefinition = COUNTER,
) -> tuple[str, CachedRun]:
    run_id = run_id or str(uuid.uuid4())
    cached = CachedRun(
        instance=suspended(run_id, last_seq),
        build_id=build_id,
        definition=definition,
        approximate_bytes=size,
    )
    return run_id, cached


def cache(capacity: int = 10, max_bytes: int = 1_000) -> StickyCache:
    """A cache that weighs entries by their history bytes alone (the LRU tests' sizes)."""
    return StickyCache(capacity=capacity, max_bytes=max_bytes, instance_bytes=0, step_bytes=0)


def put(sticky: StickyCache, *entries: tuple[str, CachedRun]) -> list[str]:
    for run_id, cached in entries:
        sticky.put(run_id, cached)
    return [run_id for run_id, _ in entries]


# -- bounds ------------------------------------------------------------------------------------


def test_capacity_evicts_the_least_recently_kept_run() -> None:
    """S2: past its capacity the cache drops the run put back longest ago."""
    sticky = cache(capacity=2)
    a, b = put(sticky, entry(), entry())
    taken = sticky.take(a, build_id="b1", definition=COUNTER)
    assert taken is not None
    sticky.put(a, taken)  # a ran again: now b is the least recently used

    [c] = put(sticky, entry())

    assert (a in sticky, b in sticky, c in sticky) == (True, False, True)
    assert len(sticky) == 2
    assert sticky.evictions == 1


def test_byte_budget_evicts_the_oldest_runs_until_it_fits() -> None:
    """S2: the history bytes held stay within max_bytes, oldest runs leaving first."""
    sticky = cache(capacity=10, max_bytes=100)
    a, b, c = put(sticky, entry(size=40), entry(size=40), entry(size=40))

    assert (a in sticky, b in sticky, c in sticky) == (False, True, True)
    assert sticky.approximate_bytes == 80
    [d] = put(sticky, entry(size=100))
    assert (b in sticky, c in sticky, d in sticky) == (False, False, True)
    assert sticky.approximate_bytes == 100
    assert sticky.evictions == 3


def test_an_entry_larger_than_the_byte_budget_is_refused() -> None:
    """S2: a run whose history alone exceeds max_bytes is not kept, and evicts nothing else."""
    sticky = cache(max_bytes=100)
    [kept] = put(sticky, entry(size=60))

    [big] = put(sticky, entry(size=101))

    assert big not in sticky
    assert kept in sticky
    assert sticky.approximate_bytes == 60
    assert sticky.evictions == 1


def test_a_refused_entry_drops_the_older_entry_of_its_run() -> None:
    """S1, S6: when a run's new state cannot be kept, its older state must not stay cached."""
    sticky = cache(max_bytes=100)
    run_id, small = entry(last_seq=2, size=10)
    sticky.put(run_id, small)

    sticky.put(run_id, entry(run_id, last_seq=3, size=101)[1])

    assert run_id not in sticky


def test_putting_a_run_again_replaces_its_entry() -> None:
    """S2: one entry per run; the bytes count the new entry only."""
    sticky = cache()
    run_id, first = entry(last_seq=2, size=10)
    sticky.put(run_id, first)

    sticky.put(run_id, entry(run_id, last_seq=3, size=30)[1])

    assert len(sticky) == 1
    assert sticky.approximate_bytes == 30
    taken = sticky.take(run_id, build_id="b1", definition=COUNTER)
    assert taken is not None and taken.last_seq == 3


# -- take: only an entry that may run this code ------------------------------------------------


def test_take_hands_out_the_entry_once() -> None:
    """S6: an entry is out of the cache while its task runs; a second take misses."""
    sticky = cache()
    [run_id] = put(sticky, entry(size=25))

    taken = sticky.take(run_id, build_id="b1", definition=COUNTER)

    assert taken is not None
    assert taken.last_seq == 1
    assert run_id not in sticky
    assert sticky.approximate_bytes == 0
    assert sticky.take(run_id, build_id="b1", definition=COUNTER) is None
    assert sticky.take(str(uuid.uuid4()), build_id="b1", definition=COUNTER) is None
    assert sticky.evictions == 0


@pytest.mark.parametrize(
    ("build_id", "definition"),
    [("b2", COUNTER), (None, COUNTER), ("b1", REDEPLOYED)],
    ids=["other-build", "no-build", "other-definition"],
)
def test_take_after_a_build_or_definition_change_evicts_the_entry(
    build_id: str | None, definition: WorkflowDefinition
) -> None:
    """S2, S8: a warm instance of other code is never resumed: evicted, the task replays cold."""
    sticky = cache()
    [run_id] = put(sticky, entry(size=25, build_id="b1"))

    assert sticky.take(run_id, build_id=build_id, definition=definition) is None

    assert run_id not in sticky
    assert sticky.approximate_bytes == 0
    assert sticky.evictions == 1


def test_take_after_the_database_server_changed_evicts_the_entry() -> None:
    """S6, D4: an entry made before a failover is never resumed: after a promotion of an async
    standby its last completions may be gone, and the instance would stand past the history."""
    sticky = cache()
    run_id, cached = entry(size=25)
    sticky.put(run_id, dataclasses.replace(cached, server_epoch=0))

    assert sticky.take(run_id, build_id="b1", definition=COUNTER, server_epoch=1) is None

    assert (run_id in sticky, sticky.approximate_bytes, sticky.evictions) == (False, 0, 1)
    again_id, again = entry(size=25)
    sticky.put(again_id, dataclasses.replace(again, server_epoch=1))
    assert sticky.take(again_id, build_id="b1", definition=COUNTER, server_epoch=1) is not None


def test_server_epochs_move_only_when_another_server_answers() -> None:
    """D4: the epoch counts servers (their start times), not connections."""
    epochs = ServerEpochs()
    first, second = datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 1, 2, tzinfo=UTC)
    for started in (first, first, second, second, first):
        epochs.connected(started)
    assert epochs.epoch == 2


def test_evict_and_clear_drop_entries_and_count_them() -> None:
    """S2, S8: eviction by the worker (unsafe state, drain) counts each entry that leaves."""
    sticky = cache()
    a, b, c = put(sticky, entry(), entry(), entry())

    sticky.evict(a, Eviction.REPLAY_FAILED)
    sticky.evict(str(uuid.uuid4()), Eviction.REPLAY_FAILED)  # not held: nothing to count
    assert (len(sticky), sticky.evictions) == (2, 1)
    sticky.clear(Eviction.DRAIN)

    assert (b in sticky, c in sticky) == (False, False)
    assert (len(sticky), sticky.approximate_bytes, sticky.evictions) == (0, 0, 3)


# -- what heartbeats read ----------------------------------------------------------------------


def test_report_carries_the_figures_a_heartbeat_sends() -> None:
    """S10: enabled, capacity, size, hits, misses, forced cold replays, evictions, bytes."""
    sticky = cache(capacity=2, max_bytes=500)
    put(sticky, entry(size=40), entry(size=60), entry(size=70))
    sticky.hits, sticky.misses, sticky.forced_cold_replays = 4, 2, 1

    report = sticky.report()

    assert report == StickyCacheReport(
        enabled=True,
        capacity=2,
        size=2,
        hit_count=4,
        miss_count=2,
        forced_cold_replay_count=1,
        eviction_count=1,
        approximate_bytes=130,
        max_bytes=500,
    )


def test_capacity_zero_turns_the_cache_off() -> None:
    """S3, S9: a worker without a cache keeps nothing and reports itself disabled."""
    sticky = cache(capacity=0)

    [run_id] = put(sticky, entry())

    assert not sticky.enabled
    assert run_id not in sticky
    assert sticky.take(run_id, build_id="b1", definition=COUNTER) is None
    report = sticky.report()
    assert (report.enabled, report.capacity, report.size, report.eviction_count) == (
        False,
        0,
        0,
        0,
    )


# -- resident weight: what a suspended run holds besides its stored payloads ------------------


def _marker() -> int:
    return 0


@workflow.defn(name="Marks")
class Marks:
    """Records `n` side effects, then waits for a signal that never comes."""

    def __init__(self) -> None:
        self.go = False

    @workflow.signal
    def bump(self) -> None:
        self.go = True

    @workflow.run
    async def run(self, n: int) -> int:
        for _ in range(n):
            await workflow.side_effect(_marker)
        await workflow.wait_condition(lambda: self.go)
        return n


def replayed_marks(steps: int) -> WorkflowInstance:
    """A Marks instance replayed cold from a history of `steps` recorded side effects."""
    run_id = str(uuid.uuid4())
    context = RunContext(
        run_id=run_id,
        workflow_id=f"wf-{run_id}",
        workflow_type="Marks",
        namespace="default",
        task_queue="q",
        input=codec.encode([steps]),
    )
    started = events.WorkflowStarted(
        workflow_type="Marks", workflow_instance_id=context.workflow_id, workflow_run_id=run_id
    )
    blob = codec.encode(0)
    history = [HistoryEvent(run_id, 1, started, AT, workflow_task_id="task-1")]
    for step in range(1, steps + 1):
        mark = events.SideEffectRecorded(
            sequence=step, result=str(blob["blob"]), payload_codec=str(blob["codec"])
        )
        history.append(HistoryEvent(run_id, step + 1, mark, AT, workflow_task_id="task-1"))
    instance = WorkflowInstance(definition=get_definition(Marks), run=context)
    activation = instance.activate(history)
    assert activation.failure is None, activation.failure
    return instance


def test_an_entry_weighs_its_instance_besides_its_payloads() -> None:
    """S2: a run is counted for its suspended instance, not for its stored payloads only.

    Stored payload bytes alone (a few hundred for a short run) let a byte cap hold runs whose
    instances weigh 40 times more, so memory grew far past the cap (bench/warm_runs.py).
    """
    sticky = StickyCache(capacity=10, max_bytes=10 * 1024 * 1024)
    run_id, cached = entry(last_seq=5, size=300)

    sticky.put(run_id, cached)

    assert cached.instance.recorded_steps == 0  # signals are inputs, not recorded steps
    assert cached.weight == 300 + INSTANCE_BYTES
    assert sticky.approximate_bytes == cached.weight
    assert sticky.report().approximate_bytes == cached.weight


def test_a_replayed_entry_keeps_no_recorded_step_its_code_has_passed() -> None:
    """S2, S6, issue 32: a step is matched once, so a cold-replayed instance lets its records go.

    Seven recorded side effects, all reached: the entry weighs what a warm one does.
    """
    sticky = StickyCache(capacity=10, max_bytes=10 * 1024 * 1024)
    instance = replayed_marks(7)
    cached = CachedRun(
        instance=instance, build_id="b1", definition=instance.definition, approximate_bytes=90
    )

    sticky.put(instance.run.run_id, cached)

    assert instance.recorded_steps == 0
    assert sticky.approximate_bytes == 90 + INSTANCE_BYTES


def test_a_byte_cap_bounds_many_short_runs_by_their_resident_weight() -> None:
    """S2: short runs with tiny payloads are evicted once their instances fill the cap."""
    one = INSTANCE_BYTES + 200
    sticky = StickyCache(capacity=1_000, max_bytes=10 * one)

    kept = put(sticky, *(entry(size=200) for _ in range(25)))

    assert len(sticky) == 10
    assert sticky.approximate_bytes == 10 * one <= sticky.max_bytes
    assert [run_id in sticky for run_id in kept] == [False] * 15 + [True] * 10
    assert sticky.evictions == 15


def test_a_run_put_back_is_weighed_again() -> None:
    """S2: a warm task read more history; its entry is counted for it when kept again."""
    sticky = StickyCache(capacity=10, max_bytes=10 * 1024 * 1024)
    run_id, cached = entry(last_seq=2, size=100)
    sticky.put(run_id, cached)
    taken = sticky.take(run_id, build_id="b1", definition=COUNTER)
    assert taken is not None and sticky.approximate_bytes == 0
    taken.approximate_bytes += 50

    sticky.put(run_id, taken)

    assert sticky.approximate_bytes == 150 + INSTANCE_BYTES
    sticky.evict(run_id, Eviction.CAPACITY)
    assert sticky.approximate_bytes == 0


def test_an_evicted_instance_lets_go_of_its_state_at_once() -> None:
    """S2: eviction frees what an instance holds without waiting for a full garbage collection.

    An instance's loop, task and coroutine refer to each other, so an evicted run would only be
    freed by Python's cyclic collector; under a byte cap, evicted runs piled up meanwhile.
    """
    sticky = StickyCache(capacity=1, max_bytes=10 * 1024 * 1024)
    first, cached = entry(last_seq=3)
    sticky.put(first, cached)
    state = weakref.ref(cached.instance.rng)
    gc.disable()
    try:
        [second] = put(sticky, entry())  # over capacity: the first run is evicted
        del cached

        assert first not in sticky and second in sticky
        assert state() is None
    finally:
        gc.enable()
    kept = sticky.take(second, build_id="b1", definition=COUNTER)
    assert kept is not None and kept.instance.last_seq == 1  # the one held is intact


def test_an_evicted_instance_runs_its_code_cleanup_before_letting_go(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """S2: an evicted instance suspended in `workflow.sleep` closes its coroutine while its state
    is whole: the sleep's cleanup cancels its timer through the instance. Left to the collector,
    that cleanup ran after the state was cleared and raised in the collector."""
    raised: list[BaseException | None] = []
    monkeypatch.setattr(sys, "unraisablehook", lambda hook: raised.append(hook.exc_value))
    run_id = str(uuid.uuid4())
    context, first = started(run_id, "Napper")
    instance = WorkflowInstance(definition=NAPPER, run=context)
    activation = instance.activate([first])
    assert [type(c).__name__ for c in activation.commands] == ["StartTimer"]
    sticky = StickyCache(capacity=1, max_bytes=10 * 1024 * 1024)
    sticky.put(run_id, CachedRun(instance, "b1", NAPPER, approximate_bytes=10))

    sticky.evict(run_id, Eviction.CAPACITY)
    del instance, activation
    gc.collect()

    assert raised == []
