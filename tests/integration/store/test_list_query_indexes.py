"""Each built-in list query filter has an index, and Postgres reads it (issue 30).

A built-in attribute is a `runs` column (visibility_sql.BUILTIN_COLUMNS): its filters need an
index led by (namespace, column), or the primary key for RunId, and the default order (newest
first) one led by (namespace, created_at). The plans are checked on a small but realistic store
(thousands of runs over two namespaces, uneven types, queues and statuses, ANALYZEd), with the
planner's costs as they are: no sequential scan of `runs` for a selective filter, alone and as
the first page of the list, in the list's order.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.sql import visitors

from burrow.protocol.list_query import parse_list_query
from burrow.protocol.list_query_types import BUILTIN_ATTRIBUTES, bind_list_query
from burrow.store import schema as s
from burrow.store.visibility_sql import (
    BUILTIN_COLUMNS,
    filter_clause,
    order_clauses,
    order_key,
)

RUNS = 20_000
PARENT_RUN = "7a0e8c52-3f51-4e0c-9b43-0d6a2f6d1c11"

# Run i of namespace ns-a (ns-b has a tenth as many): types and queues of uneven weight, about
# 5 % running (more of the newest), 2 % failed, a build id on one in ten, a parent on one in 50.
_SEED = """
INSERT INTO runs (run_id, namespace, workflow_id, workflow_type, task_queue, status, input,
                  created_at, closed_at, build_id, parent_workflow_id, parent_run_id)
SELECT gen_random_uuid(), ns, prefix || i, workflow_type, queue, status, '{}'::jsonb,
       created_at, CASE WHEN status <> 'running' THEN created_at + interval '1 minute' END,
       CASE WHEN i % 10 = 0 THEN 'build-' || (i % 3) END,
       CASE WHEN i % 50 = 0 THEN 'parent-' || (i % 7) END,
       CASE WHEN i = 50 THEN CAST(:parent_run AS uuid)
            WHEN i % 50 = 0 THEN gen_random_uuid() END
FROM (
    SELECT ns, i,
           CASE WHEN i % 10 < 4 THEN 'order-' WHEN i % 10 < 7 THEN 'pay-' ELSE 'ship-' END
               AS prefix,
           (ARRAY['Checkout', 'Checkout', 'Checkout', 'Payment', 'Payment', 'Shipping',
                  'Shipping', 'Email', 'Report', 'Refund'])[1 + i % 10] AS workflow_type,
           (ARRAY['orders', 'orders', 'payments', 'emails', 'reports'])[1 + (i / 10) % 5]
               AS queue,
           CASE WHEN i % 97 = 0 OR (i > n - 200 AND i % 3 = 0) THEN 'running'
                WHEN i % 53 = 0 THEN 'failed' ELSE 'completed' END AS status,
           timestamptz '2026-12-01T00:00:00Z' + i * interval '1 minute' AS created_at
    FROM (VALUES ('ns-a', :runs), ('ns-b', :runs / 10)) AS spaces(ns, n),
         generate_series(1, n) AS i
) AS g
"""

# A selective filter of each built-in attribute (the newest hour, the rare type and status).
FILTERS = {
    "WorkflowId": "WorkflowId = 'order-1230'",
    "RunId": f"RunId = '{PARENT_RUN}'",
    "WorkflowType": "WorkflowType = 'Refund'",
    "ExecutionStatus": "ExecutionStatus = 'Failed'",
    "TaskQueue": "TaskQueue IN ('reports', 'emails') AND StartTime < '2026-12-02T00:00:00Z'",
    "StartTime": "StartTime BETWEEN '2026-12-10T00:00:00Z' AND '2026-12-10T02:00:00Z'",
    "CloseTime": "CloseTime > '2026-12-14T20:00:00Z'",
    "BuildId": "BuildId = 'build-1'",
    "ParentWorkflowId": "ParentWorkflowId = 'parent-3'",
    "ParentRunId": f"ParentRunId = '{PARENT_RUN}'",
}
PREFIXES = [
    "WorkflowId STARTS_WITH 'order-12'",
    "WorkflowId >= 'ship-9990'",
    "WorkflowType STARTS_WITH 'Ref'",
    "BuildId BETWEEN 'build-0' AND 'build-1'",
]


@pytest.fixture
async def engine(database_url: str) -> AsyncIterator[AsyncEngine]:
    engine = create_async_engine(database_url.replace("postgresql://", "postgresql+asyncpg://"))
    async with engine.begin() as conn:
        await conn.execute(sa.text(_SEED), {"runs": RUNS, "parent_run": PARENT_RUN})
        await conn.execute(sa.text("ANALYZE runs"))
    yield engine
    await engine.dispose()


async def _plan(engine: AsyncEngine, statement: sa.Select[tuple[str]]) -> str:
    compiled = statement.compile(engine.sync_engine, compile_kwargs={"literal_binds": True})
    async with engine.connect() as conn:
        rows = await conn.execute(sa.text(f"EXPLAIN {compiled}"))
        return "\n".join(row[0] for row in rows)


def _column_of(attribute: str) -> str:
    """The `runs` column an attribute compares (RunId's within its cast to text)."""
    expression = BUILTIN_COLUMNS[attribute]
    (column,) = [e for e in visitors.iterate(expression) if isinstance(e, sa.Column)]
    return str(column.name)


async def test_each_built_in_attribute_has_an_index_led_by_namespace_and_its_column(
    database_url: str,
) -> None:
    """Issue 30: every built-in attribute's column leads an index after the namespace (RunId:
    the primary key), and (namespace, created_at, run_id) serves the default order."""
    engine = create_async_engine(database_url.replace("postgresql://", "postgresql+asyncpg://"))
    try:
        async with engine.connect() as conn:
            rows = await conn.execute(
                sa.text(
                    "SELECT array_agg(a.attname ORDER BY k.ord)"
                    " FROM pg_index x"
                    " CROSS JOIN unnest(x.indkey) WITH ORDINALITY AS k(attnum, ord)"
                    " LEFT JOIN pg_attribute a ON a.attrelid = x.indrelid AND a.attnum = k.attnum"
                    " WHERE x.indrelid = 'runs'::regclass GROUP BY x.indexrelid"
                )
            )
            leads = [tuple(row[0]) for row in rows]
    finally:
        await engine.dispose()
    assert set(BUILTIN_COLUMNS) == set(BUILTIN_ATTRIBUTES)
    for attribute in BUILTIN_ATTRIBUTES:
        column = _column_of(attribute)
        wanted = ("run_id",) if column == "run_id" else ("namespace", column)
        assert any(lead[: len(wanted)] == wanted for lead in leads), (attribute, leads)
    assert ("namespace", "created_at", "run_id") in {lead[:3] for lead in leads}


async def test_each_built_in_filter_reads_an_index_on_a_realistic_store(
    engine: AsyncEngine,
) -> None:
    """Issue 30: on an ANALYZEd store of thousands of runs, each built-in attribute's selective
    filter, its prefixes and ranges, and the first page of each in the list's default order
    read `runs` through an index (no `SET enable_seqscan`: the planner's own choice)."""
    assert set(FILTERS) == set(BUILTIN_ATTRIBUTES)
    scanned: dict[str, str] = {}
    for text in [*FILTERS.values(), *PREFIXES, "ORDER BY StartTime ASC", ""]:
        query = bind_list_query(parse_list_query(text), {})
        where = filter_clause("ns-a", query)
        key, descending = order_key("ns-a", query)
        count = sa.select(sa.func.count()).select_from(s.runs).where(where)
        page = (
            sa.select(s.runs.c.run_id)
            .where(where)
            .order_by(*order_clauses(key, descending))
            .limit(51)
        )
        unfiltered = query.filter is None
        for what, statement in (("count", count), ("page", page)):
            if what == "count" and unfiltered:
                continue  # an unfiltered count reads the whole namespace whichever way
            plan = await _plan(engine, statement)
            # Unfiltered, the page is the index read in order: no sort of the namespace.
            if "Seq Scan on runs" in plan or (unfiltered and "Sort Key" in plan):
                scanned[f"{what}: {text}"] = plan
    assert not scanned, "\n\n".join(f"{k}\n{v}" for k, v in scanned.items())


async def test_run_ids_compare_as_uuids_and_other_text_matches_none(engine: AsyncEngine) -> None:
    """Issue 30: RunId/ParentRunId equality compares uuids (so their indexes serve it); a
    literal that is no run id's text (not a uuid, or not spelt as Postgres spells one) matches
    no run, and its negation every run that has the attribute."""

    async def selected(text: str) -> int:
        query = bind_list_query(parse_list_query(text), {})
        async with engine.connect() as conn:
            statement = sa.select(sa.func.count()).select_from(s.runs)
            return int(await conn.scalar(statement.where(filter_clause("ns-a", query))) or 0)

    async with engine.connect() as conn:
        some_run = str(await conn.scalar(sa.text("SELECT min(run_id::text) FROM runs")))
    children = RUNS // 50
    assert await selected(f"ParentRunId = '{PARENT_RUN}'") == 1
    assert await selected(f"ParentRunId IN ('{PARENT_RUN}', 'nope')") == 1
    assert await selected(f"ParentRunId = '{PARENT_RUN.upper()}'") == 0
    assert await selected("ParentRunId = 'nope'") == 0
    assert await selected("ParentRunId != 'nope'") == children
    assert await selected(f"ParentRunId NOT IN ('{PARENT_RUN}')") == children - 1
    assert await selected(f"RunId = '{uuid.UUID(some_run).hex}'") == 0  # not its text form
    assert await selected("RunId != '; DROP TABLE runs; --'") == RUNS
    assert await selected(f"RunId STARTS_WITH '{some_run[:8]}'") >= 0
