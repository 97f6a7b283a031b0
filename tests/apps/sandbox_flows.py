"""Workflows that touch the sandbox (D1): guarded calls, imported by name, and allowed logging.

The names below are imported directly on purpose: `from time import monotonic` binds the real
function before any guard exists, and the sandbox rebinds them in this module.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import datetime
from random import choice
from time import monotonic
from uuid import uuid4

import prometheus_client
import structlog

from burrow import App, workflow

TASK_QUEUE = "sandbox-flows"

REGISTRY = prometheus_client.CollectorRegistry()
STEPS = prometheus_client.Counter("sandbox_flow_steps", "steps", registry=REGISTRY)
LAST_STEP = prometheus_client.Gauge("sandbox_flow_last_step", "when", registry=REGISTRY)
STEP_SECONDS = prometheus_client.Histogram("sandbox_flow_step_seconds", "took", registry=REGISTRY)

PROBES: dict[str, Callable[[], object]] = {
    "datetime.now": lambda: datetime.now(),
    "datetime.utcnow": lambda: datetime.utcnow(),
    "from time import monotonic": lambda: monotonic(),
    "from uuid import uuid4": lambda: uuid4(),
    "from random import choice": lambda: choice([1, 2]),
}


@workflow.defn
class Probe:
    """Makes one guarded call, named by its input, inside workflow code."""

    @workflow.run
    async def run(self, probe: str) -> str:
        PROBES[probe]()
        return "not refused"


@workflow.defn
class WallClockFlow:
    """Reads `datetime.now()` after a durable timer: the task fails, the history so far stays."""

    @workflow.run
    async def run(self) -> str:
        await workflow.sleep(0.05)
        return datetime.now().isoformat()


@workflow.defn
class Instrumented:
    """Logs and counts from workflow code, and times a step inside the escape hatch."""

    @workflow.run
    async def run(self) -> float:
        logging.getLogger("tests.sandbox").warning("step %d", 1)
        structlog.get_logger("tests.sandbox").warning("step", step=1)
        workflow.logger.info("step", step=1)
        STEPS.inc()
        LAST_STEP.set_to_current_time()
        with STEP_SECONDS.time():
            await workflow.sleep(0)
        with workflow.unsafe.sandbox_unrestricted():
            started = time.monotonic()
            elapsed = time.monotonic() - started
        return elapsed


app = App(task_queue=TASK_QUEUE, workflows=[Probe, WallClockFlow, Instrumented])
