"""Parallel group metadata over the worker plane: what is refused, and a group sent again
(PROTOCOL.md 7, 8.3; the Durable Workflow server's `parallelCommandsMatchSequences`).

`test_server_children.py` has the first refusals (members out of order or missing, an index
past the size, metadata on a terminal command, no index, a base past the next step, a waiting
step outside the group, nested and `select` groups); these are the rest of the fields a member
carries: its group id, kind, size, index and base, their JSON types, its path, and metadata on
a local activity. Every refusal is 409 `invalid_commands` with nothing written and the task
still leased at its attempt.

The commands the SDK sends for a partly resolved group are the SDK's own: its `replay()` of
the history the polled task carries, serialized by `commands_to_server_commands`.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from durable_workflow import workflow
from durable_workflow.workflow import commands_to_server_commands, replay

from burrow import codec
from burrow.replay.bundle import read_bundle
from tests.integration.server.conftest import QUEUE, Api
from tests.integration.server.test_server_children import complete, parallel
from tests.integration.server.test_server_sticky import run_activity
from tests.integration.server.test_worker_plane import history_types


@workflow.defn(name="pair")
class PairWorkflow:
    """An activity and a long timer yielded as one mixed group: the activity resolves first."""

    def run(self, ctx: Any, name: str) -> Generator[Any, Any, Any]:
        answers = yield [ctx.schedule_activity("greet", [name]), ctx.start_timer(3600)]
        return list(answers)


def sdk_commands(task: dict[str, Any]) -> list[dict[str, Any]]:
    """What an SDK 2.12.0 worker completes `task` with (its history is one page here)."""
    outcome = replay(PairWorkflow, task["history_events"], ["world"], run_id=task["run_id"])
    commands: list[dict[str, Any]] = commands_to_server_commands(outcome.commands, QUEUE)
    return commands


def group_fields(command: dict[str, Any]) -> dict[str, Any]:
    """The top-level group fields of a member."""
    return {k: v for k, v in command.items() if k.startswith("parallel_group_")}


def member(command: dict[str, Any], **fields: Any) -> dict[str, Any]:
    """`command` with its group fields changed, top level and path alike."""
    leaf = group_fields(command) | fields
    leaf.pop("parallel_group_path", None)
    return command | leaf | {"parallel_group_path": [leaf]}


async def assert_refused(
    api: Api, task: dict[str, Any], commands: list[dict[str, Any]], case: str
) -> None:
    """409 `invalid_commands`, no history written, the task still leased at its attempt."""
    before = await history_types(api, task["run_id"])
    refused = await complete(api, task, *commands)
    answer = (refused.status_code, refused.json().get("reason"))
    assert answer == (409, "invalid_commands"), (case, refused.text)
    assert await history_types(api, task["run_id"]) == before, case
    lease = await api.state.store.workflow_task_lease(task_id=task["task_id"])
    assert lease is not None and lease.attempt == task["workflow_task_attempt"], case


TWO = parallel(2)
TIMER = {"type": "start_timer", "delay_seconds": 5}
LOCAL = {
    "type": "record_local_activity",
    "activity_type": "greet",
    "execution_mode": "local",
    "arguments": dict(codec.encode(["world"])),
    "outcome": "completed",
    "result": dict(codec.encode("hello, world")),
}
BROKEN = {
    "id-of-another-kind": [member(c, parallel_group_id="parallel-activities:1:2") for c in TWO],
    "id-naming-another-base": [member(c, parallel_group_id="parallel-children:2:2") for c in TWO],
    "id-naming-another-size": [member(c, parallel_group_id="parallel-children:1:3") for c in TWO],
    "kind-timer-on-children": [member(c, parallel_group_kind="timer") for c in TWO],
    "kind-mixed-on-children": [
        member(c, parallel_group_kind="mixed", parallel_group_id="parallel-calls:1:2") for c in TWO
    ],
    "kind-child-on-a-child-and-a-timer": [TWO[0], member(TIMER, **group_fields(TWO[1]))],
    "size-below-the-members": [
        member(c, parallel_group_size=1, parallel_group_id="parallel-children:1:1") for c in TWO
    ],
    "duplicate-index": [TWO[0], member(TWO[1], parallel_group_index=0)],
    "negative-index": [member(TWO[0], parallel_group_index=-1), TWO[1]],
    "index-as-a-boolean": [TWO[0], member(TWO[1], parallel_group_index=True)],
    "index-as-text": [TWO[0], member(TWO[1], parallel_group_index="1")],
    "base-as-text": [member(c, parallel_group_base_sequence="1") for c in TWO],
    "base-zero": [
        member(c, parallel_group_base_sequence=0, parallel_group_id="parallel-children:0:2")
        for c in TWO
    ],
    "path-disagrees-with-the-leaf": [
        TWO[0] | {"parallel_group_path": TWO[1]["parallel_group_path"]},
        TWO[1],
    ],
    "path-not-a-list": [c | {"parallel_group_path": c["parallel_group_path"][0]} for c in TWO],
    "local-activity-in-a-group": [member(LOCAL, **group_fields(TWO[0])), TWO[1]],
}


async def test_a_group_member_with_wrong_fields_is_refused(api: Api) -> None:
    """PROTOCOL 7: a member's id, kind, size, index, base and path must be what the SDK builds
    for the step the server assigns it, with the JSON types the SDK gives them (an index of
    `true` is not 1); a local activity is no member of a completion's group (SDK 2.12.0 opens a
    group of local calls before running them, through its prepared admission, PROTOCOL 5.6:
    test_server_prepared_local_activities.py). Each batch is sent
    in turn to the same task, which a refusal leaves leased and its history as it was."""
    await api.register()
    await api.start("wf-wrong-member")
    task = await api.poll_workflow()
    for case, commands in BROKEN.items():
        await assert_refused(api, task, commands, case)
    assert await history_types(api, task["run_id"]) == ["WorkflowStarted"]


async def waiting_pair(api: Api) -> dict[str, Any]:
    """A run whose SDK group of an activity and a timer is recorded and whose activity has
    completed: the workflow task that completion woke, polled."""
    await api.register(supported_workflow_types=["pair"])
    await api.start("wf-pair", "pair")
    first = await api.poll_workflow()
    done = await complete(api, first, *sdk_commands(first))
    assert done.status_code == 200, done.text
    await run_activity(api, "w1")
    return await api.poll_workflow()


RESENT_BROKEN = {
    "a-member-left-out": lambda again: again[:1],
    "another-kind-at-a-step": lambda again: [
        member(TIMER, **group_fields(again[0])),
        again[1],
    ],
    "swapped-members": lambda again: [
        member(again[1], parallel_group_index=0),
        member(again[0], parallel_group_index=1),
    ],
    "another-id": lambda again: [
        member(c, parallel_group_id="parallel-activities:1:2", parallel_group_kind="activity")
        for c in again
    ],
    "naming-the-second-step": lambda again: [
        member(c, parallel_group_base_sequence=2, parallel_group_id="parallel-calls:2:2")
        for c in again
    ],
}


async def test_a_group_sent_again_is_taken_only_as_the_recorded_one(api: Api) -> None:
    """PROTOCOL 7, 8.3: with the activity resolved and the timer waiting, the SDK's replay
    sends the whole group again with its first base (`parallel-calls:1:2`). Changed in any
    way (a member left out, another kind or order, another id, another base) it is refused:
    409, nothing written. As the SDK sends it, it is the group the history holds at steps
    1-2, and the server writes nothing: no third step, the timer the one it was, the run
    waiting."""
    task = await waiting_pair(api)
    again = sdk_commands(task)
    assert [(c["type"], c["parallel_group_id"]) for c in again] == [
        ("schedule_activity", "parallel-calls:1:2"),
        ("start_timer", "parallel-calls:1:2"),
    ]
    for case, change in RESENT_BROKEN.items():
        await assert_refused(api, task, change(again), case)
    before = await history_types(api, task["run_id"])
    done = await complete(api, task, *again)
    assert (done.status_code, done.json()["run_status"]) == (200, "waiting"), done.text
    assert await history_types(api, task["run_id"]) == before
    events = await api.state.store.read_history(run_id=task["run_id"])
    assert [e.payload["sequence"] for e in events if e.event_type.endswith("Scheduled")] == [1, 2]


async def test_an_export_showing_a_group_reads_back_as_the_stored_history(api: Api) -> None:
    """PROTOCOL 8.3, 17: the export shows each member step's group fields, as the SDK's replay
    needs them; `burrow replay verify` reads the same bundle back to the events the store holds
    (the shown fields are derived, never stored)."""
    task = await waiting_pair(api)
    exported = await api.control(
        "GET", f"/api/workflows/wf-pair/runs/{task['run_id']}/history/export"
    )
    assert exported.status_code == 200, exported.text
    document = exported.json()
    payloads = [e["payload"] for e in document["history_events"]]
    shown = [p for p in payloads if "parallel_group_id" in p]
    assert [p["parallel_group_id"] for p in shown] == ["parallel-calls:1:2"] * len(shown) != []

    recorded = read_bundle(document, source="export")

    stored = await api.state.store.read_history(run_id=task["run_id"])
    assert [(e.sequence, e.event_type, e.payload) for e in recorded.events] == [
        (e.sequence, e.event_type, e.payload) for e in stored
    ]
