"""Burrow as a library: its logs go through `logging`, under the host's rules (issue 33 item 1).

Each check runs in a fresh interpreter, since structlog's and logging's configuration is
process-wide and the importing program is the subject.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]

# Records reaching a handler on the root logger, printed as JSON once the script ends.
_RECORDER = """
import json, logging, sys
records = []
class Recorder(logging.Handler):
    def emit(self, record):
        records.append([record.name, record.levelname, record.getMessage(), record.filename,
                        record.exc_info is not None and record.exc_info[0] is not None])
"""


def _run(script: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
        timeout=60,
    )


def _records(script: str) -> list[list[Any]]:
    proc = _run(_RECORDER + textwrap.dedent(script) + "\nprint(json.dumps(records))\n")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    records: list[list[Any]] = json.loads(proc.stdout)
    return records


def test_library_logs_write_only_warnings_and_only_to_stderr_by_default() -> None:
    """Issue 33 item 1: unconfigured, nothing below WARNING is shown and nothing goes to stdout;
    the root logger and the class of other libraries' loggers stay as they were."""
    proc = _run(
        """
        import logging
        root = logging.getLogger()
        before = (root.level, list(root.handlers), logging.getLoggerClass())
        import burrow, structlog
        assert (root.level, list(root.handlers), logging.getLoggerClass()) == before
        log = structlog.get_logger("burrow.worker")
        log.debug("workflow_task_completed", run_id="r1")
        log.info("worker_started", worker_id="w1")
        log.warning("store_unavailable", attempt=2)
        """
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ""
    assert proc.stderr == "store_unavailable attempt=2\n"


def test_host_lowering_the_burrow_level_receives_every_event_as_a_record() -> None:
    """Issue 33 item 1: `logging.getLogger("burrow").setLevel(DEBUG)` plus a handler shows all,
    each record naming the line that logged it."""
    records = _records(
        """
        import burrow, structlog
        from structlog.contextvars import bound_contextvars
        logging.getLogger().addHandler(Recorder())
        log = structlog.get_logger("burrow.worker")
        log.debug("before_the_level_is_lowered")
        logging.getLogger("burrow").setLevel(logging.DEBUG)
        with bound_contextvars(run_id="r1"):
            log.debug("workflow_task_completed", warm=True, commands=["complete_workflow"])
        log.info("worker_started", worker_id="w1")
        try:
            raise RuntimeError("boom")
        except RuntimeError:
            log.exception("loop_failed", loop="repair")
        """
    )
    assert records == [
        [
            "burrow.worker",
            "DEBUG",
            "workflow_task_completed warm=true commands=['complete_workflow'] run_id=r1",
            "<string>",
            False,
        ],
        ["burrow.worker", "INFO", "worker_started worker_id=w1", "<string>", False],
        ["burrow.worker", "ERROR", "loop_failed loop=repair", "<string>", True],
    ]


def test_importing_burrow_leaves_the_root_logger_and_a_configured_structlog_alone() -> None:
    """Issue 33 item 1: the host's structlog configuration and root logger stay as they were."""
    records = _records(
        """
        import structlog
        seen = []
        def keep(logger, method_name, event_dict):
            seen.append(event_dict["event"])
            raise structlog.DropEvent
        structlog.configure(processors=[keep])
        root = logging.getLogger()
        before = (root.level, list(root.handlers), structlog.get_config())
        import burrow
        assert (root.level, list(root.handlers), structlog.get_config()) == before
        structlog.get_logger("burrow.worker").debug("workflow_task_completed")
        records.append(seen)
        """
    )
    assert records == [["workflow_task_completed"]]


def test_capture_logs_sees_burrow_debug_events_at_the_default_level() -> None:
    """Issue 33 item 1: `capture_logs()` still records events the level would drop."""
    records = _records(
        """
        import burrow, structlog
        from structlog.testing import capture_logs
        log = structlog.get_logger("burrow.worker")
        log.debug("cached_before_capture")
        with capture_logs() as captured:
            log.debug("workflow_task_completed", run_id="r1")
            log.info("worker_started")
        records.append([(e["event"], e["log_level"]) for e in captured])
        """
    )
    assert records == [[["workflow_task_completed", "debug"], ["worker_started", "info"]]]
