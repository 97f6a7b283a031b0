"""Seed a big store from a few real runs: run each shape once, then clone its rows set-wise.

Running a million workflows through workers would take hours, so `run_templates` runs a few
real workflows of each shape (closed: one activity, signals and side effects, a fired timer;
open: waiting for a signal, sleeping a day), with a search attribute and a memo, and
`clone_runs` copies every row those runs own, in every table keyed by a run, with
INSERT ... SELECT over generate_series. Each copy's ids are fresh and consistent across tables:
a UUID column maps to md5(old id || copy number), so a history event's workflow task id still
names its copy's task, and workflow ids get the copy number as a suffix. Closed copies spread
back over `spread_days` (every timestamp of a copy moves by the same amount); open copies keep
their times, and their timers may be given new fire times (the timer bench).

The tables cloned are every one of the store's metadata with a `run_id` column (or the parent
run of `child_workflows`), except those that are not a run's own state (see SKIPPED). A new
table with a run key is cloned without a change here.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql as pg
from sqlalchemy.ext.asyncio import AsyncEngine

from bench.app import SIGNAL, TASK_QUEUE
from burrow.client import Client
from burrow.handle import WorkflowHandle
from burrow.store import schema as s

SEARCH_ATTRIBUTE = "CustomerId"
OPEN_NAP_SECONDS = 86_400.0
# Not a run's own state: a standalone activity's pseudo-run, repair and schedule bookkeeping.
SKIPPED = {"standalone_activities", "repair_failures", "schedule_fires", "schedule_history"}
RUN_KEYS = {"child_workflows": "parent_run_id"}
ID_SUFFIXED = {"workflow_id", "child_workflow_id", "parent_workflow_id"}
UNBOUND = {("runs", "sticky_worker_id"), ("runs", "sticky_until")}  # the seeding worker is gone
TEMPLATE_TIMEOUT = 120.0


@dataclass
class Templates:
    """The real runs whose rows are cloned: closed ones and open (waiting) ones."""

    closed: list[str] = field(default_factory=list)
    open: list[str] = field(default_factory=list)
    sleeping: list[str] = field(default_factory=list)  # the open ones with a pending timer


@dataclass(frozen=True)
class TimerSpread:
    """New fire times for cloned timers: copy i fires at `first` + (i - 1) * `step_seconds`."""

    first: datetime
    step_seconds: float


def run_tables() -> list[tuple[sa.Table, str]]:
    """(table, its run key column) of every table holding a run's own rows; `runs` first."""
    found = []
    for table in s.metadata.sorted_tables:
        key = RUN_KEYS.get(table.name, "run_id")
        if table.name not in SKIPPED and key in table.c:
            found.append((table, key))
    return sorted(found, key=lambda pair: pair[0].name != "runs")


def _expression(table: sa.Table, column: sa.Column[object], timers: bool) -> str | None:
    """The SELECT expression of one column of a copy, or None to leave it to its default."""
    name = f't."{column.name}"'
    if column.identity is not None:
        return None
    if (table.name, column.name) in UNBOUND:
        return "NULL"
    if timers and table.name == "timers" and column.name == "fire_at":
        return (
            "CAST(:fire_first AS timestamptz)"
            " + make_interval(secs => (g.i - 1) * CAST(:fire_step AS float8))"
        )
    if isinstance(column.type, pg.UUID):
        return f"CAST(md5(CAST({name} AS text) || ':' || g.i) AS uuid)"
    if column.name in ID_SUFFIXED:
        return f"{name} || '-' || g.i"
    if isinstance(column.type, sa.DateTime):
        return f"{name} - make_interval(secs => g.i * CAST(:shift_step AS float8))"
    return name


def clone_statement(table: sa.Table, key: str, *, timers: bool) -> sa.TextClause:
    """INSERT ... SELECT: copies lo..hi of the template runs' rows in `table`."""
    pairs = [(c.name, _expression(table, c, timers)) for c in table.c]
    kept = [(name, expr) for name, expr in pairs if expr is not None]
    columns = ", ".join(f'"{name}"' for name, _ in kept)
    exprs = ", ".join(str(expr) for _, expr in kept)
    return sa.text(
        f'INSERT INTO "{table.name}" ({columns}) SELECT {exprs}'
        f' FROM "{table.name}" AS t CROSS JOIN generate_series(CAST(:lo AS bigint),'
        f' CAST(:hi AS bigint)) AS g(i) WHERE t."{key}" = ANY(CAST(:templates AS uuid[]))'
    )


async def clone_runs(
    engine: AsyncEngine,
    templates: Sequence[str],
    copies: int,
    *,
    first_copy: int = 1,
    spread_days: float = 0.0,
    timers: TimerSpread | None = None,
    chunk: int = 20_000,
    label: str = "",
) -> None:
    """`copies` copies of each template run, numbered from `first_copy` (ids stay unique).

    Copy i of a closed template starts i * spread_days / copies earlier than the template.
    """
    if copies <= 0 or not templates:
        return
    shift_step = spread_days * 86_400 / copies
    fire = timers or TimerSpread(first=datetime.now(), step_seconds=0.0)
    statements = [clone_statement(t, key, timers=timers is not None) for t, key in run_tables()]
    started = time.monotonic()
    last = first_copy + copies - 1
    for lo in range(first_copy, last + 1, chunk):
        hi = min(lo + chunk - 1, last)
        params = {
            "lo": lo,
            "hi": hi,
            "templates": list(templates),
            "shift_step": shift_step,
            "fire_first": fire.first,
            "fire_step": fire.step_seconds,
        }
        async with engine.begin() as conn:
            for statement in statements:
                await conn.execute(statement, params)
        done = (hi - first_copy + 1) * len(templates)
        print(
            f"# cloned {label} {done:,}/{copies * len(templates):,} runs"
            f" ({time.monotonic() - started:.0f} s)",
            flush=True,
        )


async def analyze(engine: AsyncEngine) -> None:
    """VACUUM ANALYZE every cloned table, so the planner knows the store's new size."""
    async with engine.connect() as conn:
        conn = await conn.execution_options(isolation_level="AUTOCOMMIT")
        for table, _ in run_tables():
            await conn.exec_driver_sql(f'VACUUM ANALYZE "{table.name}"')


async def run_templates(client: Client, engine: AsyncEngine, *, tag: str = "seed") -> Templates:
    """Run each shape for real (a worker must serve task queue `bench`) until it settles.

    Closed shapes are awaited to their results; open ones until their first workflow task is
    done, so a copy waits exactly as the template does (for a signal, or its timer).
    """
    if SEARCH_ATTRIBUTE not in await client.search_attributes():
        await client.register_search_attribute(SEARCH_ATTRIBUTE, "keyword")

    async def start(workflow: str, *args: object, wid: str) -> WorkflowHandle[Any]:
        return await client.start_workflow(
            workflow,
            *args,
            id=f"{tag}-{wid}",
            task_queue=TASK_QUEUE,
            check_workers=False,
            search_attributes={SEARCH_ATTRIBUTE: f"c-{wid}"},
            memo={"seeded_from": wid},
        )

    closed = [
        await start("OneActivity", 1, wid="one-activity"),
        await start("LongHistory", 3, 1, wid="signalled"),
        await start("Nap", 0.1, wid="nap"),
    ]
    waiting = await start("LongHistory", 0, 1, wid="waiting")
    sleeping = await start("Nap", OPEN_NAP_SECONDS, wid="sleeping")
    await closed[1].signal(SIGNAL)
    async with asyncio.timeout(TEMPLATE_TIMEOUT):
        for handle in closed:
            await handle.result()
        templates = Templates(
            closed=[_run_id(h) for h in closed],
            open=[_run_id(waiting), _run_id(sleeping)],
            sleeping=[_run_id(sleeping)],
        )
        await _wait_settled(engine, templates.open)
    return templates


def _run_id(handle: WorkflowHandle[Any]) -> str:
    assert handle.run_id is not None, "a started workflow's handle names its run"
    return handle.run_id


_UNSETTLED = sa.text(
    "SELECT count(*) FROM runs r WHERE r.run_id = ANY(CAST(:ids AS uuid[])) AND ("
    " NOT EXISTS (SELECT 1 FROM workflow_tasks w WHERE w.run_id = r.run_id"
    " AND w.state = 'completed') OR EXISTS (SELECT 1 FROM workflow_tasks w"
    " WHERE w.run_id = r.run_id AND w.state IN ('ready', 'leased')))"
)


async def _wait_settled(engine: AsyncEngine, run_ids: list[str]) -> None:
    """Until the runs completed a workflow task and have no open one: they wait."""
    while True:
        async with engine.connect() as conn:
            if (await conn.execute(_UNSETTLED, {"ids": run_ids})).scalar_one() == 0:
                return
        await asyncio.sleep(0.1)
