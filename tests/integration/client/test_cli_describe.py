"""`burrow workflow describe` prints every time as ISO 8601 (issue 25 item 10)."""

from __future__ import annotations

import asyncio
import json
import re
from datetime import datetime

from typer.testing import CliRunner

from burrow import Client, Settings
from burrow.cli import app
from burrow.config import WakeSettings

ENV = {"COLUMNS": "250", "NO_COLOR": "1", "BURROW_WAKES": "0"}
ISO = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?\+00:00"


async def _terminated_run(database_url: str, workflow_id: str) -> None:
    settings = Settings(database_url=database_url, wakes=WakeSettings(enabled=False))
    async with await Client.connect(settings=settings) as client:
        handle = await client.start_workflow(
            "DatedFlow", id=workflow_id, task_queue="dated", check_workers=False
        )
        await handle.terminate(reason="done with it")


def test_describe_prints_closed_at_and_created_at_as_iso_8601(database_url: str) -> None:
    """Issue 25 item 10: not a `datetime.datetime(...)` repr, in the table or in --json."""
    asyncio.run(_terminated_run(database_url, "dated-1"))
    runner = CliRunner()
    db = ["--database-url", database_url]

    human = runner.invoke(app, ["workflow", "describe", "dated-1", *db], env=ENV)
    assert human.exit_code == 0, human.output
    assert "datetime" not in human.stdout
    for key in ("created_at", "closed_at"):
        assert re.search(rf"^{key}\s+{ISO}\s*$", human.stdout, re.MULTILINE), human.stdout

    as_json = runner.invoke(app, ["workflow", "describe", "dated-1", "--json", *db], env=ENV)
    assert as_json.exit_code == 0, as_json.output
    document = json.loads(as_json.stdout)
    for key in ("created_at", "closed_at"):
        assert re.fullmatch(ISO, document[key]), document[key]
        assert datetime.fromisoformat(document[key]).tzinfo is not None
