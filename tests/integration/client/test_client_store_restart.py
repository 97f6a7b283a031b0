"""The first Client call after a Postgres restart succeeds (issue 25 item 10).

The pool still holds connections the restart closed; the driver knows they are closed, so they
are replaced at checkout instead of failing the call with "connection is closed".
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator

import pytest

from burrow import Client, Settings
from burrow.config import WakeSettings
from tests.acceptance.conftest import fast_settings
from tests.support.private_postgres import PrivatePostgres, private_postgres

pytestmark = pytest.mark.slow

QUEUE = "restart-queue"


@pytest.fixture(scope="module")
def server() -> Iterator[PrivatePostgres]:
    """A private server this module restarts (the shared one is never touched)."""
    with private_postgres() as instance:
        yield instance


@pytest.fixture
async def client(server: PrivatePostgres) -> AsyncIterator[Client]:
    """A client on the private server, without a broker."""
    if not server.is_running():
        server.start()
    settings: Settings = fast_settings(server.url()).model_copy(
        update={"wakes": WakeSettings(enabled=False)}
    )
    instance = await Client.connect(settings=settings)
    yield instance
    await instance.close()


CALLS: dict[str, Callable[[Client, str], Awaitable[object]]] = {
    "start": lambda c, wid: c.start_workflow("RestartFlow", id=f"{wid}-new", task_queue=QUEUE),
    "signal": lambda c, wid: c.get_handle(wid).signal("poke", signal_id="once"),
    "describe": lambda c, wid: c.get_handle(wid).describe(),
    "history": lambda c, wid: c.get_handle(wid).history(),
    "list": lambda c, wid: c.list_workflows(),
    "cancel": lambda c, wid: c.get_handle(wid).cancel(reason="restart"),
}


@pytest.mark.parametrize("call", sorted(CALLS))
async def test_the_first_client_call_after_a_postgres_restart_succeeds(
    server: PrivatePostgres, client: Client, call: str, request: pytest.FixtureRequest
) -> None:
    """Issue 25 item 10: no StoreUnavailable ("connection is closed") once per restart.

    The call is made once and lands once: a start writes one run, a signal is not a duplicate.
    """
    workflow_id = f"restart-{request.node.callspec.id}"
    await client.start_workflow("RestartFlow", id=workflow_id, task_queue=QUEUE)  # pools one
    await asyncio.to_thread(server.stop, "fast")
    await asyncio.to_thread(server.start)
    answer = await CALLS[call](client, workflow_id)
    if call == "start":
        runs = await client.get_handle(f"{workflow_id}-new").history()
        assert [e.event_type for e in runs] == ["WorkflowStarted"]
    if call == "signal":
        assert answer is True  # delivered by this call, not found a duplicate of an earlier try
