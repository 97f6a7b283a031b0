"""The errors a client catches are the public classes of `burrow`, raised where they happen.

Runs are served by the pytest plugin's in-process `burrow_worker` (C5), as in a user's suite.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import burrow
from burrow import (
    ActivityError,
    ApplicationError,
    Client,
    QueryFailedError,
    UpdateFailedError,
    Worker,
    WorkflowAlreadyStartedError,
    WorkflowCancelledError,
    WorkflowFailureError,
    WorkflowNotFoundError,
    WorkflowNotRunningError,
)
from burrow.store import errors as store_errors
from tests.apps import flows

pytestmark = [pytest.mark.slow, pytest.mark.burrow_app(flows.extras)]
QUEUE = "test-extras"


@pytest.mark.runs_no_workflow_code
async def test_a_running_workflow_id_raises_workflow_already_started_error(client: Client) -> None:
    await client.start_workflow(flows.CartFlow.run, "x", id="dup-1", task_queue=QUEUE)
    with pytest.raises(WorkflowAlreadyStartedError, match="'dup-1' is already running") as caught:
        await client.start_workflow(flows.CartFlow.run, "x", id="dup-1", task_queue=QUEUE)
    assert caught.value.workflow_id == "dup-1"
    assert isinstance(caught.value, store_errors.Conflict)
    assert isinstance(caught.value, store_errors.WorkflowAlreadyStarted)  # the old name


@pytest.mark.runs_no_workflow_code
async def test_an_unknown_workflow_id_raises_workflow_not_found_error(client: Client) -> None:
    handle = client.get_handle("no-such-workflow")
    with pytest.raises(WorkflowNotFoundError, match="no-such-workflow") as caught:
        await handle.describe()
    assert isinstance(caught.value, store_errors.NotFound)
    with pytest.raises(store_errors.RunNotFound):  # the old name still catches it
        await handle.signal("checkout")


@pytest.mark.runs_no_workflow_code
async def test_a_closed_run_raises_workflow_not_running_error(client: Client) -> None:
    handle = await client.start_workflow(flows.CartFlow, "x", id="closed-1", task_queue=QUEUE)
    await handle.terminate(reason="operator")
    with pytest.raises(WorkflowNotRunningError, match="terminated, not running") as caught:
        await handle.signal("checkout")
    assert caught.value.status == "terminated"
    with pytest.raises(WorkflowNotRunningError):
        await handle.cancel()


async def test_typed_calls_start_query_and_update_by_method(
    burrow_worker: Worker, burrow_client: Client, tmp_path: Path
) -> None:
    handle = await burrow_client.start_workflow(
        flows.CartFlow.run, str(tmp_path / "n"), id="typed-1", task_queue=QUEUE
    )
    assert await handle.update(flows.CartFlow.add_item, "apple") == 1
    assert await handle.query(flows.CartFlow.contents) == ["apple"]
    assert await handle.query(flows.CartFlow.item, 0) == "apple"
    await handle.signal("checkout")
    assert await handle.result(timeout=30) == ["apple"]


async def test_a_failing_query_raises_query_failed_error_with_its_cause(
    burrow_worker: Worker, burrow_client: Client, tmp_path: Path
) -> None:
    handle = await burrow_client.start_workflow(
        flows.CartFlow.run, str(tmp_path / "n"), id="query-1", task_queue=QUEUE
    )
    with pytest.raises(QueryFailedError, match="no such item") as caught:
        await handle.query(flows.CartFlow.item, 3)
    with pytest.raises(QueryFailedError, match="unknown query") as unknown:
        await handle.query("nope")
    cause = caught.value.cause
    assert caught.value.__cause__ is cause
    assert (cause.type, cause.message, cause.details) == ("NoSuchItem", "no such item", [3])
    assert caught.value.query_name == "item"
    assert unknown.value.cause.type == "UnknownQuery"


async def test_a_failing_update_raises_update_failed_error_with_its_cause(
    burrow_worker: Worker, burrow_client: Client, tmp_path: Path
) -> None:
    handle = await burrow_client.start_workflow(
        flows.CartFlow.run, str(tmp_path / "n"), id="update-1", task_queue=QUEUE
    )
    with pytest.raises(UpdateFailedError, match="empty item") as caught:
        await handle.update(flows.CartFlow.add_item, "", update_id="u-bad")
    with pytest.raises(UpdateFailedError, match="empty item"):  # durable: same outcome
        await handle.update("add_item", "", update_id="u-bad")
    cause = caught.value.cause
    assert caught.value.__cause__ is cause
    assert (cause.type, cause.message, cause.non_retryable) == ("InvalidItem", "empty item", True)
    assert cause.details == [{"field": "item"}]  # the handler's details reach the caller
    assert (caught.value.update_name, caught.value.update_id) == ("add_item", "u-bad")


async def test_a_cancelled_run_raises_workflow_cancelled_error(
    burrow_worker: Worker, burrow_client: Client, tmp_path: Path
) -> None:
    handle = await burrow_client.start_workflow(
        flows.CartFlow.run, str(tmp_path / "n"), id="cancel-1", task_queue=QUEUE
    )
    await handle.cancel(reason="customer left")
    with pytest.raises(WorkflowCancelledError) as caught:
        await handle.result(timeout=30)
    assert isinstance(caught.value, WorkflowFailureError)
    assert caught.value.status == "cancelled"
    assert burrow.WorkflowCancelled is WorkflowCancelledError  # the old name


async def test_an_activity_failure_reaches_the_client_as_a_typed_chain(
    burrow_worker: Worker, burrow_client: Client
) -> None:
    """WorkflowFailureError -> ActivityError -> ApplicationError, details and flags kept."""
    handle = await burrow_client.start_workflow(
        flows.DeclinedFlow.run, "order-7", id="declined-1", task_queue=QUEUE
    )
    with pytest.raises(WorkflowFailureError, match="card declined for order-7") as caught:
        await handle.result(timeout=30)
    assert not isinstance(caught.value, WorkflowCancelledError)
    activity_error = caught.value.cause
    assert isinstance(activity_error, ActivityError)
    assert caught.value.__cause__ is activity_error
    assert activity_error.activity_type == "decline_card"
    assert activity_error.attempt_number == 1
    assert activity_error.activity_execution_id
    cause = activity_error.__cause__
    assert isinstance(cause, ApplicationError) and not isinstance(cause, ActivityError)
    assert (cause.type, cause.message) == ("CardDeclined", "card declined for order-7")
    assert cause.details == [{"code": 51, "cents": 4200}]
    assert cause.non_retryable is True


async def test_activity_failure_details_reach_workflow_code(
    burrow_worker: Worker, burrow_client: Client
) -> None:
    handle = await burrow_client.start_workflow(
        flows.DeclineDetailsFlow.run, "order-8", id="details-1", task_queue=QUEUE
    )
    seen = await handle.result(timeout=30)
    assert seen == {
        "type": "CardDeclined",
        "details": [{"code": 51, "cents": 99}],
        "activity_type": "decline_card",
        "cause_type": "CardDeclined",
        "cause_details": [{"code": 51, "cents": 99}],
    }


@pytest.mark.parametrize("timeout", [1e12, float("inf"), float("nan"), -1.0])
@pytest.mark.runs_no_workflow_code
async def test_a_wait_timeout_past_the_bound_raises_value_error_and_submits_nothing(
    client: Client, timeout: float
) -> None:
    """Issue 25 item 1: a client wait's timeout is bounded like every duration (100 years).

    Before, infinity raised OverflowError from `timedelta` and 1e12 submitted a query that
    waited 30,000 years.
    """
    handle = await client.start_workflow(flows.CartFlow, "x", id="bounded-1", task_queue=QUEUE)
    with pytest.raises(ValueError, match=r"query\(\) timeout"):
        await handle.query(flows.CartFlow.contents, timeout=timeout)
    with pytest.raises(ValueError, match=r"update\(\) timeout"):
        await handle.update(flows.CartFlow.add_item, "apple", timeout=timeout)
    with pytest.raises(ValueError, match=r"result\(\) timeout"):
        await handle.result(timeout=timeout)
    history = [event.event_type for event in await handle.history()]
    assert not [kind for kind in history if kind.startswith("Update")], history
