"""Retrying a store call through an outage while the lease holds (issue 13 item 4)."""

from __future__ import annotations

import asyncio

import pytest

from burrow.store.errors import StaleLease, StoreUnavailable
from burrow.worker.outage import StaleAfterRetry, while_leased


class FlakyCall:
    """Fails with StoreUnavailable a given number of times, then returns how often it ran."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.calls = 0

    async def __call__(self) -> int:
        self.calls += 1
        if self.calls <= self.failures:
            raise StoreUnavailable("database unavailable: connection refused")
        return self.calls


def _in(seconds: float) -> float:
    return asyncio.get_running_loop().time() + seconds


async def test_retries_until_the_store_answers() -> None:
    call = FlakyCall(failures=3)
    deadline = _in(30)
    assert await while_leased(call, deadline=lambda: deadline, what="complete") == 4


async def test_gives_up_once_the_lease_has_expired() -> None:
    call = FlakyCall(failures=100)
    deadline = _in(0.25)
    with pytest.raises(StoreUnavailable):
        await while_leased(call, deadline=lambda: deadline, what="complete")
    assert 2 <= call.calls < 100  # retried while the lease held, then stopped


async def test_gives_up_at_once_when_the_lease_is_no_longer_held() -> None:
    call = FlakyCall(failures=1)
    with pytest.raises(StoreUnavailable):
        await while_leased(call, deadline=lambda: None, what="complete")
    assert call.calls == 1


async def test_a_refusal_by_fencing_is_not_retried() -> None:
    calls = 0

    async def refused() -> None:
        nonlocal calls
        calls += 1
        raise StaleLease(task_id="t", lease_token="x", kind="workflow")

    deadline = _in(30)
    with pytest.raises(StaleLease) as raised:
        await while_leased(refused, deadline=lambda: deadline, what="complete")
    assert calls == 1
    assert not isinstance(raised.value, StaleAfterRetry)


async def test_a_refusal_after_a_retry_says_the_first_try_may_have_committed() -> None:
    """A commit whose reply was lost, then its retry fenced: not reported as a lost lease."""
    calls = 0

    async def committed_then_refused() -> None:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise StoreUnavailable("database unavailable: connection reset")
        raise StaleLease(task_id="t", lease_token="x", kind="workflow task")

    deadline = _in(30)
    with pytest.raises(StaleAfterRetry) as refused:
        await while_leased(committed_then_refused, deadline=lambda: deadline, what="complete")
    assert calls == 2
    assert isinstance(refused.value, StaleLease) and refused.value.task_id == "t"
