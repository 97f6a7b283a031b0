"""Issue 33 item 2: the native client and `burrow workflow start` take an explicit id-reuse policy.

Concurrent starts of one id go through separate clients (their own connections and start
batches) or separate `burrow` processes, so the statements that insert the runs race each other.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from burrow import Client, IdReusePolicy, Worker, WorkflowAlreadyStartedError
from tests.acceptance.conftest import fast_settings
from tests.acceptance.test_cli_workflow import COMMAND_TIMEOUT, ORDER_INPUT, ROOT, Cli
from tests.apps import flows
from tests.support import spawn

pytestmark = [pytest.mark.slow, pytest.mark.burrow_app(flows.extras)]
QUEUE = "test-extras"
ROUNDS = 3
# Each CLI round spawns three processes; the store-level race is the native test's ROUNDS.
CLI_ROUNDS = 2


@pytest.fixture
async def other_client(database_url: str) -> AsyncIterator[Client]:
    """A second client on the test database, with connections of its own."""
    instance = await Client.connect(settings=fast_settings(database_url))
    yield instance
    await instance.close()


async def _start(client: Client, workflow_id: str, policy: IdReusePolicy) -> Any:
    return await client.start_workflow(
        flows.CartFlow.run, "unused", id=workflow_id, task_queue=QUEUE, id_reuse_policy=policy
    )


@pytest.mark.sticky_cache_set_by_test  # no worker runs: a sticky cache has nothing to change
@pytest.mark.parametrize("policy", list(IdReusePolicy))
@pytest.mark.runs_no_workflow_code
async def test_concurrent_native_starts_of_one_id_create_one_run(
    client: Client, other_client: Client, policy: IdReusePolicy
) -> None:
    """Issue 33 item 2: one start creates the run; the other is refused or joins it."""
    for i in range(ROUNDS):
        workflow_id = f"native-race-{i}"
        outcomes = await asyncio.gather(
            _start(client, workflow_id, policy),
            _start(other_client, workflow_id, policy),
            return_exceptions=True,
        )

        refused = [o for o in outcomes if isinstance(o, WorkflowAlreadyStartedError)]
        run_ids = {o.run_id for o in outcomes if not isinstance(o, BaseException)}
        assert len(run_ids) == 1, outcomes
        assert len(refused) == (0 if policy is IdReusePolicy.USE_EXISTING else 1), outcomes
        listed = [r for r in await client.list_workflows() if r.workflow_id == workflow_id]
        assert [r.run_id for r in listed] == list(run_ids)


@pytest.mark.sticky_cache_set_by_test  # no worker runs: a sticky cache has nothing to change
@pytest.mark.runs_no_workflow_code
async def test_the_native_default_starts_a_new_run_once_the_last_is_closed(client: Client) -> None:
    """Issue 33 item 2: allow-duplicate is the client's default; reject-duplicate is explicit."""
    first = await client.start_workflow(flows.CartFlow.run, "x", id="again-1", task_queue=QUEUE)
    await first.terminate(reason="done")

    with pytest.raises(WorkflowAlreadyStartedError, match="terminated run") as refused:
        await _start(client, "again-1", IdReusePolicy.REJECT_DUPLICATE)
    assert refused.value.run_id == first.run_id
    second = await client.start_workflow(flows.CartFlow.run, "x", id="again-1", task_queue=QUEUE)

    assert second.run_id != first.run_id
    with pytest.raises(ValueError, match="not a valid IdReusePolicy"):
        await _start(client, "again-2", "sometimes")  # type: ignore[arg-type]
    assert [r.workflow_id for r in await client.list_workflows()] == ["again-1", "again-1"]


async def test_a_use_existing_handle_reads_the_result_of_the_run_it_joined(
    burrow_worker: Worker, client: Client, other_client: Client, tmp_path: Path
) -> None:
    """Issue 33 item 2: the joined run was started elsewhere; its handle still sees it close."""
    path = str(tmp_path / "cart")
    started = await client.start_workflow(flows.CartFlow.run, path, id="join-1", task_queue=QUEUE)
    joined = await other_client.start_workflow(
        flows.CartFlow.run,
        path,
        id="join-1",
        task_queue=QUEUE,
        id_reuse_policy=IdReusePolicy.USE_EXISTING,
    )
    assert joined.run_id == started.run_id

    await started.update(flows.CartFlow.add_item, "pear")
    await started.signal(flows.CartFlow.checkout)

    assert await joined.result(timeout=30) == ["pear"]


def _cli_start(cli: Cli, workflow_id: str, policy: str) -> spawn.Process:
    argv = ["workflow", "start", "OrderWorkflow", "--id", workflow_id, "--task-queue",
            "demo-orders", "--input", ORDER_INPUT, "--id-reuse-policy", policy,
            "--json"]  # fmt: skip
    return spawn.popen([sys.executable, "-m", "burrow", *argv], cwd=ROOT, env=cli.env, capture=True)


def _race(cli: Cli, workflow_id: str, policy: str) -> list[tuple[int, str, str]]:
    """Two `burrow workflow start` processes at once: (exit code, stdout, stderr) of each."""
    procs = [_cli_start(cli, workflow_id, policy) for _ in range(2)]
    outputs = [p.communicate(timeout=COMMAND_TIMEOUT) for p in procs]
    return [
        (p.wait(), out.decode(), err.decode()) for p, (out, err) in zip(procs, outputs, strict=True)
    ]


@pytest.mark.sticky_cache_set_by_test  # no worker runs: a sticky cache has nothing to change
@pytest.mark.parametrize("policy", [p.value for p in IdReusePolicy])
@pytest.mark.runs_no_workflow_code
def test_concurrent_cli_starts_of_one_id_create_one_run(database_url: str, policy: str) -> None:
    """Issue 33 item 2: `--id-reuse-policy` on `burrow workflow start`, racing processes."""
    cli = Cli(database_url)
    for i in range(CLI_ROUNDS):
        workflow_id = f"cli-race-{i}"
        answers = _race(cli, workflow_id, policy)

        won = [json.loads(out)["run_id"] for code, out, _ in answers if code == 0]
        lost = [err for code, _, err in answers if code != 0]
        if policy == IdReusePolicy.USE_EXISTING:
            assert len(won) == 2 and won[0] == won[1], answers
        else:
            assert len(won) == 1 and len(lost) == 1, answers
            assert "already running" in lost[0] and "Traceback" not in lost[0]
        listed = cli.json("workflow", "list")
        assert [r["run_id"] for r in listed if r["workflow_id"] == workflow_id] == won[:1]


@pytest.mark.sticky_cache_set_by_test  # no worker runs: a sticky cache has nothing to change
@pytest.mark.runs_no_workflow_code
def test_cli_refuses_an_unknown_id_reuse_policy_before_connecting(database_url: str) -> None:
    """Issue 33 item 2: bad usage exits 2 and writes nothing."""
    cli = Cli(database_url)
    refused = cli("workflow", "start", "OrderWorkflow", "--task-queue", "demo-orders",
                  "--id-reuse-policy", "sometimes", expect=2)  # fmt: skip
    assert "sometimes" in refused.stderr
    assert cli.json("workflow", "list") == []
