"""The sticky cache: suspended workflow instances a worker keeps warm between tasks (S1, S2, S6).

It is an optimisation only. An entry is used when it stands exactly at the sequence the next
task's events continue from, with the same build and workflow definition; anything else is a
miss and the task cold-replays from durable history. An entry is taken out while its task runs
and put back only after that task's completion committed, so a cached instance never holds
commands history does not have.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from enum import StrEnum

import structlog

from burrow.replay.instance import WorkflowInstance
from burrow.store.models import RunPosition, StickyCacheReport
from burrow.workflow.definition import WorkflowDefinition

log = structlog.get_logger("burrow.worker")

# What a suspended run holds in memory besides its events' stored payloads. bench/warm_runs.py
# measured about 10.5 KiB of worker resident memory per cached run (its event loop, coroutine
# frames, state); a replayed instance also keeps each recorded step event it matched, about
# 0.5 KiB each (tracemalloc). Stored payload bytes alone, a few hundred bytes for a short run,
# let a byte cap hold runs weighing 40 times more.
INSTANCE_BYTES = 12 * 1024
RECORDED_STEP_BYTES = 512


class Eviction(StrEnum):
    """Why an entry left the cache (S2: the worker owns eviction)."""

    CAPACITY = "capacity"
    BYTES = "bytes"
    DRAIN = "drain"
    CLOSED = "run_closed"
    BUILD_CHANGED = "build_changed"
    DEFINITION_CHANGED = "definition_changed"
    """S8: the run was started on another definition of its type than this worker runs."""
    GAP = "history_gap"
    REPLAY_FAILED = "replay_failed"
    NOT_COMMITTED = "completion_not_committed"
    SERVER_CHANGED = "database_server_changed"
    """The store reached another server since (a failover): the history it committed to may
    have lost its last commits (store/server_epochs.py)."""


@dataclass(slots=True)
class CachedRun:
    """One suspended run: its instance, and what it must match to be resumed."""

    instance: WorkflowInstance
    build_id: str | None
    definition: WorkflowDefinition
    approximate_bytes: int
    """Stored bytes of the history events the instance read."""
    position: RunPosition | None = None
    """The run as the instance's last completion left it, with the database clock of its
    claim: what a completion written together with an activity's result checks
    (worker/completion.py).
    """
    server_epoch: int = 0
    """The store's server epoch when the task this entry stands after was claimed."""
    weight: int = 0
    """Resident bytes the cache counts for the entry, set when it is put in."""

    @property
    def last_seq(self) -> int:
        """The last history sequence the instance applied."""
        return self.instance.last_seq


class StickyCache:
    """An LRU of suspended runs bounded by count and by their approximate resident bytes.

    An entry weighs its history's stored bytes plus `instance_bytes`, and `step_bytes` per
    recorded step event its instance keeps: what a suspended instance holds besides payloads.

    Args:
        capacity: Runs kept at most; 0 turns the cache (and sticky routing) off.
        max_bytes: Approximate resident bytes of the cached runs kept at most.
        instance_bytes: Bytes counted per cached run besides its events.
        step_bytes: Bytes counted per recorded step event a cached instance keeps.
    """

    def __init__(
        self,
        *,
        capacity: int,
        max_bytes: int,
        instance_bytes: int = INSTANCE_BYTES,
        step_bytes: int = RECORDED_STEP_BYTES,
    ) -> None:
        self.capacity = capacity
        self.max_bytes = max_bytes
        self.instance_bytes = instance_bytes
        self.step_bytes = step_bytes
        self._entries: OrderedDict[str, CachedRun] = OrderedDict()
        self._bytes = 0
        self.hits = 0
        self.misses = 0
        self.forced_cold_replays = 0
        self.evictions = 0

    @property
    def enabled(self) -> bool:
        """Whether this worker keeps runs warm at all."""
        return self.capacity > 0

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, run_id: object) -> bool:
        return run_id in self._entries

    @property
    def approximate_bytes(self) -> int:
        """Approximate resident bytes of the runs held now."""
        return self._bytes

    def get(self, run_id: str) -> CachedRun | None:
        """The run's entry, left in place; None when not held."""
        return self._entries.get(run_id)

    def take(
        self,
        run_id: str,
        *,
        build_id: str | None,
        definition: WorkflowDefinition,
        server_epoch: int = 0,
    ) -> CachedRun | None:
        """Remove and return the run's entry if it may run this code; a stale one is evicted.

        An entry made on another database server than the store's now (`server_epoch`) is
        stale too: after a failover its history may not be there.
        """
        entry = self._entries.pop(run_id, None)
        if entry is None:
            return None
        self._bytes -= entry.weight
        if entry.build_id != build_id or entry.definition is not definition:
            self.discard(run_id, Eviction.BUILD_CHANGED)
            return None
        if entry.server_epoch != server_epoch:
            self.discard(run_id, Eviction.SERVER_CHANGED)
            return None
        return entry

    def put(self, run_id: str, entry: CachedRun) -> None:
        """Keep a run warm after its task committed, evicting the least recently used."""
        if not self.enabled:
            return
        # An older entry of the run is stale now, kept or not: replaced, not counted.
        older = self._entries.pop(run_id, None)
        if older is not None:
            self._bytes -= older.weight
        entry.weight = self.weigh(entry)
        if entry.weight > self.max_bytes:
            self.discard(run_id, Eviction.BYTES)
            return
        self._entries[run_id] = entry
        self._bytes += entry.weight
        while len(self._entries) > self.capacity:
            self.evict(next(iter(self._entries)), Eviction.CAPACITY)
        while self._bytes > self.max_bytes:
            self.evict(next(iter(self._entries)), Eviction.BYTES)

    def weigh(self, entry: CachedRun) -> int:
        """The resident bytes an entry is counted for: its payloads, instance and kept steps."""
        steps = entry.instance.recorded_steps
        return entry.approximate_bytes + self.instance_bytes + self.step_bytes * steps

    def evict(self, run_id: str, reason: Eviction) -> None:
        """Drop the run's entry, if held."""
        entry = self._entries.pop(run_id, None)
        if entry is not None:
            self._bytes -= entry.weight
            entry.instance.release()  # freed now, not at the next full garbage collection
            self.discard(run_id, reason)

    def discard(self, run_id: str, reason: Eviction) -> None:
        """Count an entry that leaves the cache (taken and not put back, or evicted)."""
        self.evictions += 1
        log.debug("sticky_cache_evicted", run_id=run_id, reason=str(reason))

    def clear(self, reason: Eviction) -> None:
        """Evict everything (drain, shutdown)."""
        for run_id in list(self._entries):
            self.evict(run_id, reason)

    def report(self) -> StickyCacheReport:
        """The figures a heartbeat carries (S10)."""
        return StickyCacheReport(
            enabled=self.enabled,
            capacity=self.capacity,
            size=len(self._entries),
            hit_count=self.hits,
            miss_count=self.misses,
            forced_cold_replay_count=self.forced_cold_replays,
            eviction_count=self.evictions,
            approximate_bytes=self._bytes,
            max_bytes=self.max_bytes,
        )
