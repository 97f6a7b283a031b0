"""Thousands of waiters on one client (issue 12): their keys are bound on the broker in batches.

One awaited bind per key queued thousands of round trips on the listener's channel; an RPC that
timed out waiting its turn closed the channel, so binds failed (waiters fell back to polling) or,
once the broker lost the queue, every bind tried to rebind every key within one timeout. Here
all binds succeed, and after they all unbind at once the listener still hears changes.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest

from burrow import Client, Settings
from burrow.errors import WorkflowFailureError
from tests.acceptance.conftest import fast_settings
from tests.integration.client.test_result_wakes import Calls

QUEUE = "many-waiters"
WATCHES = 5_000


def _settings(database_url: str) -> Settings:
    """A fallback poll of a minute: only a wake explains a prompt answer."""
    settings = fast_settings(database_url)
    wakes = settings.wakes.model_copy(update={"result_fallback_seconds": 60.0})
    return settings.model_copy(update={"wakes": wakes})


async def test_thousands_of_watches_bind_and_unbind_without_breaking_the_listener(
    database_url: str,
) -> None:
    client = await Client.connect(settings=_settings(database_url))
    listener = client.runs.listener
    assert listener is not None
    answers: list[bool] = []
    all_answered, next_answered = asyncio.Event(), asyncio.Event()
    bind = listener.bind

    async def recorded(key: str) -> bool:
        answers.append(await bind(key))
        if len(answers) == WATCHES:
            all_answered.set()
        if len(answers) == WATCHES + 1:
            next_answered.set()
        return answers[-1]

    listener.bind = recorded  # type: ignore[method-assign]
    release = asyncio.Event()

    async def watch_until_released(key: str) -> None:
        async with client.runs.watch(key, closes_with_run=True):
            await release.wait()

    try:
        watches = [
            asyncio.create_task(watch_until_released(str(uuid.uuid4()))) for _ in range(WATCHES)
        ]
        async with asyncio.timeout(60):
            await all_answered.wait()
        assert answers.count(True) == WATCHES
        assert listener.ready
        release.set()
        await asyncio.gather(*watches)  # every key unbinds at once

        polls = Calls(client, "closed_runs")
        started = await client.start_workflow("Idle", task_queue=QUEUE, check_workers=False)
        handle = client.get_handle(started.workflow_id, run_id=started.run_id)  # binds its key
        waiting = asyncio.create_task(handle.result(timeout=30))
        async with asyncio.timeout(30):
            await next_answered.wait()  # watched: the terminate's change will reach it
        await handle.terminate(reason="enough")
        with pytest.raises(WorkflowFailureError):
            await waiting
    finally:
        release.set()
        await client.close()
    assert answers[-1] is True
    assert polls.count == 0  # the run change woke it, not the fallback poll
