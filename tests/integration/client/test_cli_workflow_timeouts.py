"""`burrow workflow start --execution-timeout --run-timeout`; describe shows them (issue 28)."""

from __future__ import annotations

import asyncio
import json
import re

import pytest
from typer.testing import CliRunner

from burrow import Client, Settings
from burrow.cli import app
from burrow.config import WakeSettings

ENV = {"COLUMNS": "250", "NO_COLOR": "1", "BURROW_WAKES": "0"}
ISO = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?\+00:00"


async def _runs(database_url: str) -> int:
    settings = Settings(database_url=database_url, wakes=WakeSettings(enabled=False))
    async with await Client.connect(settings=settings) as client:
        return len(await client.list_workflows())


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--execution-timeout", "10", "--run-timeout", "20"], "--run-timeout"),
        (["--run-timeout", "0"], "--run-timeout"),
        (["--execution-timeout", "-5"], "--execution-timeout"),
        (["--execution-timeout", "nan"], "--execution-timeout"),
    ],
)
def test_bad_timeouts_exit_2_and_write_nothing(
    database_url: str, flags: list[str], said: str
) -> None:
    """Issue 28: a bad timeout is a usage error (exit 2), refused before anything is written."""
    runner = CliRunner()
    db = ["--database-url", database_url]

    refused = runner.invoke(
        app, ["workflow", "start", "SleepyFlow", "--task-queue", "q", *flags, *db], env=ENV
    )

    assert refused.exit_code == 2, refused.output
    assert said in refused.output
    assert asyncio.run(_runs(database_url)) == 0


def test_start_with_timeouts_and_describe_shows_the_deadlines(database_url: str) -> None:
    """Issue 28: the run records both timeouts; describe prints them and their deadlines."""
    runner = CliRunner()
    db = ["--database-url", database_url]
    started = runner.invoke(
        app,
        [
            "workflow",
            "start",
            "SleepyFlow",
            "--task-queue",
            "q",
            "--id",
            "timed-1",
            "--execution-timeout",
            "600",
            "--run-timeout",
            "60",
            *db,
        ],
        env=ENV,
    )
    assert started.exit_code == 0, started.output

    human = runner.invoke(app, ["workflow", "describe", "timed-1", *db], env=ENV)
    assert human.exit_code == 0, human.output
    for key in ("execution_deadline_at", "run_deadline_at"):
        assert re.search(rf"^{key}\s+{ISO}\s*$", human.stdout, re.MULTILINE), human.stdout
    assert re.search(r"^run_timeout_seconds\s+60\.0\s*$", human.stdout, re.MULTILINE)
    assert re.search(r"^retry_attempt\s+1\s*$", human.stdout, re.MULTILINE)

    as_json = runner.invoke(app, ["workflow", "describe", "timed-1", "--json", *db], env=ENV)
    document = json.loads(as_json.stdout)
    assert (document["execution_timeout_seconds"], document["run_timeout_seconds"]) == (600, 60)
    assert document["run_deadline_at"] < document["execution_deadline_at"]
    assert (document["retry_attempt"], document["retry_of_run_id"]) == (1, None)
