"""Many pending timers: does the repair pass stay cheap, and do timers fire on time?

On a private Postgres (with pg_stat_statements), 100,000 runs (times `--scale`) sleep on a
durable timer each, due evenly over the next hour: one real `Nap` run sleeping a day, cloned
set-wise (bench/store_seed.py) with new fire times, then ANALYZE. Worker processes run with
`--no-repair`; the repair pass runs in this process as the matching role does
(`burrow.matching.MatchingRole`, the real loop and store), each pass timed. Over a window of
`--window` seconds of due timers (a sample of the hour, about 28 timers a second at full
scale) it reports: passes per second, pass time p50/p99/max, timers fired per pass, the share
of wall time spent in passes, the CPU split, and each timer's lateness, p50/p99/max:

- fire: the firing transaction's start (the TimerFired inbox event's created_at) - fire_at;
- claim: when a worker claimed the workflow task the timer woke - fire_at;
- close: when the run closed on it - fire_at.

Then `EXPLAIN (ANALYZE, BUFFERS)` of each statement the pass sent that reads `timers`.

Run from the repo root: `python -m bench.timer_scale` (`--scale 0.05 --window 30` to check).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import URL

from bench import store_seed
from bench.scale_common import (
    CpuSplit,
    add_setting_argument,
    bench_engine,
    enable_statements,
    private_postgres,
    reset_statements,
    seed_big_store,
    statements,
)
from bench.throughput import (
    admin_engine,
    delete_wake_topology,
    env_settings,
    new_prefix,
    quiet_logging,
    recreate_database,
    start_workers,
    stop_workers,
    wait_registered,
    wake_env,
)
from bench.wake_latency import percentile
from burrow.matching import MatchingRole
from burrow.store.engine import async_url

TIMERS = 100_000
SPAN_SECONDS = 3600.0
SEED_LEAD_SECONDS = 3600.0  # seeded far ahead, then moved to start after the workers are up
SETTLE_SECONDS = 10.0
GRACE_SECONDS = 10.0

_SHIFT = sa.text(
    "UPDATE timers SET fire_at = fire_at + make_interval(secs => :by)"
    " WHERE state = 'pending' AND run_id <> ALL(CAST(:keep AS uuid[]))"
)
_LATENESS = sa.text(
    """
    SELECT extract(epoch FROM i.created_at - t.fire_at) * 1000,
           extract(epoch FROM (SELECT min(w.claimed_at) FROM workflow_tasks w
                               WHERE w.run_id = t.run_id AND w.created_at >= i.created_at
                                 AND w.state NOT IN ('ready', 'leased'))
                   - t.fire_at) * 1000,
           extract(epoch FROM r.closed_at - t.fire_at) * 1000
    FROM timers t
    JOIN runs r USING (run_id)
    JOIN inbox_events i ON i.run_id = t.run_id AND i.event_type = 'TimerFired'
    WHERE t.fire_at >= :lo AND t.fire_at < :hi
    """
)
_DUE_IN = sa.text("SELECT count(*) FROM timers WHERE fire_at >= :lo AND fire_at < :hi")


class TimedRole:
    """The matching role's repair loop with every pass timed, and its `timers` statements."""

    def __init__(self, settings: Any) -> None:
        self.role = MatchingRole(settings, matching_id="timer-scale-repair")
        # (started, seconds, timers fired, whether a full pass or the due-only steps)
        self.passes: list[tuple[float, float, int, bool]] = []
        self.sent: dict[str, Any] = {}
        store = self.role.store

        def timed(call: Any, full: bool) -> Any:
            async def run(**kwargs: Any) -> Any:
                started = time.monotonic()
                result = await call(**kwargs)
                self.passes.append((started, time.monotonic() - started, result.timers_fired, full))
                return result

            return run

        store.sweep = timed(store.sweep, True)  # type: ignore[method-assign]
        store.sweep_due = timed(store.sweep_due, False)  # type: ignore[method-assign]

        @event.listens_for(store.engine.sync_engine, "before_cursor_execute")
        def _record(_c: Any, _cur: Any, statement: str, parameters: Any, *_: Any) -> None:
            if "FROM timers" in statement and statement not in self.sent:
                self.sent[statement] = parameters


async def seed(args: argparse.Namespace, url: URL, n: int) -> None:
    """N sleeping runs, due evenly over SPAN_SECONDS starting SEED_LEAD_SECONDS from now."""
    first = datetime.now(UTC) + timedelta(seconds=SEED_LEAD_SECONDS)
    spread = store_seed.TimerSpread(first=first, step_seconds=SPAN_SECONDS / n)
    templates = await seed_big_store(args, url, closed=0, open_runs=0, timers=spread, timer_runs=n)
    args.template_runs = templates.closed + templates.open


async def move_timers(url: URL, keep: list[str], first_due: datetime) -> None:
    """Shift the seeded timers so the first is due at `first_due`; VACUUM ANALYZE them."""
    engine = bench_engine(url)
    try:
        async with engine.begin() as conn:
            earliest = (
                await conn.execute(
                    sa.text(
                        "SELECT min(fire_at) FROM timers WHERE state = 'pending'"
                        " AND run_id <> ALL(CAST(:keep AS uuid[]))"
                    ),
                    {"keep": keep},
                )
            ).scalar_one()
            by = (first_due - earliest).total_seconds()
            await conn.execute(_SHIFT, {"by": by, "keep": keep})
        async with engine.connect() as conn:
            conn = await conn.execution_options(isolation_level="AUTOCOMMIT")
            await conn.exec_driver_sql("VACUUM ANALYZE timers")
    finally:
        await engine.dispose()


def summary(values: list[float]) -> dict[str, float]:
    if not values:
        return {"p50": float("nan"), "p99": float("nan"), "max": float("nan")}
    return {"p50": percentile(values, 0.5), "p99": percentile(values, 0.99), "max": max(values)}


async def measure(args: argparse.Namespace, url: URL) -> dict[str, Any]:
    plain = url.render_as_string(hide_password=False)
    prefix = new_prefix()
    env = wake_env(prefix, wakes=True)
    workers = start_workers(args, plain, 0, env=env, log_name="timers", worker_args=["--no-repair"])
    engine = bench_engine(url)
    admin = admin_engine(url)
    role = TimedRole(env_settings({**env, "BURROW_DATABASE_URL": plain}))
    running: asyncio.Task[None] | None = None
    try:
        async with engine.connect() as conn:
            await wait_registered(conn, workers)
        lo = datetime.now(UTC) + timedelta(seconds=SETTLE_SECONDS)
        await move_timers(url, args.template_runs, lo)
        hi = lo + timedelta(seconds=args.window)
        running = asyncio.create_task(role.role.run())
        await asyncio.sleep(max(0.0, (lo - datetime.now(UTC)).total_seconds()))
        await reset_statements(admin)
        cpu = CpuSplit(plain, workers)
        cpu.start()
        window_start = time.monotonic()
        await asyncio.sleep(args.window)
        window = time.monotonic() - window_start
        async with engine.connect() as conn:
            due = int((await conn.execute(_DUE_IN, {"lo": lo, "hi": hi})).scalar_one())
        split = cpu.per_item_ms(max(due, 1))
        found = await statements(admin, str(url.database))
        await asyncio.sleep(GRACE_SECONDS)  # the window's last timers close their runs
        async with engine.connect() as conn:
            rows = (await conn.execute(_LATENESS, {"lo": lo, "hi": hi})).all()
            plans = {}
            for statement, parameters in role.sent.items():
                explained = await conn.exec_driver_sql(
                    "EXPLAIN (ANALYZE, BUFFERS) " + statement, parameters
                )
                plans[statement] = [str(r[0]) for r in explained]
                await conn.rollback()  # EXPLAIN ANALYZE of an UPDATE must leave nothing
    finally:
        if running is not None:
            await role.role.shutdown()
            await asyncio.gather(running, return_exceptions=True)
        stop_workers(workers)
        await engine.dispose()
        await admin.dispose()
        await delete_wake_topology(prefix)
    passes = [p for p in role.passes if window_start <= p[0] <= window_start + window]
    pass_ms = [p[1] * 1000 for p in passes]
    fired = [float(p[2]) for p in passes]
    timer_stmts = [s for s in found.values() if "timers" in s.query]
    return {
        "timers_due_in_window": due,
        "timers_fired_in_window": len(rows),
        "window_seconds": window,
        "passes_per_second": len(passes) / window,
        "full_passes_per_second": sum(1 for p in passes if p[3]) / window,
        "pass_ms": summary(pass_ms),
        "full_pass_ms": summary([p[1] * 1000 for p in passes if p[3]]),
        "due_pass_ms": summary([p[1] * 1000 for p in passes if not p[3]]),
        "timers_per_pass": summary(fired),
        "repair_busy_share": sum(pass_ms) / 1000 / window,
        "repair_ms_per_second": sum(pass_ms) / window,
        "statement_ms_per_second": sum(s.total_ms for s in found.values()) / window,
        "timer_statements": [
            {
                "query": s.query[:160],
                "calls": s.calls,
                "ms_per_call": s.total_ms / max(s.calls, 1),
                "rows_per_call": s.rows / max(s.calls, 1),
            }
            for s in sorted(timer_stmts, key=lambda s: -s.total_ms)
        ],
        "lateness_fire_ms": summary([float(r[0]) for r in rows if r[0] is not None]),
        "lateness_claim_ms": summary([float(r[1]) for r in rows if r[1] is not None]),
        "lateness_close_ms": summary([float(r[2]) for r in rows if r[2] is not None]),
        "within_1s_share": sum(1 for r in rows if r[1] is not None and r[1] <= 1000)
        / max(len(rows), 1),
        **{f"{k}_per_timer": v for k, v in split.items()},
        "plans": plans,
    }


def report(figures: dict[str, Any]) -> None:
    print(f"\n# window {figures['window_seconds']:.0f} s of due timers")
    for key, value in figures.items():
        if key in ("plans", "timer_statements"):
            continue
        if isinstance(value, dict):
            shown = "  ".join(f"{k} {v:.2f}" for k, v in value.items())
            print(f"{key}: {shown}")
        else:
            print(f"{key}: {value:.3f}" if isinstance(value, float) else f"{key}: {value}")
    print("\n# timer statements in the window: calls, ms/call, rows/call")
    for s in figures["timer_statements"]:
        print(f"{s['calls']:7d} {s['ms_per_call']:8.3f} {s['rows_per_call']:8.1f}  {s['query']}")
    for statement, plan in figures["plans"].items():
        print(f"\n## {' '.join(statement.split())[:150]}")
        print("\n".join(plan))


async def run(args: argparse.Namespace) -> int:
    n = int(TIMERS * args.scale)
    print(f"# timer scale: timers={n:,} over {SPAN_SECONDS:.0f} s, window={args.window} s")
    with private_postgres(args.setting) as server:
        await enable_statements(server)
        url = async_url(server.url("timer_scale"))
        await recreate_database(url)
        await seed(args, url, n)
        figures = await measure(args, url)
    report(figures)
    if args.json is not None:
        args.json.write_text(
            json.dumps({"parameters": vars(args), **figures}, indent=2, default=str)
        )
    late = figures["lateness_claim_ms"]["p99"]
    return (
        0
        if figures["timers_fired_in_window"] == figures["timers_due_in_window"] and late <= 1000
        else 1
    )


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.timer_scale", description=__doc__)
    parser.add_argument("--scale", type=float, default=1.0, help="x 100,000 timers in the hour")
    parser.add_argument("--window", type=float, default=180.0, help="seconds of due timers")
    parser.add_argument("--workers", type=int, default=2, help="worker processes")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--workflow-concurrency", type=int, default=16)
    parser.add_argument("--json", type=Path, default=None, help="also write figures here")
    add_setting_argument(parser)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    quiet_logging()
    return asyncio.run(run(args))


if __name__ == "__main__":
    sys.exit(main())
