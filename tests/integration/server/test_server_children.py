"""`start_child_workflow` over the worker plane (PROTOCOL.md 3, 5.3, 7; SPEC M4b; issue 28).

The commands are built by the SDK itself (`commands_to_server_commands`), so what is accepted is
exactly what SDK 2.12.0 sends. The refusals follow the Durable Workflow server's command scope
rules (`durable-workflow/server` `WorkerController::validateWorkflowTaskCommandScopes`:
`retry_policy` only on activities and children, `execution_timeout_seconds` /
`run_timeout_seconds` only on `start_child_workflow`, run <= execution), answered with the
status and reason Burrow gives every malformed command: 409 `invalid_commands`, nothing written.
"""

from __future__ import annotations

from typing import Any

import pytest
from durable_workflow.workflow import (
    ChildWorkflowRetryPolicy,
    StartChildWorkflow,
    commands_to_server_commands,
)

from burrow import codec
from tests.integration.server.conftest import GREET, QUEUE, Api, fence
from tests.integration.server.test_worker_plane import history_types

CHILDREN = "child-queue"


def sdk_child(**options: Any) -> dict[str, Any]:
    """One `start_child_workflow` exactly as the SDK sends it."""
    command = StartChildWorkflow("greeter", ["world"], **options)
    [wire] = commands_to_server_commands([command], QUEUE)
    return wire


async def complete(api: Api, task: dict[str, Any], *commands: dict[str, Any]) -> Any:
    url = f"/api/worker/workflow-tasks/{task['task_id']}/complete"
    return await api.worker("POST", url, json=fence(task, commands=list(commands)))


async def test_discovery_advertises_children(api: Api) -> None:
    """PROTOCOL 3.3: `start_child_workflow` is a supported command; children's retry policies,
    timeouts and close policies are on (as the Durable Workflow server's
    `WorkerProtocol::serverCapabilities` has them)."""
    info = (await api.control("GET", "/api/cluster/info")).json()
    capabilities = info["worker_protocol"]["server_capabilities"]
    assert "start_child_workflow" in capabilities["supported_workflow_task_commands"]
    assert capabilities["parent_close_policy"] is True
    assert capabilities["child_workflow_retry_policy"] is True
    assert capabilities["child_workflow_timeouts"] is True


async def test_the_sdk_command_starts_a_child_and_records_its_options(api: Api) -> None:
    """PROTOCOL 7, 8.2: the SDK's command with a retry policy and both timeouts starts the
    child on its queue; ChildWorkflowScheduled and ChildRunStarted carry the parent's step
    (`sequence` 1), the policies, the retry policy and the timeouts as sent.

    As the Durable Workflow server's `WorkflowWorkerProtocolTest::
    test_start_child_workflow_command_accepts_retry_policy_and_timeouts`: 200 `run_status:
    waiting`, `retry_policy` and `timeout_policy` on ChildWorkflowScheduled (that server adds
    `snapshot_version: 1` to both; the SDK reads neither)."""
    await api.register()
    started = await api.start("wf-parent")
    task = await api.poll_workflow()
    command = sdk_child(
        task_queue=CHILDREN,
        parent_close_policy="terminate",
        retry_policy=ChildWorkflowRetryPolicy(max_attempts=3, backoff_seconds=[1, 2]),
        execution_timeout_seconds=600,
        run_timeout_seconds=60,
    )
    done = await complete(api, task, command)
    assert done.status_code == 200, done.text
    assert done.json()["run_status"] == "waiting"
    events = await api.state.store.read_history(run_id=started["run_id"])
    scheduled, child_started = events[-2].payload, events[-1].payload
    assert [e.event_type for e in events[-2:]] == ["ChildWorkflowScheduled", "ChildRunStarted"]
    assert scheduled["sequence"] == child_started["sequence"] == 1
    assert scheduled["parent_close_policy"] == "terminate"
    assert scheduled["cancellation_policy"] == "abandon"
    assert scheduled["retry_policy"] == command["retry_policy"]
    assert command["retry_policy"] == {
        "max_attempts": 3,
        "backoff_seconds": [1, 2],
        "non_retryable_error_types": [],
    }
    assert scheduled["timeout_policy"] == {
        "execution_timeout_seconds": 600,
        "run_timeout_seconds": 60,
    }
    child = await api.control("GET", f"/api/workflows/{scheduled['child_workflow_instance_id']}")
    assert child.status_code == 200, child.text
    assert (child.json()["task_queue"], child.json()["status"]) == (CHILDREN, "pending")
    assert child.json()["run_id"] == scheduled["child_workflow_run_id"]


async def test_a_child_command_without_arguments_starts_a_child_with_none(api: Api) -> None:
    """PROTOCOL 7: the command as the Durable Workflow server's own test sends it
    (`WorkflowWorkerProtocolTest::test_start_child_workflow_command_accepts_parent_close_policy`:
    no `arguments`, `request_cancel`) is accepted, and the child starts with no arguments."""
    await api.register()
    started = await api.start("wf-bare-child")
    task = await api.poll_workflow()
    bare = {
        "type": "start_child_workflow",
        "workflow_type": "greeter",
        "queue": CHILDREN,
        "parent_close_policy": "request_cancel",
    }
    done = await complete(api, task, bare)
    assert (done.status_code, done.json()["run_status"]) == (200, "waiting"), done.text
    events = await api.state.store.read_history(run_id=started["run_id"])
    scheduled = events[-2].payload
    assert scheduled["parent_close_policy"] == "request_cancel"
    child = await api.state.store.get_run(
        namespace="default", workflow_id=scheduled["child_workflow_instance_id"]
    )
    assert codec.decode(child.input) == []


REFUSED = {
    "run-timeout-over-execution": sdk_child(execution_timeout_seconds=60)
    | {"run_timeout_seconds": 61},
    "zero-execution-timeout": sdk_child() | {"execution_timeout_seconds": 0},
    "negative-run-timeout": sdk_child() | {"run_timeout_seconds": -1},
    "unknown-parent-close-policy": sdk_child() | {"parent_close_policy": "explode"},
    "no-workflow-type": {k: v for k, v in sdk_child().items() if k != "workflow_type"},
    "execution-timeout-on-an-activity": GREET | {"execution_timeout_seconds": 60},
    "run-timeout-on-a-timer": {"type": "start_timer", "delay_seconds": 1, "run_timeout_seconds": 5},
    "retry-policy-on-a-timer": {
        "type": "start_timer",
        "delay_seconds": 1,
        "retry_policy": {"max_attempts": 2},
    },
    "activity-timeout-on-a-child": sdk_child() | {"start_to_close_timeout": 5},
}


@pytest.mark.parametrize("command", list(REFUSED.values()), ids=list(REFUSED))
async def test_a_malformed_child_command_is_refused_and_writes_nothing(
    api: Api, command: dict[str, Any]
) -> None:
    """PROTOCOL 5.3 command scope rules: 409 `invalid_commands`; no history, no child run, the
    task still leased at its attempt.

    The cases of the Durable Workflow server's
    `WorkerProtocolContractTest::invalidWorkflowTaskCommandScopeProvider` ("activity timeout on
    child command", "child timeout on activity command", "child run exceeds execution") and
    `test_start_child_workflow_command_rejects_invalid_parent_close_policy`; that server answers
    422 with `validation_errors`, Burrow the 409 `invalid_commands` it gives every bad command."""
    await api.register()
    started = await api.start("wf-refused")
    task = await api.poll_workflow()
    refused = await complete(api, task, command)
    assert (refused.status_code, refused.json()["reason"]) == (409, "invalid_commands")
    assert await history_types(api, started["run_id"]) == ["WorkflowStarted"]
    listed = (await api.control("GET", "/api/workflows")).json()["workflows"]
    assert [w["workflow_id"] for w in listed] == ["wf-refused"]
    lease = await api.state.store.workflow_task_lease(task_id=task["task_id"])
    assert lease is not None and lease.attempt == task["workflow_task_attempt"]


def parallel(count: int, base: int = 1) -> list[dict[str, Any]]:
    """`count` children yielded as one list, with the SDK's parallel group metadata."""
    group = f"parallel-children:{base}:{count}"
    commands = []
    for index in range(count):
        entry = {
            "parallel_group_id": group,
            "parallel_group_kind": "child",
            "parallel_group_base_sequence": base,
            "parallel_group_size": count,
            "parallel_group_index": index,
        }
        commands.append(sdk_child() | entry | {"parallel_group_path": [entry]})
    return commands


async def test_a_parallel_group_of_children_gets_consecutive_steps(api: Api) -> None:
    """PROTOCOL 7, 8.3: the members of a group take steps `base + index` in order."""
    await api.register()
    started = await api.start("wf-group")
    task = await api.poll_workflow()
    done = await complete(api, task, *parallel(3))
    assert done.status_code == 200, done.text
    events = await api.state.store.read_history(run_id=started["run_id"])
    steps = [e.payload["sequence"] for e in events if e.event_type == "ChildWorkflowScheduled"]
    assert steps == [1, 2, 3]
    # The history shows the group again on each member's events (PROTOCOL 7: the server
    # copies parallel metadata into the history payloads), for the SDK's replay.
    url = f"/api/workflows/wf-group/runs/{started['run_id']}/history"
    shown = (await api.control("GET", url)).json()["events"]
    members = [e["payload"] for e in shown if e["event_type"].startswith("Child")]
    expected = parallel(3)
    assert [p["parallel_group_path"] for p in members] == [
        c["parallel_group_path"] for c in expected for _ in ("Scheduled", "Started")
    ]
    assert members[0]["parallel_group_id"] == "parallel-children:1:3"


async def test_steps_of_separate_tasks_show_no_group(api: Api) -> None:
    """PROTOCOL 8.3: one waiting step per task is no group: its events carry no metadata."""
    await api.register()
    started = await api.start("wf-no-group")
    task = await api.poll_workflow()
    done = await complete(api, task, sdk_child())
    assert done.status_code == 200, done.text
    url = f"/api/workflows/wf-no-group/runs/{started['run_id']}/history"
    shown = (await api.control("GET", url)).json()["events"]
    assert not any("parallel_group_id" in e["payload"] for e in shown)


BROKEN_GROUPS = {
    "out-of-order": [parallel(2)[1], parallel(2)[0]],
    "missing-member": parallel(3)[:2],
    "index-past-size": [parallel(1)[0] | {"parallel_group_index": 1}],
    "on-a-terminal-command": [
        {"type": "complete_workflow", "result": GREET["arguments"]}
        | {"parallel_group_id": "parallel-calls:1:1"}
    ],
    "without-an-index": [{k: v for k, v in parallel(1)[0].items() if k != "parallel_group_index"}],
    "base-past-the-next-step": parallel(2, base=5),
    "a-waiting-step-outside-the-group": [GREET, *parallel(1, base=2)],
    "nested": [
        c | {"parallel_group_path": [*c["parallel_group_path"], c["parallel_group_path"][0]]}
        for c in parallel(2)
    ],
    "select": [c | {"parallel_group_mode": "select"} for c in parallel(2)],
}


@pytest.mark.parametrize("commands", list(BROKEN_GROUPS.values()), ids=list(BROKEN_GROUPS))
async def test_a_broken_parallel_group_is_refused(api: Api, commands: list[dict[str, Any]]) -> None:
    """PROTOCOL 7: a batch whose group metadata does not match the steps the server assigns
    is refused (the Durable Workflow server's `parallelCommandsMatchSequences`)."""
    await api.register()
    started = await api.start("wf-broken-group")
    task = await api.poll_workflow()
    refused = await complete(api, task, *commands)
    assert (refused.status_code, refused.json()["reason"]) == (409, "invalid_commands")
    assert await history_types(api, started["run_id"]) == ["WorkflowStarted"]
