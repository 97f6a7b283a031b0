"""The real `burrow` command line, as subprocesses, against a throwaway Postgres database."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import make_url

from tests.support import spawn

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
ORDER = {"order_id": "o1", "amount_cents": 100, "items": ["a"]}
ORDER_INPUT = json.dumps([ORDER])
COMMAND_TIMEOUT = 90


@pytest.fixture
def cli_database_url(database_url: str) -> str:
    """A migrated database of this test's own (a clone of the suite's template; never `burrow`)."""
    return database_url


class Cli:
    """Runs `python -m burrow ...` on one database."""

    def __init__(self, database_url: str) -> None:
        self.env = {
            **os.environ,
            "BURROW_DATABASE_URL": database_url,
            "BURROW_NAMESPACE": "default",
            "COLUMNS": "200",
            "NO_COLOR": "1",
        }

    def __call__(
        self, *args: str, expect: int | None = 0, stdin: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        proc = spawn.run(
            [sys.executable, "-m", "burrow", *args],
            cwd=ROOT,
            env=self.env,
            input=stdin,
            timeout=COMMAND_TIMEOUT,
        )
        assert expect is None or proc.returncode == expect, (
            f"burrow {' '.join(args)} exited {proc.returncode}, expected {expect}\n"
            f"stdout: {proc.stdout}\nstderr: {proc.stderr}"
        )
        return proc

    def json(self, *args: str, stdin: str | None = None) -> Any:
        return json.loads(self(*args, "--json", stdin=stdin).stdout)

    def worker(self, log: Path, *args: str) -> spawn.Process:
        with log.open("wb") as out:
            return spawn.popen(
                [sys.executable, "-m", "burrow", "worker", *args],
                cwd=ROOT,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )


def start_order(cli: Cli, workflow_id: str, *extra: str) -> Any:
    return cli.json(
        "workflow",
        "start",
        "OrderWorkflow",
        "--id",
        workflow_id,
        "--task-queue",
        "demo-orders",
        "--input",
        ORDER_INPUT,
        *extra,
    )


@pytest.mark.sticky_cache_set_by_test  # no worker runs: a sticky cache has nothing to change
@pytest.mark.runs_no_workflow_code
def test_workflow_commands_without_a_worker(cli_database_url: str) -> None:
    cli = Cli(cli_database_url)
    migrated = cli("migrate")
    assert migrated.stdout.strip().endswith(f"{make_url(cli_database_url).database} to head")

    started = start_order(cli, "cli-order-1")
    assert started["workflow_id"] == "cli-order-1"
    run_id = started["run_id"]
    assert run_id

    plain = cli("workflow", "start", "OrderWorkflow", "--id", "cli-order-2", "--task-queue",
                "demo-orders", "--input", ORDER_INPUT)  # fmt: skip
    assert "cli-order-2" in plain.stdout

    described = cli.json("workflow", "describe", "cli-order-1")
    assert described["status"] == "running"
    assert described["run_id"] == run_id
    assert described["workflow_type"] == "OrderWorkflow"
    assert described["input"] == [ORDER]
    assert described["workflow_task"]["state"] == "ready"
    assert described["activities"] == []
    assert "no live worker" in described["compatibility_gap"]
    assert described["created_at"].startswith("20")
    assert described["sticky_worker_id"] is None and described["sticky_replay_mode"] is None

    same_run = cli.json("workflow", "describe", "cli-order-1", "--run-id", run_id)
    assert same_run["run_id"] == run_id

    events = cli.json("workflow", "history", "cli-order-1")
    assert events[0]["sequence"] == 1
    assert events[0]["event_type"] == "WorkflowStarted"
    assert "WorkflowStarted" in cli("workflow", "history", "cli-order-1").stdout

    signalled = cli.json("workflow", "signal", "cli-order-1", "approve", "--input", '["ops"]')
    assert signalled["delivered"] is True
    again = ("workflow", "signal", "cli-order-1", "approve", "--input", '["ops"]')
    assert cli.json(*again, "--signal-id", "s-1")["delivered"] is True
    assert cli.json(*again, "--signal-id", "s-1")["delivered"] is False

    assert cli.json("workflow", "cancel", "cli-order-1", "--reason", "test")["cancel_requested"]
    assert cli.json("workflow", "describe", "cli-order-1")["cancel_requested"] is True

    cli("workflow", "terminate", "cli-order-2", "--reason", "not needed")
    assert cli.json("workflow", "describe", "cli-order-2")["status"] == "terminated"

    listed = cli.json("workflow", "list")
    assert {"cli-order-1", "cli-order-2"} <= {r["workflow_id"] for r in listed}
    running = cli.json("workflow", "list", "--status", "running", "--limit", "10")
    assert [r["workflow_id"] for r in running] == ["cli-order-1"]
    assert "cli-order-1" in cli("workflow", "list").stdout

    duplicate = cli("workflow", "start", "OrderWorkflow", "--id", "cli-order-1", "--task-queue",
                    "demo-orders", expect=1)  # fmt: skip
    assert "already running" in duplicate.stderr
    assert "Traceback" not in duplicate.stderr

    unknown = cli("workflow", "describe", "no-such-workflow", "--json", expect=1)
    assert "error:" in unknown.stderr
    assert "no-such-workflow" in unknown.stderr
    assert unknown.stdout == ""

    result = cli("workflow", "result", "cli-order-2", expect=1)
    assert "terminated" in result.stderr

    missing_db = make_url(cli_database_url).set(database=f"{make_url(cli_database_url).database}_x")
    missing = cli(
        "workflow", "list", "--database-url", missing_db.render_as_string(False), expect=1
    )
    assert "does not exist" in missing.stderr
    assert "burrow migrate" in missing.stderr
    assert "Traceback" not in missing.stderr


@pytest.mark.sticky_cache_set_by_test  # no worker runs
@pytest.mark.runs_no_workflow_code
def test_a_long_json_document_reaches_a_lagging_reader_whole(cli_database_url: str) -> None:
    """A 300 KB `describe --json` read late still arrives whole, with Python unbuffered.

    Unbuffered (PYTHONUNBUFFERED), a short write to the pipe dropped all but 64 KiB and the
    command exited 0.
    """
    cli = Cli(cli_database_url)
    big = json.dumps([{"order_id": "o1", "notes": "n" * 300_000}])
    cli("workflow", "start", "OrderWorkflow", "--id", "big-1", "--task-queue", "demo-orders",
        "--input", "-", stdin=big)  # fmt: skip
    proc = subprocess.Popen(
        [sys.executable, "-m", "burrow", "workflow", "describe", "big-1", "--json"],
        cwd=ROOT,
        env={**cli.env, "PYTHONUNBUFFERED": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    # Read nothing until the command has written (it waits on the full pipe) or exited.
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=3)
    out, err = proc.communicate(timeout=COMMAND_TIMEOUT)
    assert proc.returncode == 0, err
    assert json.loads(out)["input"][0]["notes"] == "n" * 300_000


def test_worker_runs_orders_and_drains_on_sigterm(cli_database_url: str, tmp_path: Path) -> None:
    cli = Cli(cli_database_url)
    log = tmp_path / "worker.log"
    worker = cli.worker(log, "burrow.demo:app", "--worker-id", "cli-test-worker")
    try:
        try:
            done = start_order(cli, "cli-order-wait", "--wait", "--timeout", "60")
        except AssertionError as exc:
            detail = cli("workflow", "describe", "cli-order-wait", expect=None).stdout
            raise AssertionError(
                f"{exc}\nworker exit code: {worker.poll()}\ndescribe: {detail}\n"
                f"worker log:\n{log.read_text()}"
            ) from exc
        assert done["result"] == {
            "order_id": "o1",
            "reservation": f"reservation-{done['run_id']}:3",
            "charge": "charge-100",
            "shipment": "shipment-of-1-items",  # by the ShipmentWorkflow child
            "tracking": done["result"]["tracking"],
            "status": "auto-approved",
            "version": 3,
        }
        assert cli.json("workflow", "describe", "cli-order-wait")["status"] == "completed"
        assert cli.json("workflow", "result", "cli-order-wait")["result"] == done["result"]
        assert "charge-100" in cli("workflow", "result", "cli-order-wait").stdout

        refused = cli("workflow", "start", "NoSuchWorkflow", "--task-queue", "demo-orders",
                      expect=1)  # fmt: skip
        assert "unknown workflow type 'NoSuchWorkflow'" in refused.stderr

        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=30) == 0, log.read_text()
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait(timeout=10)
    output = log.read_text()
    assert "cli-test-worker" in output
    assert "worker_stopped" in output
