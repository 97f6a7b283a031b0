"""What one local activity step costs in CPU, without a database or a broker (A3).

A workflow of N `noop` local activities runs in this process the way a worker runs it: the
replay instance activates, `local_activities.run_pending` runs each step the code awaits and
hands its record back, until the code returns. Then the store's side: the history events the
completion would append for those records (`local_activity_events`, `append_params`), built but
not written. Each part is timed in process CPU (`time.process_time()`) and divided by N, median
over the runs. This is the per-step part of `bench/local_activities.py`'s local workflow, where
the rest (start, claim, completion round trips, result) is paid once per workflow.

Run from the repo root: `python -m bench.local_step_cost --steps 30 --runs 60`.
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

import uvloop

from bench.app import noop
from bench.throughput import quiet_logging
from burrow import App, codec, workflow
from burrow.protocol import events as ev
from burrow.protocol.events import HistoryEvent
from burrow.replay.instance import RunContext, WorkflowInstance
from burrow.store.history import NewEvent, append_params
from burrow.worker import local_activities
from burrow.worker.env import TaskEnv
from burrow.workflow import LocalActivityOptions

AT = datetime(2026, 12, 1, tzinfo=UTC)


@workflow.defn(name="LocalSteps")
class LocalSteps:
    @workflow.run
    async def run(self, steps: int) -> int:
        options = LocalActivityOptions(start_to_close_timeout=30)
        total = 0
        for _ in range(steps):
            total = await workflow.local_activity(noop, total, options=options)
        return total


APP = App(task_queue="bench", workflows=[LocalSteps], activities=[noop])


class _Claim:
    """What `run_pending` reads of a claimed task: the run's identity (no lease is renewed)."""

    def __init__(self, run: RunContext) -> None:
        self.run = run
        self.lease = None


async def one_run(steps: int, env: Any) -> tuple[float, float]:
    """(worker and instance CPU per step, store-side event building CPU per step), in us."""
    run = RunContext(
        run_id=str(uuid.uuid4()),
        workflow_id="local-steps",
        workflow_type="LocalSteps",
        namespace="default",
        task_queue="bench",
        input=dict(codec.encode([steps])),
    )
    claim = _Claim(run)
    instance = WorkflowInstance(
        definition=APP.workflows["LocalSteps"], run=run, known_activities=APP.activities.keys()
    )
    started = ev.WorkflowStarted(
        workflow_type="LocalSteps", workflow_instance_id=run.workflow_id, workflow_run_id=run.run_id
    )
    cpu0 = time.process_time()
    activation = instance.activate([HistoryEvent(run.run_id, 1, started, AT, "task")])
    activation = await local_activities.run_pending(env, claim, instance, activation)  # type: ignore[arg-type]
    cpu1 = time.process_time()
    if activation.failure is not None or len(activation.commands) != steps + 1:
        raise RuntimeError(f"the workflow did not complete its {steps} steps: {activation}")
    appended: list[NewEvent] = []
    for step, record in enumerate(activation.commands[:-1], start=1):
        built = ev.local_activity_events(
            record,  # type: ignore[arg-type]
            run_id=run.run_id,
            step=step,
            workflow_task_id="task",
            now=AT,
        )
        appended.extend(NewEvent(event, key) for event, key in built)
    append_params(run_id=run.run_id, after_seq=1, events=appended, workflow_task_id="task")
    cpu2 = time.process_time()
    return (cpu1 - cpu0) / steps * 1e6, (cpu2 - cpu1) / steps * 1e6


async def measure(steps: int, runs: int) -> None:
    with ThreadPoolExecutor(2) as executor:
        # Only what run_pending reads when no heartbeat arrives: no store, no lease.
        env = TaskEnv.__new__(TaskEnv)
        for name, value in (
            ("app", APP),
            ("max_payload_bytes", 2 * 1024 * 1024),
            ("executor", executor),
        ):
            object.__setattr__(env, name, value)
        for _ in range(3):
            await one_run(steps, env)  # warm: imports, caches
        worker, store = [], []
        for _ in range(runs):
            a, b = await one_run(steps, env)
            worker.append(a)
            store.append(b)
    print(f"steps={steps} runs={runs}")
    print(f"  worker and instance: {statistics.median(worker):7.1f} us CPU per step (median)")
    print(f"  store events:        {statistics.median(store):7.1f} us CPU per step (median)")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.local_step_cost", description=__doc__)
    parser.add_argument("--steps", type=int, default=30, help="local activities per workflow")
    parser.add_argument("--runs", type=int, default=60, help="workflows measured")
    args = parser.parse_args(argv)
    quiet_logging()
    uvloop.run(measure(args.steps, args.runs))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
