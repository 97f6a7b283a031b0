"""The chaos soak's invariant checker (bench/invariants.py) finds what it claims to find.

Each test builds a store state with the store API and, where needed, rows written by hand the
way a broken runtime would write them, then checks the report names exactly that.
"""

from __future__ import annotations

import json
from typing import Any

import asyncpg  # type: ignore[import-untyped]
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

from bench.invariants import Expected, check, sample_ready_work
from burrow import payloads
from burrow.store import Store
from burrow.store.engine import async_url

QUEUE = "checker"


async def _start(store: Store, workflow_id: str) -> str:
    run = await store.start_workflow(
        namespace="default",
        workflow_id=workflow_id,
        workflow_type="Flow",
        task_queue=QUEUE,
        input=dict(payloads.encode_args([1], what="workflow input")),
    )
    return run.run_id


async def _append(database_url: str, run_id: str, *events: tuple[str, dict[str, Any]]) -> None:
    """Append events after the run's last one, as a completion would, and move last_event_seq."""
    conn = await asyncpg.connect(database_url)
    try:
        last = await conn.fetchval("SELECT last_event_seq FROM runs WHERE run_id = $1", run_id)
        for offset, (event_type, payload) in enumerate(events, start=1):
            await conn.execute(
                "INSERT INTO history_events (run_id, sequence, event_type, payload,"
                " idempotency_key) VALUES ($1, $2, $3, $4::jsonb, $5)",
                run_id,
                last + offset,
                event_type,
                json.dumps(payload),
                f"hand-{last + offset}",
            )
        await conn.execute(
            "UPDATE runs SET last_event_seq = $2 WHERE run_id = $1", run_id, last + len(events)
        )
    finally:
        await conn.close()


def _attempt(number: int, attempt_id: str) -> dict[str, Any]:
    return {
        "activity_execution_id": "exec-1",
        "activity_attempt_id": attempt_id,
        "activity_type": "noop",
        "sequence": 1,
        "attempt_number": number,
    }


async def test_lost_and_stale_ready_work_are_reported(database_url: str, store: Store) -> None:
    """M5, M6: a workflow never started and one still running are lost; a ready task nobody
    claimed for longer than the re-poll interval is reported, a fresh one is not."""
    await _start(store, "running")
    expected = {"running": Expected("done"), "never-started": Expected("done")}

    fresh = await check(database_url, expected, repoll_seconds=3600)
    assert dict(fresh.violation_counts) == {"missing": 1, "unfinished": 1}
    assert (fresh.lost, fresh.duplicates, fresh.violations) == (2, 0, 0)
    assert not fresh.ok

    stale = await check(database_url, expected, repoll_seconds=0)
    assert stale.violation_counts["stale_ready"] == 1
    assert [v.detail.split(" ")[:3] for v in stale.examples if v.kind == "stale_ready"] == [
        ["workflow", "task", "ready"]
    ]


async def test_sampling_reports_work_stranded_while_runs_are_open(
    database_url: str, store: Store
) -> None:
    """M5, M6: the soak's mid-run sample sees a ready task older than its threshold while the
    run is still open (the end-of-soak check would only see it if it was still stranded then),
    and leaves a fresh one alone."""
    stranded = await _start(store, "stranded")
    await _start(store, "fresh")
    conn = await asyncpg.connect(database_url)
    try:
        await conn.execute(
            "UPDATE workflow_tasks SET available_at = now() - interval '30 seconds'"
            " WHERE run_id = $1",
            stranded,
        )
    finally:
        await conn.close()
    engine = create_async_engine(async_url(database_url), poolclass=NullPool)
    try:
        async with engine.connect() as sql:
            sampled = await sample_ready_work(sql, stale_after=5.0)
    finally:
        await engine.dispose()
    assert dict(sampled.violation_counts) == {"stale_ready": 1}
    assert [(str(v.where), v.detail.split(" ")[:3]) for v in sampled.examples] == [
        (stranded, ["workflow", "task", "ready"])
    ]


async def test_a_second_start_of_one_workflow_id_is_a_duplicate(
    database_url: str, store: Store
) -> None:
    """D3: two chains of runs for one workflow id (a start retried after it had committed)."""
    first = await _start(store, "twice")
    conn = await asyncpg.connect(database_url)
    try:  # close the first run so that the id can be started again
        await conn.execute(
            "UPDATE runs SET status = 'completed', closed_at = now() WHERE run_id = $1", first
        )
        await conn.execute("UPDATE workflow_tasks SET state = 'cancelled' WHERE run_id = $1", first)
    finally:
        await conn.close()
    await _append(
        database_url, first, ("WorkflowCompleted", {"output": "x", "payload_codec": "json"})
    )
    await _start(store, "twice")
    report = await check(database_url, {"twice": Expected("done")}, repoll_seconds=3600)
    assert report.duplicates == 1
    assert [v.kind for v in report.examples if v.where == "twice"][:1] == ["duplicate"]


async def test_broken_histories_and_stale_completions_are_reported(
    database_url: str, store: Store
) -> None:
    """D2, D3, W7: repeated commands, two outcomes of one attempt, an outcome of an attempt
    never leased or superseded, a terminal event on a running run and a gap are all named."""
    run_id = await _start(store, "broken")
    scheduled = {"activity_execution_id": "exec-1", "activity_type": "noop", "sequence": 1}
    await _append(
        database_url,
        run_id,
        ("ActivityScheduled", scheduled),
        ("ActivityScheduled", scheduled),
        ("ActivityStarted", _attempt(1, "a1")),
        ("ActivityRetryScheduled", {**_attempt(1, "a1"), "retry_reason": "timeout"}),
        ("ActivityStarted", _attempt(2, "a2")),
        ("ActivityCompleted", _attempt(1, "a1")),  # attempt 1 had timed out: a stale lease
        ("ActivityFailed", _attempt(3, "a3")),  # attempt 3 was never leased
        ("WorkflowCompleted", {"output": "x", "payload_codec": "json"}),
    )
    report = await check(database_url, {"broken": Expected("done")}, repoll_seconds=3600)
    counts = dict(report.violation_counts)
    assert counts["command"] == 1
    assert counts["activity"] == 1  # ActivityCompleted and ActivityFailed for one execution
    # never leased (attempt 3); two outcomes (attempt 1); completion of superseded attempt 1
    assert counts["stale_lease"] == 3
    assert counts["terminal"] == 1  # the run is still running
    assert "sequence" not in counts

    conn = await asyncpg.connect(database_url)
    try:
        await conn.execute("DELETE FROM history_events WHERE run_id = $1 AND sequence = 3", run_id)
    finally:
        await conn.close()
    gap = await check(database_url, {"broken": Expected("done")}, repoll_seconds=3600)
    assert gap.violation_counts["sequence"] == 1
