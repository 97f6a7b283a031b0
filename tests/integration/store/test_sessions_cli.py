"""`burrow sessions list|show` against a real database (W9)."""

from __future__ import annotations

import asyncio
import json

from typer.testing import CliRunner

from burrow.cli import app
from burrow.protocol.shapes import SessionSpec
from burrow.store import Store
from tests.support.store import NS, QUEUE

WIDE = {"COLUMNS": "250", "NO_COLOR": "1"}


async def _two_sessions(database_url: str) -> None:
    store = Store.connect(database_url, pool_size=1)
    try:
        await store.register_worker(
            worker_id="gpu-1",
            namespace=NS,
            task_queue=QUEUE,
            workflow_types=[],
            activity_types=["charge"],
            concurrency=1,
            capabilities=["gpu:nvidia-l4"],
        )
        for session_id in ("render-a", "render-b"):
            options = SessionSpec(session_id=session_id, requirements=["gpu:nvidia-l4"])
            await store.create_worker_session(worker_id="gpu-1", namespace=NS, options=options)
        await store.close_worker_session(worker_id="gpu-1", namespace=NS, session_id="render-b")
    finally:
        await store.close()


def test_w9_sessions_list_and_show(database_url: str) -> None:
    asyncio.run(_two_sessions(database_url))
    runner = CliRunner()
    db = ["--database-url", database_url]

    listed = runner.invoke(app, ["sessions", "list", "--json", *db], env=WIDE)
    assert listed.exit_code == 0, listed.output
    document = json.loads(listed.stdout)
    assert document["namespace"] == NS
    assert document["metrics"] == {
        "total": 2,
        "active": 1,
        "closed": 1,
        "expired": 0,
        "failed": 0,
        "orphaned": 0,
    }
    assert {s["session_id"]: s["status"] for s in document["sessions"]} == {
        "render-a": "active",
        "render-b": "closed",
    }

    closed = runner.invoke(app, ["sessions", "list", "--state", "closed", "--json", *db], env=WIDE)
    assert [s["session_id"] for s in json.loads(closed.stdout)["sessions"]] == ["render-b"]

    table = runner.invoke(app, ["sessions", "list", *db], env=WIDE)
    assert table.exit_code == 0, table.output
    assert "render-a" in table.stdout and "gpu:nvidia-l4" in table.stdout
    assert "active 1" in table.stdout and "closed 1" in table.stdout

    shown = runner.invoke(app, ["sessions", "show", "render-a", "--json", *db], env=WIDE)
    session = json.loads(shown.stdout)["session"]
    assert (session["lease_owner"], session["requirements"]) == ("gpu-1", ["gpu:nvidia-l4"])
    assert session["holder"]["worker_id"] == "gpu-1"
    human = runner.invoke(app, ["sessions", "show", "render-b", *db], env=WIDE)
    assert human.exit_code == 0 and "worker_shutdown" in human.stdout

    missing = runner.invoke(app, ["sessions", "show", "nope", *db], env=WIDE)
    assert missing.exit_code == 1
    assert "worker_session_not_found" in missing.stderr
