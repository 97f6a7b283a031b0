"""Server time of the web UI's heaviest pages (issue 31): a list of 100,000 runs, a long run.

Seeds a private database (dropped and recreated) with N runs (bench/list_queries.py's seeding:
eight types, five queues, statuses by age, 30 days of starts) and one run with a long history,
grown by a real worker in this process (bench/ui_app.py's UiTimeline). Then renders, through the
server's ASGI app in-process (routing, session check, store reads, templates; no network), each
page several times and reports the median and p95 of its server time in milliseconds (from the
request reaching the app to the response's last byte leaving it; the client's own work is not
counted):

- the workflow list's first page, a page filtered by a query, the next page (keyset), and the
  results fragment a live refresh fetches;
- the long run's page (summary, timeline, pending work, first history page) and a later
  history page.

Run from the repo root: `python -m bench.ui_render --runs 100000`. See bench/README.md.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import statistics
import sys
import time
from collections.abc import Sequence
from typing import Any

import httpx
from sqlalchemy.ext.asyncio import create_async_engine

from bench import ui_app
from bench.list_queries import NAMESPACE, seed
from bench.throughput import check_bench_url, drop_database, quiet_logging, recreate_database
from bench.wake_latency import percentile
from burrow import Worker
from burrow.client import Client
from burrow.config import Settings
from burrow.server import ServerSettings, create_app
from burrow.store import Store

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/burrow_bench_ui"
TOKEN = "bench-ui-token"


async def long_run(url: str, batches: int) -> tuple[str, int]:
    """Run UiTimeline(batches) to completion with an in-process worker: (run id, events)."""
    settings = Settings.load(database_url=url, namespace=NAMESPACE)
    store = Store.connect(url)
    worker = Worker(ui_app.app, settings=settings, store=store)
    client = await Client.connect(settings=settings)
    started = time.monotonic()
    try:
        await store.ensure_namespaces([NAMESPACE])
        await worker.start()
        handle = await client.start_workflow(
            ui_app.UiTimeline, batches, id="ui-bench-long", task_queue=ui_app.TASK_QUEUE
        )
        await handle.result()
        run_id = (await handle.describe()).run.run_id
        events = len(await store.read_history(run_id=run_id))
    finally:
        await worker.shutdown(drain_seconds=5)
        await client.close()
        await store.close()
    print(f"# long run: {events:,} events in {time.monotonic() - started:.0f} s")
    return run_id, events


class ServerClock:
    """The app, timed from the request's arrival to its response's last byte (server time)."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.last_ms = 0.0

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        started = time.perf_counter()
        await self.app(scope, receive, send)
        self.last_ms = (time.perf_counter() - started) * 1000


async def timed(
    http: httpx.AsyncClient, clock: ServerClock, path: str, repeats: int
) -> list[float]:
    """Server milliseconds of each render of `path` (after one warm-up); each must be a 200."""
    times: list[float] = []
    for i in range(repeats + 1):
        response = await http.get(path)
        assert response.status_code == 200, (path, response.status_code, response.text[:300])
        if i:
            times.append(clock.last_ms)
    return times


async def measure(url: str, run_id: str, repeats: int) -> list[tuple[str, list[float], int]]:
    """(page, milliseconds, bytes) of each page, through the app in-process."""
    server = ServerSettings(operator_token=TOKEN, sweep_interval_seconds=3600.0)
    app = create_app(server, Settings.load(database_url=url, wakes={"enabled": False}))
    ns = f"namespace={NAMESPACE}"
    figures: list[tuple[str, list[float], int]] = []
    async with app.router.lifespan_context(app):
        await app.state.burrow.store.ensure_namespaces([NAMESPACE])
        clock = ServerClock(app)
        transport = httpx.ASGITransport(app=clock)
        async with httpx.AsyncClient(transport=transport, base_url="http://bench") as http:
            login = await http.post("/ui/login", data={"token": TOKEN, "next": "/ui/workflows"})
            assert login.status_code == 303, login.text
            first = await http.get(f"/ui/workflows?{ns}")
            after = re.search(r'rel="next" href="[^"]*after=([^"&]+)', first.text)
            assert after is not None, "the first page has no next page"
            pages = [
                ("list: first page", f"/ui/workflows?{ns}"),
                ("list: query", f"/ui/workflows?{ns}&query=WorkflowType+%3D+%27Checkout%27"),
                ("list: quick filters", f"/ui/workflows?{ns}&status=Failed&queue=orders"),
                ("list: next page", f"/ui/workflows?{ns}&after={after.group(1)}"),
                ("list: live refresh", f"/ui/workflows/results?{ns}"),
                ("run: page", f"/ui/runs/{run_id}?{ns}"),
                ("run: history page 9", f"/ui/runs/{run_id}?{ns}&after_seq=4000"),
            ]
            for label, path in pages:
                size = len((await http.get(path)).content)
                figures.append((label, await timed(http, clock, path, repeats), size))
    return figures


def report(figures: list[tuple[str, list[float], int]], runs: int, events: int) -> None:
    print(f"\n# UI server time: {runs:,} runs in the namespace, a run of {events:,} events")
    print(f"{'page':<24} {'median ms':>10} {'p95 ms':>8} {'KiB':>7}")
    for label, times, size in figures:
        median = statistics.median(times)
        print(f"{label:<24} {median:>10.1f} {percentile(times, 0.95):>8.1f} {size / 1024:>7.0f}")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", default=DEFAULT_URL)
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument(
        "--batches", type=int, default=32, help="UiTimeline rounds (~160 events each)"
    )
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--keep", action="store_true", help="keep the database afterwards")
    return parser.parse_args(argv)


async def run(args: argparse.Namespace) -> int:
    url = check_bench_url(args.database_url)
    await recreate_database(url)
    plain = url.render_as_string(hide_password=False)
    engine = create_async_engine(url, pool_size=1, max_overflow=0)
    try:
        await seed(engine, args.runs)
    finally:
        await engine.dispose()
    run_id, events = await long_run(plain, args.batches)
    report(await measure(plain, run_id, args.repeats), args.runs, events)
    if not args.keep:
        await drop_database(url)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    quiet_logging()
    return asyncio.run(run(args))


if __name__ == "__main__":
    sys.exit(main())
