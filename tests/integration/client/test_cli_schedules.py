"""`burrow schedule create|list|describe|pause|resume|trigger|backfill|update|delete` (issue 30:
"CLI `burrow schedule ...` with `--json`"): bad usage exits 2 before connecting, a refusal of
the store exits 1; neither writes anything."""

from __future__ import annotations

import json
from typing import Any

import pytest
from typer.testing import CliRunner

from burrow.cli import app

ENV = {"COLUMNS": "250", "NO_COLOR": "1"}


def test_every_command_round_trip(database_url: str) -> None:
    runner = CliRunner()
    db = ["--database-url", database_url]

    def json_of(*args: str) -> Any:
        done = runner.invoke(app, ["schedule", *args, "--json", *db], env=ENV)
        assert done.exit_code == 0, done.output
        return json.loads(done.stdout)

    made = json_of(
        "create",
        "hourly",
        "greeter",
        "--task-queue",
        "q1",
        "--cron",
        "0 * * * *",
        "--interval",
        "PT1H/PT5M",
        "--input",
        '["world"]',
        "--overlap-policy",
        "buffer_one",
        "--max-runs",
        "5",
        "--note",
        "greets",
    )
    assert (made["outcome"], made["schedule_id"], made["status"]) == ("created", "hourly", "active")
    assert made["spec"]["intervals"] == [{"every": "PT1H", "offset": "PT5M"}]
    assert made["policies"]["overlap_policy"] == "buffer_one"
    assert made["remaining_actions"] == 5

    described = json_of("describe", "hourly")
    assert described["note"] == "greets" and len(described["next_fire_times"]) == 5
    assert [s["schedule_id"] for s in json_of("list")["schedules"]] == ["hourly"]

    assert json_of("pause", "hourly", "--note", "quiet")["status"] == "paused"
    assert [s["schedule_id"] for s in json_of("list", "--status", "paused")["schedules"]] == [
        "hourly"
    ]
    assert json_of("resume", "hourly")["status"] == "active"

    fired = json_of("trigger", "hourly")
    assert fired["outcome"] == "started" and fired["workflow_id"].startswith("hourly-")

    filled = json_of(
        "backfill",
        "hourly",
        "--start",
        "2026-01-01T00:00:00Z",
        "--end",
        "2026-01-01T02:00:00Z",
        "--overlap-policy",
        "allow_all",
    )
    # 00:00, 00:05, 01:00, 01:05: the cron and the interval's fire times, the end excluded.
    assert filled["fires_attempted"] == 4
    times = ["00:00", "00:05", "01:00", "01:05"]
    assert [f["workflow_id"] for f in filled["results"]] == [
        f"hourly-2026-01-01T{t}:00Z" for t in times
    ]

    changed = json_of("update", "hourly", "--cron", "@daily", "--jitter", "10", "--note", "daily")
    assert changed["spec"]["cron_expressions"] == ["@daily"] and changed["spec"]["intervals"] == []
    assert (changed["policies"]["jitter_seconds"], changed["note"]) == (10, "daily")

    assert json_of("delete", "hourly") == {"schedule_id": "hourly", "outcome": "deleted"}
    assert json_of("list")["schedules"] == []


def test_plain_output_names_the_schedule(database_url: str) -> None:
    runner = CliRunner()
    db = ["--database-url", database_url]
    made = runner.invoke(
        app,
        ["schedule", "create", "s", "greeter", "--task-queue", "q", "--interval", "PT1M", *db],
        env=ENV,
    )
    assert made.exit_code == 0, made.output
    assert "created s" in made.stdout
    listed = runner.invoke(app, ["schedule", "list", *db], env=ENV)
    assert listed.exit_code == 0 and "greeter" in listed.stdout


CREATE = ["create", "s2", "greeter", "--task-queue", "q"]


@pytest.mark.parametrize(
    ("args", "code", "said"),
    [
        ([*CREATE], 2, "at least one cron expression or interval"),
        ([*CREATE, "--cron", "0 * * *"], 2, "needs 5 fields"),
        ([*CREATE, "--cron", "61 * * * *"], 2, "spec.cron_expressions[0]"),
        ([*CREATE, "--interval", "P1M"], 2, "ISO 8601 duration"),
        ([*CREATE, "--interval", "PT1H/PT2H"], 2, "shorter than the interval"),
        ([*CREATE, "--cron", "@daily", "--timezone", "Mars/Base"], 2, "IANA"),
        ([*CREATE, "--cron", "@daily", "--jitter", "4000"], 2, "jitter_seconds"),
        ([*CREATE, "--cron", "@daily", "--max-runs", "0"], 2, "max_runs"),
        ([*CREATE, "--cron", "@daily", "--input", "{"], 2, "--input"),
        ([*CREATE, "--cron", "@daily", "--overlap-policy", "nope"], 2, "nope"),
        (["create", "taken", "greeter", "--task-queue", "q", "--cron", "@daily"], 1, "exists"),
        (["backfill", "taken", "--start", "then", "--end", "2026-01-01T00:00:00Z"], 2, "ISO"),
        (
            ["backfill", "taken", "--start", "2026-01-02T00:00:00Z", "--end", "2026-01-01"],
            2,
            "--end must be after --start",
        ),
        (["update", "taken", "--cron", "x"], 2, "needs 5 fields"),
        (["describe", "nope"], 1, "no schedule 'nope'"),
        (["pause", "nope"], 1, "no schedule 'nope'"),
        (["resume", "nope"], 1, "no schedule 'nope'"),
        (["trigger", "nope"], 1, "no schedule 'nope'"),
        (["delete", "nope"], 1, "no schedule 'nope'"),
        (["update", "nope", "--note", "x"], 1, "no schedule 'nope'"),
    ],
)
def test_refusals_exit_with_the_reason_and_write_nothing(
    database_url: str, args: list[str], code: int, said: str
) -> None:
    runner = CliRunner()
    db = ["--database-url", database_url]
    made = runner.invoke(
        app, ["schedule", *CREATE[:1], "taken", *CREATE[2:], "--cron", "@daily", *db], env=ENV
    )
    assert made.exit_code == 0, made.output
    before = runner.invoke(app, ["schedule", "describe", "taken", "--json", *db], env=ENV).stdout

    refused = runner.invoke(app, ["schedule", *args, *db], env=ENV)

    assert refused.exit_code == code, refused.output
    assert said in refused.output
    after = runner.invoke(app, ["schedule", "list", "--json", *db], env=ENV)
    assert [s["schedule_id"] for s in json.loads(after.stdout)["schedules"]] == ["taken"]
    again = runner.invoke(app, ["schedule", "describe", "taken", "--json", *db], env=ENV).stdout
    assert json.loads(again) == json.loads(before)
