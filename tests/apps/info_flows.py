"""Flows that report `workflow.info()`: a parent, and its child retried once (S12, issue 28)."""

from __future__ import annotations

from burrow import App, ApplicationError, RetryPolicy, workflow

TASK_QUEUE = "info-flows"


def described(info: workflow.WorkflowInfo) -> dict[str, object]:
    """What a flow reports of its info: plain data, so it travels as a result."""
    return {
        "workflow_id": info.workflow_id,
        "run_id": info.run_id,
        "parent": None
        if info.parent is None
        else {"workflow_id": info.parent.workflow_id, "run_id": info.parent.run_id},
        "attempt": info.attempt,
        "execution_timeout": None
        if info.execution_timeout is None
        else info.execution_timeout.total_seconds(),
        "run_timeout": None if info.run_timeout is None else info.run_timeout.total_seconds(),
        "execution_deadline": None
        if info.execution_deadline is None
        else info.execution_deadline.isoformat(),
        "run_deadline": None if info.run_deadline is None else info.run_deadline.isoformat(),
    }


@workflow.defn(name="info-child")
class InfoChild:
    """Fails its first attempt; the retry reads its info before and after a durable timer."""

    @workflow.run
    async def run(self) -> list[dict[str, object]]:
        first = described(workflow.info())
        if workflow.info().attempt == 1:
            raise ApplicationError("first attempt fails", type="FirstAttempt")
        await workflow.sleep(0.05)  # a later workflow task: resumed warm, replayed cold
        return [first, described(workflow.info())]


@workflow.defn(name="info-parent")
class InfoParent:
    """Starts InfoChild with a retry policy and timeouts; reports its own info and the child's."""

    @workflow.run
    async def run(self) -> dict[str, object]:
        child = await workflow.execute_child_workflow(
            InfoChild.run,
            retry_policy=RetryPolicy(max_attempts=2, backoff_seconds=[0]),
            execution_timeout=300,
            run_timeout=120,
        )
        return {"parent": described(workflow.info()), "child": child}


app = App(task_queue=TASK_QUEUE, workflows=[InfoParent, InfoChild])
