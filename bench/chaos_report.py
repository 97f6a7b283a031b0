"""What a chaos soak is asked to do and what it saw: its options, each fault, the report.

Recovery (`Fault.recovery`) is defined in bench/chaos.py's module docstring.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bench.invariants import InvariantReport, Violation

FAULT_KINDS = ("rabbit", "postgres", "kill", "rabbit_node", "failover")
CLUSTER_KINDS = ("rabbit_node", "failover")
Interval = tuple[float, float]


@dataclass
class SoakOptions:
    """What to run and which faults to inject (None: that fault is off)."""

    workflows: int = 1000
    workers: int = 2
    rabbit_every: Interval | None = (5.0, 40.0)
    postgres_every: Interval | None = (20.0, 60.0)
    kill_every: Interval | None = (5.0, 20.0)
    rabbit_cluster: bool = False  # a three-node cluster; its fault stops one node (rabbit_node)
    rabbit_node_every: Interval | None = (10.0, 30.0)
    postgres_failover: bool = False  # a primary and a standby; its fault fails over, once
    failover_every: Interval | None = (5.0, 15.0)
    replication: str = "sync"  # sync or async, with postgres_failover
    max_faults: dict[str, int] = field(default_factory=dict)  # kind -> at most this many
    down_for: Interval = (1.0, 5.0)
    restart_delay: float = 0.5
    rate: float = 0.0  # workflow starts per second; 0: as fast as 64 in flight allow
    signal_delay: Interval = (0.0, 2.0)
    lease_seconds: float = 3.0
    repoll_seconds: float = 1.0
    sample_every: float = 1.0  # seconds between ready-work samples while the soak runs
    sample_stale_after: float = 5.0  # a sample reports work waiting longer than this
    concurrency: int = 16
    workflow_concurrency: int = 8
    timeout: float = 1800.0
    seed: int | None = None
    log_dir: Path | None = None
    log_level: str = "WARNING"
    echo: Callable[[str], None] = print

    def every(self, kind: str) -> Interval | None:
        """A restart needs the single server: a cluster mode replaces that fault by its own."""
        return {
            "rabbit": None if self.rabbit_cluster else self.rabbit_every,
            "postgres": None if self.postgres_failover else self.postgres_every,
            "kill": self.kill_every,
            "rabbit_node": self.rabbit_node_every if self.rabbit_cluster else None,
            "failover": self.failover_every if self.postgres_failover else None,
        }[kind]


@dataclass
class Fault:
    """One injected fault and what the soak saw of its recovery (times: time.time())."""

    kind: str
    started: float
    back: float = math.nan
    detail: str = ""
    leases: list[tuple[str, str]] | None = None  # (task id, lease token) held at the start
    progress_at: float | None = None
    resumed_at: float | None = None
    needs_progress: bool = True
    recovered: bool = False
    overlapped: bool = False

    def summary(self, t0: float) -> str:
        """One line: when, what, and its recovery with both parts (see the module docstring)."""

        def part(at: float | None) -> str:
            return "-" if at is None else f"{at - self.back:.2f}s"

        state = "idle" if self.idle else f"{self.recovery:.2f}s" if self.recovered else "never"
        return (
            f"recovery {self.kind} at {self.started - t0:.1f}s ({self.detail}): {state}"
            f" (progress {part(self.progress_at)}, resumed {part(self.resumed_at)})"
            + (" overlapped" if self.overlapped else "")
        )

    @property
    def idle(self) -> bool:
        """Nothing to recover: no run was open at `back` and no lease was held at the start."""
        return self.recovered and not self.needs_progress and not self.leases

    @property
    def recovery(self) -> float:
        """Seconds from `back` to recovery (see the module docstring); NaN if not recovered."""
        if not self.recovered:
            return math.nan
        ends = [t for t in (self.progress_at, self.resumed_at) if t is not None]
        return max([0.0, *(t - self.back for t in ends)])


@dataclass
class ReadySamples:
    """The ready-work invariant sampled while the soak ran (see bench/chaos.py)."""

    checked: int = 0  # samples taken outside every fault window
    skipped: int = 0  # samples not taken: within a fault window
    failed: int = 0  # samples that could not read the store (Postgres down)
    stale: int = 0  # violations seen across the checked samples
    examples: list[Violation] = field(default_factory=list)

    def lines(self) -> list[str]:
        out = [
            f"ready_samples_checked: {self.checked}",
            f"ready_samples_skipped: {self.skipped}",
            f"ready_samples_failed: {self.failed}",
            f"ready_samples_stale: {self.stale}",
        ]
        return out + [f"# sampled {v.kind} {v.where}: {v.detail}" for v in self.examples[:20]]


@dataclass
class SoakReport:
    """Everything a soak saw: faults, client retries, worker exits and the invariant report."""

    options: SoakOptions
    invariants: InvariantReport | None = None
    faults: list[Fault] = field(default_factory=list)
    all_closed: bool = False
    wall_seconds: float = 0.0
    started: float = 0.0  # time.time() of the first start; fault times are printed from it
    worker_restarts: int = 0
    unexpected_worker_exits: list[str] = field(default_factory=list)
    client_retries: Counter[str] = field(default_factory=Counter)
    client_errors: list[str] = field(default_factory=list)
    ready_samples: ReadySamples = field(default_factory=ReadySamples)
    acked: dict[str, list[float]] = field(default_factory=dict)  # id -> start/signal acks
    loss_window: Interval | None = None  # async failover: acks in it may be lost
    expected_losses: list[Violation] = field(default_factory=list)

    def count(self, kind: str) -> int:
        return sum(1 for f in self.faults if f.kind == kind)

    @property
    def ok(self) -> bool:
        """Every workflow closed as expected and no invariant broken, at the end or sampled."""
        return (
            self.all_closed
            and self.invariants is not None
            and self.invariants.ok
            and self.ready_samples.stale == 0
        )

    def lines(self) -> list[str]:
        out = [f"wall_seconds: {self.wall_seconds:.1f}", f"all_closed: {self.all_closed}"]
        for kind in FAULT_KINDS:
            faults = [f for f in self.faults if f.kind == kind]
            if kind in CLUSTER_KINDS and not faults and self.options.every(kind) is None:
                continue  # a cluster mode not asked for
            times = sorted(f.recovery for f in faults if f.recovered and not f.idle)
            out.append(f"faults_{kind}: {len(faults)}")
            out.append(f"recovery_{kind}_measured: {len(times)}")
            out.append(f"recovery_{kind}_idle: {sum(1 for f in faults if f.idle)}")
            out.append(
                f"recovery_{kind}_not_recovered: {sum(1 for f in faults if not f.recovered)}"
            )
            out.append(f"recovery_{kind}_overlapped: {sum(1 for f in faults if f.overlapped)}")
            for name, q in (("p50", 0.5), ("p99", 0.99)):
                out.append(f"recovery_{kind}_{name}_s: {_quantile(times, q):.2f}")
            out.append(f"recovery_{kind}_max_s: {max(times) if times else math.nan:.2f}")
        out += [f"# {fault.summary(self.started)}" for fault in self.faults]
        out.append(f"worker_restarts: {self.worker_restarts}")
        out.append(f"unexpected_worker_exits: {len(self.unexpected_worker_exits)}")
        for kind, n in sorted(self.client_retries.items()):
            out.append(f"client_retries_{kind}: {n}")
        out += [f"# unexpected worker exit: {line}" for line in self.unexpected_worker_exits]
        out += [f"# client error: {line}" for line in self.client_errors[:10]]
        out += self.ready_samples.lines()
        if self.loss_window is not None:
            out.append(f"acked_in_loss_window: {_in_window(self.acked, self.loss_window)}")
            out.append(f"expected_lost_async: {len(self.expected_losses)}")
            out += [f"# expected loss {v.kind} {v.where}: {v.detail}" for v in self.expected_losses]
        if self.invariants is not None:
            out += self.invariants.lines()
        out.append(f"result: {'OK' if self.ok else 'FAILED'}")
        return out


def _in_window(acked: dict[str, list[float]], window: Interval) -> int:
    return sum(1 for times in acked.values() if any(window[0] <= t <= window[1] for t in times))


def _quantile(values: Sequence[float], q: float) -> float:
    """The nearest-rank quantile of sorted values (NaN if none)."""
    if not values:
        return math.nan
    return values[min(len(values) - 1, max(0, math.ceil(q * len(values)) - 1))]
