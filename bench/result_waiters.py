"""Many `result()` waiters on one client: Postgres load while they wait, and how they wake.

No worker runs, so started runs stay open. For each size W (default 0, 1,000 and 10,000), W
fresh `OneActivity` runs are started, then:

1. `wakes`: W concurrent `handle.result()` calls on one client. Once every waiter is bound
   and has read its run, the bench counts over a fixed window the bench database's committed
   transactions (`pg_stat_database.xact_commit`), the client's `get_run`/`closed_runs` calls,
   its CPU (`time.process_time`) and, afterwards, the broker's bindings on the
   `<prefix>.run-changes` exchange per client queue (`rabbitmqctl list_bindings`). Then the
   waiters are cancelled.
2. `dropped`: the same on a second client whose result wakes are all lost (its queue is bound
   to keys nobody publishes, `bench.result_latency.drop_result_wakes`): only the fallback poll
   can answer.
3. `close` (the sizes in `--close-sizes`): W waiters on each client again, then a third
   client terminates all W runs at once (64 in flight). The store's terminate publishes a run
   change carrying the outcome. Per waiter, the wake latency runs from its run's terminate
   commit (the terminate call returning) to its `result()` raising; the reads are the client's
   `get_run`/`closed_runs` calls from the first terminate until the last waiter returned.

Everything runs in this one process (the terminator too), so the latencies include its event
loop's other work. Run from the repo root: `python -m bench.result_waiters`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import shutil
import statistics
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aio_pika
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import AsyncEngine

from bench.app import TASK_QUEUE, OneActivity
from bench.result_latency import drop_result_wakes
from bench.throughput import (
    MAX_IN_FLIGHT_STARTS,
    admin_engine,
    check_bench_url,
    connect_client,
    delete_wake_topology,
    env_settings,
    new_prefix,
    quiet_logging,
    recreate_database,
    wake_env,
    xact_counters,
)
from bench.wake_latency import percentile
from burrow.broker.topology import Topology
from burrow.client import Client, WorkflowHandle
from burrow.errors import WorkflowFailureError

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/burrow_bench_waiters"
MODES = ("wakes", "dropped")
SETTLE_POLL_SECONDS = 0.05
RABBITMQCTL_TIMEOUT_SECONDS = 60.0
FRESH_DATABASE_SETTLE_SECONDS = 5.0  # autovacuum's first pass commits per table


class Calls:
    """Counts calls of one store method of a client, and those that returned."""

    def __init__(self, client: Client, name: str) -> None:
        self.count = 0
        self.done = 0
        original: Callable[..., Awaitable[Any]] = getattr(client.store, name)

        async def counted(*args: Any, **kwargs: Any) -> Any:
            self.count += 1
            try:
                return await original(*args, **kwargs)
            finally:
                self.done += 1

        setattr(client.store, name, counted)


class Binds:
    """Counts a client's broker binds, and those that failed (the waiter then relies on polls)."""

    def __init__(self, client: Client) -> None:
        self.done = 0
        self.failed = 0
        listener = client.runs.listener
        assert listener is not None
        bind = listener.bind

        async def counted(key: str) -> bool:
            ok = await bind(key)
            self.done += 1
            self.failed += not ok
            return ok

        listener.bind = counted  # type: ignore[method-assign]


@dataclass
class Waiting:
    """One client's instruments."""

    client: Client
    reads: Calls
    polls: Calls
    binds: Binds

    @classmethod
    def of(cls, client: Client) -> Waiting:
        return cls(client, Calls(client, "get_run"), Calls(client, "closed_runs"), Binds(client))


@dataclass
class Waiters:
    """W result() calls in flight on one client; `returned` maps run id to when it returned."""

    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    returned: dict[str, float] = field(default_factory=dict)
    unexpected: list[BaseException] = field(default_factory=list)


def wait_on(client: Client, handles: Sequence[WorkflowHandle[Any]], timeout: float) -> Waiters:
    """`result()` of every run, on this client."""
    waiters = Waiters()

    async def one(started: WorkflowHandle[Any]) -> None:
        handle = client.get_handle(started.workflow_id, run_id=started.run_id)
        try:
            await handle.result(timeout=timeout)
        except WorkflowFailureError:
            waiters.returned[str(handle.run_id)] = time.perf_counter()
        except Exception as exc:  # a timeout, say: counted, not raised
            waiters.unexpected.append(exc)
        else:
            waiters.unexpected.append(AssertionError("a terminated run returned a result"))

    waiters.tasks = [asyncio.create_task(one(h)) for h in handles]
    return waiters


async def cancel(waiters: Waiters) -> None:
    for task in waiters.tasks:
        task.cancel()
    await asyncio.gather(*waiters.tasks, return_exceptions=True)


async def up(waiting: Waiting, w: int, timeout: float) -> tuple[float, int]:
    """Until W more waiters of this client bound and read their run: (seconds, failed binds)."""
    reads0, binds0, failed0 = waiting.reads.done, waiting.binds.done, waiting.binds.failed
    t0 = time.perf_counter()
    while waiting.reads.done - reads0 < w or waiting.binds.done - binds0 < w:
        if time.perf_counter() - t0 > timeout:
            raise SystemExit(
                f"{w} waiters were not up within {timeout} s: "
                f"{waiting.reads.done - reads0} reads, {waiting.binds.done - binds0} binds"
            )
        await asyncio.sleep(SETTLE_POLL_SECONDS)
    return time.perf_counter() - t0, waiting.binds.failed - failed0


async def start_runs(client: Client, n: int, offset: int) -> list[WorkflowHandle[int]]:
    gate = asyncio.Semaphore(MAX_IN_FLIGHT_STARTS)

    async def one(i: int) -> WorkflowHandle[int]:
        async with gate:
            return await client.start_workflow(
                OneActivity.run, i, id=f"waiter-{i}", task_queue=TASK_QUEUE, check_workers=False
            )

    return list(await asyncio.gather(*(one(offset + i) for i in range(n))))


async def terminate_all(
    terminator: Client, handles: Sequence[WorkflowHandle[Any]]
) -> dict[str, float]:
    """Terminate every run, 64 in flight: run id -> when its terminate committed."""
    gate = asyncio.Semaphore(MAX_IN_FLIGHT_STARTS)
    committed: dict[str, float] = {}

    async def one(handle: WorkflowHandle[Any]) -> None:
        async with gate:
            await terminator.get_handle(handle.workflow_id, run_id=handle.run_id).terminate(
                reason="bench"
            )
            committed[str(handle.run_id)] = time.perf_counter()

    await asyncio.gather(*(one(h) for h in handles))
    return committed


async def run_bindings(prefix: str) -> dict[str, int]:
    """Bindings of the `<prefix>.run-changes` exchange per destination queue, as listed.

    Needs `rabbitmqctl` on this machine with the rights to list; an empty dict otherwise.
    """
    ctl = shutil.which("rabbitmqctl")
    if ctl is None:
        return {}
    exchange = Topology(prefix=prefix).runs_exchange_name
    proc = await asyncio.create_subprocess_exec(
        ctl, "-q", "list_bindings", "source_name", "destination_name",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    try:
        async with asyncio.timeout(RABBITMQCTL_TIMEOUT_SECONDS):
            out, _ = await proc.communicate()
    except TimeoutError:
        proc.kill()
        await proc.wait()
        return {}
    counts: dict[str, int] = {}
    for line in out.decode().splitlines():
        source, _, destination = line.partition("\t")
        if source == exchange:
            counts[destination] = counts.get(destination, 0) + 1
    return counts


async def unbinds_done(client: Client) -> None:
    """Until the client's listener unbound every key its waiters left (a background task)."""
    listener = client.runs.listener
    while (unbinder := getattr(listener, "_unbinder", None)) is not None:
        await asyncio.gather(unbinder, return_exceptions=True)


def unbind_dropped(client: Client) -> None:
    """Unbind what `drop_result_wakes` bound instead, so its bindings do not pile up."""
    listener = client.runs.listener
    assert listener is not None
    unbind = listener.unbind
    listener.unbind = lambda key: unbind(f"dropped.{key}")  # type: ignore[method-assign]


def queue_name(client: Client) -> str:
    listener = client.runs.listener
    queue = getattr(listener, "_queue", None)
    return str(queue.name) if queue is not None else ""


async def window(
    admin: AsyncEngine,
    name: str,
    waiting: Waiting,
    seconds: float,
    prefix: str,
    others: Sequence[Client],
) -> dict[str, float]:
    """Postgres commits, client calls and CPU per second over `seconds`, then the bindings."""
    for client in others:
        # Idle backends flush their pending stats only after 10 s (PGSTAT_IDLE_INTERVAL), or at
        # exit: closing the pools' idle connections keeps the setup's queries out of the window.
        await client.store.engine.dispose()
    before = await xact_counters(admin, name)
    reads0, polls0 = waiting.reads.count, waiting.polls.count
    cpu0, t0 = time.process_time(), time.perf_counter()
    await asyncio.sleep(seconds)
    cpu1, seconds = time.process_time(), time.perf_counter() - t0
    reads1, polls1 = waiting.reads.count, waiting.polls.count
    after = await xact_counters(admin, name)  # waits for the backends to flush their stats
    elapsed = after[2] - before[2]
    bindings = await run_bindings(prefix)
    return {
        "xact_per_s": (after[0] - before[0]) / elapsed,
        "closed_runs_per_s": (polls1 - polls0) / seconds,
        "get_run_per_s": (reads1 - reads0) / seconds,
        "client_cpu_ms_per_s": (cpu1 - cpu0) * 1000 / seconds,
        "bindings": float(
            bindings.get(queue_name(waiting.client), math.nan if not bindings else 0)
        ),
    }


async def close_phase(
    terminator: Client,
    waiting: dict[str, Waiting],
    handles: Sequence[WorkflowHandle[Any]],
    setup_timeout: float,
) -> dict[str, dict[str, float]]:
    """Both clients wait on all runs; terminate them at once; per mode, how the waiters woke."""
    w = len(handles)
    sets: dict[str, Waiters] = {}
    for mode in MODES:
        sets[mode] = wait_on(waiting[mode].client, handles, timeout=600)
        await up(waiting[mode], w, timeout=setup_timeout)
    counts0 = {m: (waiting[m].reads.count, waiting[m].polls.count) for m in MODES}
    cpu0 = time.process_time()
    t0 = time.perf_counter()
    committed = await terminate_all(terminator, handles)
    last_commit = time.perf_counter()
    for mode in MODES:
        await asyncio.gather(*sets[mode].tasks)
    cpu = time.process_time() - cpu0
    figures: dict[str, dict[str, float]] = {}
    for mode in MODES:
        done = sets[mode]
        lat = [(done.returned[r] - committed[r]) * 1000 for r in done.returned]
        reads0, polls0 = counts0[mode]
        figures[mode] = {
            "wake_p50_ms": statistics.median(lat),
            "wake_p99_ms": percentile(lat, 0.99),
            "wake_max_ms": max(lat),
            "terminate_s": last_commit - t0,
            "all_returned_s": max(done.returned.values()) - t0,
            "last_after_last_commit_ms": (max(done.returned.values()) - last_commit) * 1000,
            "get_run": float(waiting[mode].reads.count - reads0),
            "closed_runs": float(waiting[mode].polls.count - polls0),
            "unexpected": float(len(done.unexpected)),
            "process_cpu_ms_per_run": cpu * 1000 / w,
        }
        if done.unexpected:
            print(f"# {mode}: {len(done.unexpected)} waiters ended otherwise, first: "
                  f"{done.unexpected[0]!r}", file=sys.stderr)  # fmt: skip
    return figures


def line(label: str, figures: dict[str, float]) -> str:
    return f"{label:26s} " + " ".join(f"{k}={v:.2f}" for k, v in figures.items())


async def one_size(
    w: int,
    offset: int,
    args: argparse.Namespace,
    admin: AsyncEngine,
    name: str,
    prefix: str,
    waiting: dict[str, Waiting],
    terminator: Client,
) -> dict[str, dict[str, float]]:
    t0 = time.perf_counter()
    handles = await start_runs(terminator, w, offset)
    print(f"# W={w}: {w} runs started in {time.perf_counter() - t0:.1f} s", flush=True)
    results: dict[str, dict[str, float]] = {}
    for mode in MODES:
        waiters = wait_on(waiting[mode].client, handles, timeout=600)
        setup, failed = await up(waiting[mode], w, timeout=args.setup_timeout)
        figures = {"setup_s": setup, "bind_failed": float(failed)}
        clients = [*(wt.client for wt in waiting.values()), terminator]
        figures |= await window(admin, name, waiting[mode], args.window, prefix, clients)
        unbind0 = time.perf_counter()
        await cancel(waiters)
        await unbinds_done(waiting[mode].client)
        figures["unbind_s"] = time.perf_counter() - unbind0
        results[f"wait_{mode}"] = figures
        print(line(f"W={w} wait {mode}", figures), flush=True)
    if w in args.close_sizes:
        for mode, figures in (
            await close_phase(terminator, waiting, handles, args.setup_timeout)
        ).items():
            results[f"close_{mode}"] = figures
            print(line(f"W={w} close {mode}", figures), flush=True)
    return results


async def measure(args: argparse.Namespace, url: URL) -> dict[str, dict[str, float]]:
    plain = url.render_as_string(hide_password=False)
    name = str(url.database)
    prefix = new_prefix()
    env = {**wake_env(prefix, wakes=True), "BURROW_RESULT_FALLBACK_SECONDS": str(args.fallback)}
    print(f"# amqp_prefix={prefix} database={name}", flush=True)
    await recreate_database(url)
    await asyncio.sleep(FRESH_DATABASE_SETTLE_SECONDS)
    admin = admin_engine(url)
    clients = {mode: await connect_client(plain, env) for mode in MODES}
    drop_result_wakes(clients["dropped"])
    unbind_dropped(clients["dropped"])
    terminator = await connect_client(plain, env)
    waiting = {mode: Waiting.of(clients[mode]) for mode in MODES}
    results: dict[str, dict[str, float]] = {}
    try:
        offset = 0
        for w in args.sizes:
            for key, figures in (
                await one_size(w, offset, args, admin, name, prefix, waiting, terminator)
            ).items():
                results[f"W={w} {key}"] = figures
            offset += w
    finally:
        for client in (*clients.values(), terminator):
            with contextlib.suppress(Exception):
                await client.close()
        await admin.dispose()
        await delete_runs_exchange(prefix)
        await delete_wake_topology(prefix)
    return results


async def delete_runs_exchange(prefix: str) -> None:
    """The `<prefix>.run-changes` exchange of a bench prefix (durable: it outlives the clients)."""
    if not prefix.startswith("bench-"):
        raise ValueError(f"refusing to delete the run-change exchange of prefix {prefix!r}")
    try:
        async with asyncio.timeout(10):
            connection = await aio_pika.connect(env_settings().amqp_urls[0])
            async with connection:
                channel = await connection.channel()
                await channel.exchange_delete(Topology(prefix=prefix).runs_exchange_name)
    except Exception as exc:
        print(f"# could not delete {prefix}.runs: {exc!r}", file=sys.stderr)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.result_waiters", description=__doc__)
    parser.add_argument(
        "--sizes", type=lambda s: [int(x) for x in s.split(",")], default=[0, 1000, 10000],
        help="comma-separated W: concurrent result() waiters per client",
    )  # fmt: skip
    parser.add_argument(
        "--close-sizes", type=lambda s: [int(x) for x in s.split(",")], default=[1000],
        help="the sizes among --sizes whose runs are then terminated with W waiters per client",
    )  # fmt: skip
    parser.add_argument("--window", type=float, default=3.0, help="seconds counted per W")
    parser.add_argument("--setup-timeout", type=float, default=120.0)
    parser.add_argument("--fallback", type=float, default=0.5, help="fallback poll seconds")
    parser.add_argument("--database-url", default=DEFAULT_URL, help="dropped and recreated!")
    parser.add_argument("--json", type=Path, default=None, help="also write figures here")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    url = check_bench_url(args.database_url)
    quiet_logging()
    print(
        f"# bench: sizes={args.sizes} close_sizes={args.close_sizes} window={args.window}s"
        f" fallback={args.fallback}s"
    )
    t0 = time.perf_counter()
    results = asyncio.run(measure(args, url))
    print(f"# wall {time.perf_counter() - t0:.0f} s")
    if args.json is not None:
        args.json.write_text(json.dumps({"parameters": vars(args), "results": results}, indent=2,
                                        default=str))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
