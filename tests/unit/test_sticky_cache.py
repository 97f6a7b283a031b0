"""The worker's sticky cache (S1, S2, S6, S10): LRU by count and bytes, stale entries never used.

Entries hold real suspended instances of a small workflow that waits for signals, so each
entry's `last_seq` is what its instance really applied.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest

from burrow import codec, workflow
from burrow.protocol import events
from burrow.protocol.events import HistoryEvent
from burrow.replay.instance import RunContext, WorkflowInstance
from burrow.store.models import StickyCacheReport
from burrow.worker.sticky_cache import CachedRun, Eviction, StickyCache
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


COUNTER = get_definition(Counter)
REDEPLOYED = get_definition(CounterRedeployed)
AT = datetime(2024, 1, 1, tzinfo=UTC)


def suspended(run_id: str, last_seq: int) -> WorkflowInstance:
    """An instance of Counter that applied WorkflowStarted and signals up to `last_seq`.

    Each event is its own activation, as if each signal had woken a workflow task.
    """
    context = RunContext(
        run_id=run_id,
        workflow_id=f"wf-{run_id}",
        workflow_type="Counter",
        namespace="default",
        task_queue="q",
        input=codec.encode([]),
    )
    started = events.WorkflowStarted(
        workflow_type="Counter", workflow_instance_id=context.workflow_id, workflow_run_id=run_id
    )
    history = [HistoryEvent(run_id, 1, started, AT, workflow_task_id="task-1")]
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
    return StickyCache(capacity=capacity, max_bytes=max_bytes)


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
