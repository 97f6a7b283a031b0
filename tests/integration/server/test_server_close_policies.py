"""Parent close policies applied promptly by `burrow server` (issue 28, PROTOCOL.md 7).

A parent's close marks its children's policies pending; the commit that marks them pokes the
server's sweeper, so they apply at once rather than at its next scheduled pass. The sweep
interval here is an hour: only the poke can apply them within the test.
"""

from __future__ import annotations

from typing import Any

import pytest

from burrow.store.models import RunStatus
from burrow.testing import assert_eventually
from tests.integration.server.conftest import QUEUE, WORLD, ApiFactory, fence
from tests.integration.server.test_server_children import sdk_child

HOUR = 3600.0
COMPLETE = {"type": "complete_workflow", "result": WORLD}


@pytest.mark.parametrize("closed_by", ["terminate", "completion"])
async def test_a_closing_parent_terminates_its_child_without_waiting_for_a_sweep(
    make_api: ApiFactory, closed_by: str
) -> None:
    """Issue 28 parent close policy `terminate`, as the Durable Workflow server applies it when
    the parent closes (terminated by an operator, or its task completing it): the child is
    terminated while the sweep interval is still an hour."""
    api = await make_api(sweep_interval_seconds=HOUR)
    await api.register()
    parent = await api.start("wf-closing-parent")
    task = await api.poll_workflow()
    commands = [sdk_child(task_queue=QUEUE, parent_close_policy="terminate")]
    if closed_by == "completion":
        commands.append(COMPLETE)
    url = f"/api/worker/workflow-tasks/{task['task_id']}/complete"
    done = await api.worker("POST", url, json=fence(task, commands=commands))
    assert done.status_code == 200, done.text
    store = api.state.store
    events = await store.read_history(run_id=parent["run_id"])
    [scheduled] = [e for e in events if e.event_type == "ChildWorkflowScheduled"]
    child_id = scheduled.payload["child_workflow_instance_id"]
    if closed_by == "terminate":
        terminated = await api.control(
            "POST", "/api/workflows/wf-closing-parent/terminate", json={"reason": "done"}
        )
        assert terminated.status_code < 300, terminated.text

    async def child_terminated() -> Any:
        child = await store.get_run(namespace="default", workflow_id=child_id)
        return child.status == RunStatus.TERMINATED

    await assert_eventually(child_terminated, timeout=10, message="child terminated")
