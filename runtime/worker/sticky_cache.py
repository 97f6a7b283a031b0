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


@dataclass(slots=True)
class CachedRun:
    """One suspended run: its instance, and what it must match to be resumed."""

    instance: WorkflowInstance
    build_id: str | None
    definition: WorkflowDefinition
    approximate_bytes: int
    position: RunPosition | None = None
    """The run as the instance's last completion left it, with the database clock of its
    claim: what a completion written together with an activity's result checks
    (worker/completion.py).
    """

    @property
    def last_seq(self) -> int:
        """The last history sequence the instance applied."""
        return self.instance.last_seq


class StickyCache:
    """An LRU of suspended runs bounded by count and by approximate history bytes.

    Args:
        capacity: Runs kept at most; 0 turns the cache (and sticky routing) off.
        max_bytes: Stored history bytes of the cached runs kept at most.
    """

    def __init__(self, *, capacity: int, max_bytes: int) -> None:
        self.capacity = capacity
        self.max_bytes = max_bytes
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
        """Stored history bytes of the runs held now."""
        return self._bytes

    def get(self, run_id: str) -> CachedRun | None:
        """The run's entry, left in place; None when not held."""
        return self._entries.get(run_id)

    def take(
        self, run_id: str, *, build_id: str | None, definition: WorkflowDefinition
    ) -> CachedRun | None:
        """Remove and return the run's entry if it may run this code; a stale one is evicted."""
        entry = self._entries.pop(run_id, None)
        if entry is None:
            return None
        self._bytes -= entry.approximate_bytes
        if entry.build_id != build_id or entry.definition is not definition:
            self.discard(run_id, Eviction.BUILD_CHANGED)
            return None
        return entry

    def put(self, run_id: str, entry: CachedRun) -> None:
        """Keep a run warm after its task committed, evicting the least recently used."""
        if not self.enabled:
            return
        # An older entry of the run is stale now, kept or not: replaced, not counted.
        older = self._entries.pop(run_id, None)
        if older is not None:
            self._bytes -= older.approximate_bytes
        if entry.approximate_bytes > self.max_bytes:
            self.discard(run_id, Eviction.BYTES)
            return
        self._entries[run_id] = entry
        self._bytes += entry.approximate_bytes
        while len(self._entries) > self.capacity:
            self.evict(next(iter(self._entries)), Eviction.CAPACITY)
        while self._bytes > self.max_bytes:
            self.evict(next(iter(self._entries)), Eviction.BYTES)

    def evict(self, run_id: str, reason: Eviction) -> None:
        """Drop the run's entry, if held."""
        entry = self._entries.pop(run_id, None)
        if entry is not None:
            self._bytes -= entry.approximate_bytes
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
