"""`burrow replay verify` on real histories: runs made by a real worker, read from Postgres or
from files written by `burrow workflow history --export` (D1, D4, C5).

The unchanged code replays every run; the same workflow changed without a version guard is caught
at the step it changed, with what the code does now and what history recorded.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest
from durable_workflow import history_bundle_verify
from durable_workflow import workflow as dw_workflow
from durable_workflow.workflow import CompleteWorkflow, Replayer

from burrow import Client
from burrow.testing import assert_eventually
from tests.apps import replay_flows
from tests.support import spawn

pytestmark = [pytest.mark.slow, pytest.mark.sticky_cache_set_by_test]

ROOT = Path(__file__).resolve().parents[2]
APP = "tests.apps.replay_flows:app"
CHANGED_APP = "tests.apps.replay_flows:changed_app"
WORKFLOW_IDS = ["ship-done", "ship-released", "ship-held"]


def burrow(database_url: str, *args: str, expect: int) -> subprocess.CompletedProcess[str]:
    """Run the real command line; assert its exit code."""
    env = {**os.environ, "BURROW_DATABASE_URL": database_url, "COLUMNS": "250", "NO_COLOR": "1"}
    proc = spawn.run(
        [sys.executable, "-m", "burrow", *args],
        cwd=ROOT,
        env=env,
        timeout=90,
        check=False,
    )
    assert proc.returncode == expect, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc


async def record_runs(client: Client, worker_process: Any) -> dict[str, list[str]]:
    """Three real runs: one completed, one completed after a signal, one open and waiting."""
    worker_process("replay-verify-worker", target=APP)
    handles = {
        workflow_id: await client.start_workflow(
            "Shipment", "o1", hold, id=workflow_id, task_queue=replay_flows.TASK_QUEUE
        )
        for workflow_id, hold in zip(WORKFLOW_IDS, [False, True, True], strict=True)
    }
    assert await handles["ship-done"].result(timeout=30) == "shipped box-o1/stamp-1"

    async def both_waiting() -> bool:
        held = [await handles[w].history() for w in ("ship-released", "ship-held")]
        return all(any(e.event_type == "SideEffectRecorded" for e in h) for h in held)

    await assert_eventually(both_waiting, message="held runs reached their wait")
    await handles["ship-released"].signal("release")
    assert await handles["ship-released"].result(timeout=30) == "shipped box-o1/stamp-1"
    return {w: [e.event_type for e in await h.history()] for w, h in handles.items()}


def assert_caught_at_step_2(runs: list[dict[str, Any]]) -> None:
    assert len(runs) == 3
    for run in runs:
        assert run["verdict"] == "diverged", run
        assert run["divergence"] == {
            "step": 2,
            "expected": "activity 'weigh'",
            "recorded": "side effect",
        }


async def test_verify_from_database_passes_unchanged_code_and_catches_a_change(
    database_url: str, client: Client, worker_process: Any
) -> None:
    """D1, D4: the newest runs of a type, replayed with no side effects (history unchanged)."""
    before = await record_runs(client, worker_process)
    verify = ("replay", "verify", "--workflow-type", "Shipment", "--limit", "10")

    passed = json.loads(burrow(database_url, *verify, "--app", APP, "--json", expect=0).stdout)
    assert passed["ok"] is True
    assert passed["summary"] == {"ok": 3, "diverged": 0, "error": 0}
    assert sorted(r["workflow_id"] for r in passed["runs"]) == sorted(WORKFLOW_IDS)

    caught = json.loads(
        burrow(database_url, *verify, "--app", CHANGED_APP, "--json", expect=1).stdout
    )
    assert caught["ok"] is False
    assert_caught_at_step_2(caught["runs"])
    table = burrow(database_url, *verify, "--app", CHANGED_APP, expect=1).stdout
    assert "step 2: the code now produces activity 'weigh', history recorded side effect" in table
    assert "0 ok, 3 diverged, 0 error" in table

    limited = burrow(database_url, *verify[:-1], "1", "--app", APP, "--json", expect=0).stdout
    assert [r["workflow_id"] for r in json.loads(limited)["runs"]] == ["ship-held"]  # newest
    after = {w: [e.event_type for e in await client.get_handle(w).history()] for w in before}
    assert after == before  # verifying wrote nothing


async def test_verify_exported_files_passes_unchanged_code_and_catches_a_change(
    database_url: str, client: Client, worker_process: Any, tmp_path: Path
) -> None:
    """C5: exported histories verified without a database, as a user's CI job would."""
    await record_runs(client, worker_process)
    exports = tmp_path / "exports"
    exports.mkdir()
    for workflow_id in WORKFLOW_IDS:
        path = exports / f"{workflow_id}.json"
        done = burrow(database_url, "workflow", "history", workflow_id, "--export", str(path),
                      expect=0)  # fmt: skip
        assert str(path) in done.stdout
    to_stdout = burrow(database_url, "workflow", "history", "ship-held", "--export", "-", expect=0)
    held = json.loads(to_stdout.stdout)
    assert held["workflow"]["status"] == "running"
    assert held["history_events"] == json.loads(files_text(exports, "ship-held"))["history_events"]
    no_database = "postgresql://postgres@127.0.0.1:1/none"  # files only: never connects

    passed = burrow(no_database, "replay", "verify", "--app", APP, "--file", str(exports),
                    "--json", expect=0)  # fmt: skip
    assert json.loads(passed.stdout)["summary"] == {"ok": 3, "diverged": 0, "error": 0}
    files = [str(exports / f"{w}.json") for w in WORKFLOW_IDS]
    caught = burrow(no_database, "replay", "verify", "--app", CHANGED_APP, "--file", files[0],
                    "--file", files[1], "--file", files[2], "--json", expect=1)  # fmt: skip
    assert_caught_at_step_2(json.loads(caught.stdout)["runs"])
    assert [r["source"] for r in json.loads(caught.stdout)["runs"]] == files


def files_text(folder: Path, workflow_id: str) -> str:
    return (folder / f"{workflow_id}.json").read_text()


@dw_workflow.defn(name="Shipment")
class SdkShipment:
    """Shipment written with the durable-workflow SDK, for its own Replayer."""

    def run(self, ctx: Any, order: str, hold: bool) -> Generator[Any, Any, Any]:
        box = yield ctx.schedule_activity("pack", [order])
        stamp = yield ctx.side_effect(lambda: "never evaluated on replay")
        result = yield ctx.schedule_activity("ship", [f"{box}/{stamp}"])
        return result


async def test_exported_file_is_read_by_the_sdk_replay_tools(
    database_url: str, client: Client, worker_process: Any, tmp_path: Path
) -> None:
    """One export format: the SDK's bundle checker accepts it and its Replayer replays it."""
    await record_runs(client, worker_process)
    path = tmp_path / "ship-done.json"
    burrow(database_url, "workflow", "history", "ship-done", "--export", str(path), expect=0)
    text = path.read_text()
    report = history_bundle_verify.verify_bundle_json(text)
    assert report["status"] == "ok", report["findings"]
    outcome = Replayer(workflows=[SdkShipment]).replay(json.loads(text))
    assert len(outcome.commands) == 1
    command = outcome.commands[0]
    assert isinstance(command, CompleteWorkflow)
    assert command.result == "shipped box-o1/stamp-1"
