"""D1: what the workflow sandbox lets through: logging, metrics, the escape hatch, reads, others.

Guards arm only on the thread running an activation and only for workflow code: clocks read by
logging, structlog and prometheus_client, code inside `workflow.unsafe.sandbox_unrestricted()`,
file reads, other threads, and everything outside an activation keep the real functions.
"""

from __future__ import annotations

import datetime
import io
import logging
import os
import pathlib
import random
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator

import prometheus_client
import pytest
import structlog

from burrow import workflow
from burrow.errors import WorkflowSandboxError
from burrow.replay import sandbox_guards
from burrow.replay.sandbox import sandboxed
from tests.unit.replay.test_sandbox_guards import CASES, Env


@pytest.fixture
def env(tmp_path: pathlib.Path) -> Iterator[Env]:
    (tmp_path / "r").write_text("")
    with socket.socket() as sock:
        yield Env(tmp=tmp_path, sock=sock)


def test_every_guard_has_a_case() -> None:
    """D1: the guard table and the cases of test_sandbox_guards.py name the same calls."""
    sandbox_guards.install()
    guarded = {g.described() for g in sandbox_guards.GUARDS}
    guarded |= {
        f"{cls.__module__}.{cls.__qualname__}.{name}()"
        for cls, name in sandbox_guards.CLOCK_METHODS
    }
    assert guarded - {"random.SystemRandom.randbytes()"} <= {c.call for c in CASES}
    assert {c.call for c in CASES} - {"datetime.datetime.today()"} <= guarded


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c.call}-{CASES.index(c)}")
def test_outside_workflow_code_nothing_is_guarded(case: object, env: Env) -> None:
    """D1: after an activation the same calls run normally (some fail on their own: no server)."""
    with sandboxed():
        pass
    try:
        case.run(env)  # type: ignore[attr-defined]
    except WorkflowSandboxError:
        raise
    except (OSError, AttributeError):
        pass  # port 9 refuses, no getrandom: the real function ran


def test_other_threads_keep_the_real_functions_during_an_activation() -> None:
    """D1: an activity thread running while workflow code runs is not sandboxed."""
    go, done = threading.Event(), threading.Event()
    seen: list[object] = []

    def activity() -> None:
        go.wait()
        try:
            seen.extend([time.time(), datetime.datetime.now(), random.random(), uuid.uuid4()])
        except Exception as exc:
            seen.append(exc)
        done.set()

    thread = threading.Thread(target=activity)
    thread.start()
    with sandboxed():
        go.set()
        done.wait(10)
        with pytest.raises(WorkflowSandboxError):
            time.time()
    thread.join()
    assert len(seen) == 4 and not any(isinstance(s, Exception) for s in seen), seen


def test_logging_inside_workflow_code_reads_the_clock() -> None:
    """D1: stdlib logging stamps records (time.time) from workflow code."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
    logger = logging.getLogger("tests.sandbox.logging")
    logger.addHandler(handler)
    try:
        with sandboxed():
            logger.warning("inside %s", "workflow code")
    finally:
        logger.removeHandler(handler)
    assert "inside workflow code" in stream.getvalue()


@pytest.mark.parametrize("fmt", ["iso", None])
def test_structlog_timestamps_inside_workflow_code(fmt: str | None) -> None:
    """D1: structlog's TimeStamper reads datetime.now() or time.time() from workflow code."""
    out = io.StringIO()
    log = structlog.wrap_logger(
        structlog.PrintLogger(out),
        processors=[structlog.processors.TimeStamper(fmt=fmt), structlog.processors.JSONRenderer()],
    )
    with sandboxed():
        log.info("inside")
    assert '"timestamp"' in out.getvalue()


def test_prometheus_metrics_inside_workflow_code() -> None:
    """D1: prometheus_client reads clocks (creation times, set_to_current_time, .time())."""
    registry = prometheus_client.CollectorRegistry()
    with sandboxed():
        counter = prometheus_client.Counter("sandbox_steps", "steps", registry=registry)
        counter.inc()
        gauge = prometheus_client.Gauge("sandbox_last", "when", registry=registry)
        gauge.set_to_current_time()
        histogram = prometheus_client.Histogram("sandbox_took", "took", registry=registry)
        with histogram.time():
            pass
    assert registry.get_sample_value("sandbox_steps_total") == 1.0
    assert (registry.get_sample_value("sandbox_last") or 0) > 0


def test_escape_hatch_lifts_the_guard_for_its_block_only() -> None:
    """D1: workflow.unsafe.sandbox_unrestricted() lets logging/metrics code read clocks."""
    with sandboxed():
        with workflow.unsafe.sandbox_unrestricted():
            assert time.monotonic() > 0
            assert datetime.datetime.now(datetime.UTC).year > 2000
        with pytest.raises(WorkflowSandboxError):
            time.monotonic()


def _read(path: pathlib.Path, mode: str) -> object:
    with open(path, mode) as f:
        return f.read()


READS: list[Callable[[pathlib.Path], object]] = [
    lambda p: _read(p, "r"),
    lambda p: _read(p, "rb"),
    lambda p: p.read_text(),
    lambda p: os.close(os.open(p, os.O_RDONLY)),
]


@pytest.mark.parametrize("read", READS)
def test_reading_files_is_allowed(read: Callable[[pathlib.Path], object], env: Env) -> None:
    """D1: imports, tracebacks and templates read files; only writing is guarded."""
    with sandboxed():
        read(env.tmp / "r")
