"""Issue 13 item 8: the real `burrow workflow` commands read large inputs from a file or stdin,
and refuse unusable input, ids and run ids with exit code 2, writing nothing.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine

from burrow import payloads
from burrow.store import schema
from burrow.store.engine import async_url
from tests.acceptance.test_cli_workflow import Cli, cli_database_url
from tests.apps import broker_flows
from tests.support import spawn

pytestmark = pytest.mark.slow

__all__ = ["cli_database_url"]  # the fixture, imported for this module's tests

# Above Linux's limit for one command-line argument (MAX_ARG_STRLEN, 128 KiB).
LARGE_VALUE = "burrow-" * (300 * 1024 // 7)
LARGE_INPUT = json.dumps([LARGE_VALUE])
WORKER_APP = "tests.apps.broker_flows:app"


def _start_echo(cli: Cli, workflow_id: str, input_value: str, stdin: str | None = None) -> Any:
    return cli.json(
        "workflow", "start", "EchoFlow", "--id", workflow_id,
        "--task-queue", broker_flows.TASK_QUEUE, "--input", input_value,
        "--wait", "--timeout", "60", stdin=stdin,
    )  # fmt: skip


async def _stored_runs(database_url: str) -> dict[str, tuple[str, list[Any]]]:
    """workflow id → (status, decoded input), read from the store itself."""
    engine = create_async_engine(async_url(database_url))
    try:
        async with engine.connect() as conn:
            rows = await conn.execute(
                sa.select(schema.runs.c.workflow_id, schema.runs.c.status, schema.runs.c.input)
            )
            return {r.workflow_id: (r.status, payloads.decode_args(r.input)) for r in rows}
    finally:
        await engine.dispose()


def _stop(worker: spawn.Process) -> None:
    if worker.poll() is None:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(timeout=30)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait(timeout=10)


def test_large_input_from_a_file_and_from_stdin_reaches_the_workflow(
    cli_database_url: str, tmp_path: Path
) -> None:
    cli = Cli(cli_database_url)
    if sys.platform == "linux":
        # Why the file and stdin forms exist: the same input cannot be an argument.
        with pytest.raises(OSError, match="Argument list too long"):
            cli("workflow", "start", "EchoFlow", "--task-queue", "q", "--input", LARGE_INPUT)
    args_file = tmp_path / "args.json"
    args_file.write_text(LARGE_INPUT)
    log = tmp_path / "worker.log"
    worker = cli.worker(log, WORKER_APP, "--worker-id", "cli-input-worker")
    try:
        from_file = _start_echo(cli, "large-from-file", f"@{args_file}")
        from_stdin = _start_echo(cli, "large-from-stdin", "-", stdin=LARGE_INPUT)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\nworker log:\n{log.read_text()}") from exc
    finally:
        _stop(worker)
    assert from_file["result"] == f"echo:{LARGE_VALUE}"
    assert from_stdin["result"] == f"echo:{LARGE_VALUE}"
    # Read from the store: it is what was accepted, and it keeps the check off the printed output.
    assert asyncio.run(_stored_runs(cli_database_url)) == {
        "large-from-file": ("completed", [LARGE_VALUE]),
        "large-from-stdin": ("completed", [LARGE_VALUE]),
    }


def _bad_input_cases(tmp_path: Path, run_id: str) -> list[tuple[list[str], str | None, str]]:
    """(arguments, stdin, message) of commands that must each exit 2 and write nothing."""
    not_utf8 = tmp_path / "latin1.json"
    not_utf8.write_bytes('["café"]'.encode("latin-1"))
    broken = tmp_path / "broken.json"
    broken.write_text('[\n  "a",\n  "b"\n  "c"\n]')
    start = ["workflow", "start", "EchoFlow", "--task-queue", broker_flows.TASK_QUEUE]
    signal_ = ["workflow", "signal", "target", "approve"]
    missing = tmp_path / "missing.json"
    return [
        ([*start, "--input", f"@{missing}"], None, f"--input @{missing}: no such file"),
        ([*start, "--input", f"@{tmp_path}"], None, "is a directory, not a file"),
        ([*start, "--input", f"@{not_utf8}"], None, "is not UTF-8 text: byte 0xe9 at offset 5"),
        ([*start, "--input", f"@{broken}"], None, "(Expecting ',' delimiter at line 4, column 3)"),
        ([*start, "--input", "-"], "[1,\n", "--input from stdin is not valid JSON"),
        ([*start, "--input", "-"], "", "--input from stdin is empty"),
        ([*start, "--input", "-"], '{"a": 1}', "must be a JSON array"),
        ([*start, "--id", ""], None, "--id must not be empty; leave --id out"),
        ([*start, "--id", "   "], None, "--id '   ' is blank"),
        ([*start, "--id", "target "], None, "--id 'target ' has leading or trailing whitespace"),
        ([*signal_, "--input", f"@{broken}"], None, "at line 4, column 3"),
        ([*signal_, "--input", "-"], "\xff", "is not valid JSON"),
        ([*signal_, "--signal-id", " "], None, "--signal-id ' ' is blank"),
        ([*signal_, "--run-id", "not-a-uuid"], None, "--run-id 'not-a-uuid' is not a run id"),
        (["workflow", "signal", " target", "approve"], None, "leading or trailing whitespace"),
        (["workflow", "cancel", "target", "--run-id", run_id[:-1]], None, "is not a run id"),
        (["workflow", "terminate", "target", "--run-id", "1"], None, "is not a run id"),
        (["workflow", "describe", "target", "--run-id", "x"], None, "is not a run id"),
        (["workflow", "history", "", "--run-id", run_id], None, "workflow id must not be empty"),
        (["workflow", "result", "target", "--run-id", "latest"], None, "is not a run id"),
    ]


@pytest.mark.runs_no_workflow_code
def test_bad_input_ids_and_run_ids_exit_2_and_write_nothing(
    cli_database_url: str, tmp_path: Path
) -> None:
    cli = Cli(cli_database_url)
    started = cli.json(
        "workflow", "start", "EchoFlow", "--id", "target",
        "--task-queue", broker_flows.TASK_QUEUE, "--input", '["x"]',
    )  # fmt: skip
    before = cli.json("workflow", "history", "target")
    cases = _bad_input_cases(tmp_path, started["run_id"])
    # Independent processes that each must write nothing: run a few at a time.
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda case: cli(*case[0], expect=2, stdin=case[1]), cases))
    for (args, _, message), refused in zip(cases, results, strict=True):
        assert message in refused.stderr, f"burrow {' '.join(args)}: {refused.stderr}"
        assert refused.stderr.startswith("error: ")
        assert refused.stdout == ""
        assert "Traceback" not in refused.stderr
    runs = cli.json("workflow", "list")
    assert [(r["workflow_id"], r["run_id"]) for r in runs] == [("target", started["run_id"])]
    described = cli.json("workflow", "describe", "target", "--run-id", started["run_id"].upper())
    assert described["status"] == "running"
    assert described["cancel_requested"] is False
    assert cli.json("workflow", "history", "target") == before
