"""The pytest plugin runs a user's own suite (C5): a sample project, run by pytester in a process.

The sample has no `pytest_plugins` line: the plugin comes from burrow's `pytest11` entry point,
as it does for anyone who installs burrow.
"""

from __future__ import annotations

import socket
import textwrap

import pytest

pytest_plugins = ["pytester"]

INI = """
[pytest]
asyncio_mode = auto
asyncio_default_fixture_loop_scope = function
addopts = --strict-markers -p no:cacheprovider
"""

SHOP = """
from burrow import App, activity, workflow


@activity.defn
async def charge(order_id: str, cents: int) -> str:
    return f"charged {cents} for {order_id}"


@workflow.defn
class Checkout:
    @workflow.run
    async def run(self, order_id: str) -> str:
        return await workflow.activity(charge, order_id, 4200, start_to_close_timeout=10)


app = App(task_queue="shop", workflows=[Checkout], activities=[charge])
"""

WITH_FIXTURE = """
import pytest
from burrow import App, Client, Worker
from burrow.protocol.events import ActivityCompleted
from burrow.testing import read_history, wait_for_result

from shop import Checkout, app


@pytest.fixture
def burrow_app() -> App:
    return app


async def test_checkout_charges_once(burrow_worker: Worker, burrow_client: Client) -> None:
    handle = await burrow_client.start_workflow(Checkout.run, "order-1", task_queue="shop")
    assert await wait_for_result(handle) == "charged 4200 for order-1"
    history = await read_history(handle)
    assert history.event_types[0] == "WorkflowStarted"
    assert history.event_types[-1] == "WorkflowCompleted"
    [completed] = history.of_type(ActivityCompleted)
    assert completed.activity_type == "charge"
"""

WITH_MARKER = """
import pytest
from burrow import Client, Settings, Worker
from burrow.testing import wait_for_result

from shop import Checkout, app

pytestmark = pytest.mark.burrow_app(app)


async def test_marked_app_is_served(burrow_worker: Worker, burrow_client: Client) -> None:
    assert burrow_worker.app is app
    handle = await burrow_client.start_workflow(Checkout.run, "order-2", task_queue="shop")
    assert await wait_for_result(handle) == "charged 4200 for order-2"


async def test_code_reading_the_environment_uses_the_test_services(
    burrow_env: Settings, burrow_worker: Worker
) -> None:
    async with await Client.connect() as client:
        assert client.settings.database_url == burrow_env.database_url
        handle = await client.start_workflow(Checkout.run, "order-3", task_queue="shop")
        assert await wait_for_result(handle) == "charged 4200 for order-3"
"""

WITHOUT_APP = """
from burrow import Worker


async def test_forgot_the_app(burrow_worker: Worker) -> None:
    pass
"""

NEEDS_SERVICES = """
def test_needs_postgres(burrow_database_url: str) -> None:
    pass


def test_needs_rabbitmq(burrow_amqp_url: str) -> None:
    pass
"""


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port  # nothing listens once the socket is closed


def test_a_users_suite_runs_workflows_through_the_plugin(pytester: pytest.Pytester) -> None:
    """C5: burrow_worker serves the App the user names (fixture or marker), burrow_client
    starts runs, the helpers wait for results and read typed history."""
    pytester.makeini(INI)
    pytester.makepyfile(
        shop=SHOP,
        test_with_fixture=WITH_FIXTURE,
        test_with_marker=WITH_MARKER,
        test_without_app=WITHOUT_APP,
    )
    result = pytester.runpytest_subprocess("-v")
    result.assert_outcomes(passed=3, errors=1)
    result.stdout.fnmatch_lines(["*burrow_worker needs an App: override the burrow_app fixture*"])


def test_unreachable_services_skip_with_a_message(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """C5: with neither Docker nor the servers, tests skip and say which server and variable."""
    postgres_port, amqp_port = _closed_port(), _closed_port()
    monkeypatch.setenv("BURROW_TEST_USE_CONTAINERS", "0")
    monkeypatch.setenv(
        "BURROW_TEST_DATABASE_URL", f"postgresql://postgres@127.0.0.1:{postgres_port}/postgres"
    )
    monkeypatch.setenv("BURROW_TEST_AMQP_URL", f"amqp://guest:guest@127.0.0.1:{amqp_port}/")
    pytester.makeini(INI)
    pytester.makepyfile(test_needs_services=textwrap.dedent(NEEDS_SERVICES))
    result = pytester.runpytest_subprocess("-rs", "-v")
    result.assert_outcomes(skipped=2)
    result.stdout.fnmatch_lines_random(
        [
            f"*Postgres is not reachable at 127.0.0.1:{postgres_port}*BURROW_TEST_DATABASE_URL*",
            f"*RabbitMQ is not reachable at 127.0.0.1:{amqp_port}*BURROW_TEST_AMQP_URL*",
        ]
    )
