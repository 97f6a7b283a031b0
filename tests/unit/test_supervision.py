"""Supervised loops: restarted after any error, with their state recorded (issue 25 item 1)."""

from __future__ import annotations

import pytest
import structlog
from structlog.testing import capture_logs

from burrow.store import errors as store_errors
from burrow.supervision import Backoff, LoopHealth, Loops, supervise

NO_WAIT = Backoff(first=0.0, maximum=0.0)
log = structlog.get_logger("tests")


class Script:
    """A loop body that raises each of `errors` in turn, then returns."""

    def __init__(self, *errors: Exception, health: LoopHealth | None = None) -> None:
        self.errors = list(errors)
        self.health = health
        self.runs = 0

    async def __call__(self) -> None:
        self.runs += 1
        if self.health is not None and self.runs == 2:
            self.health.succeeded(isolated=3)  # a pass went well before the next failure
        if self.errors:
            raise self.errors.pop(0)


async def test_a_loop_that_raises_any_error_is_restarted_and_its_state_recorded() -> None:
    """Issue 25 item 1: every Exception is logged with its traceback and the loop restarts."""
    health = LoopHealth("repair_pass")
    body = Script(ValueError("bad row"), KeyError("gone"), health=health)

    with capture_logs() as logs:
        await supervise(body, health, backoff=NO_WAIT, log=log, event="loop_failed")

    assert body.runs == 3
    assert (health.restarts, health.failures, health.consecutive_failures) == (2, 2, 1)
    assert health.rows_isolated == 3 and health.last_success_at is not None
    assert health.failing and health.last_error == "KeyError: 'gone'"
    assert [(e["event"], e["loop"], e["log_level"]) for e in logs] == [
        ("loop_failed", "repair_pass", "error"),
        ("loop_failed", "repair_pass", "error"),
    ]
    assert all(isinstance(e["exc_info"], Exception) for e in logs)


async def test_a_store_outage_is_logged_as_the_outage_event_without_a_traceback() -> None:
    """Issue 13 item 5, issue 25 item 1: an outage is expected; it is not a crash."""
    health = LoopHealth("workflow_poller")
    body = Script(store_errors.StoreUnavailable("database unavailable"))

    with capture_logs() as logs:
        await supervise(
            body,
            health,
            backoff=NO_WAIT,
            log=log,
            event="worker_loop_crashed",
            outage_event="store_unavailable",
        )

    assert [(e["event"], e["log_level"]) for e in logs] == [("store_unavailable", "warning")]
    assert "exc_info" not in logs[0]
    assert health.restarts == 1


async def test_a_fatal_error_ends_the_loop() -> None:
    """Issue 25 item 1: errors retrying cannot fix (credentials) are raised, not retried."""
    health = LoopHealth("repair_pass")
    body = Script(store_errors.CredentialsRejected("refused"))

    with pytest.raises(store_errors.CredentialsRejected):
        await supervise(
            body,
            health,
            backoff=NO_WAIT,
            log=log,
            event="loop_failed",
            fatal=(store_errors.CredentialsRejected,),
        )
    assert body.runs == 1


async def test_a_stop_while_waiting_to_restart_ends_the_loop() -> None:
    """Issue 25 item 1: shutdown during the backoff is not met with another restart."""
    health = LoopHealth("repair_pass")
    body = Script(ValueError("x"), ValueError("y"))

    with capture_logs():
        await supervise(
            body, health, backoff=NO_WAIT, log=log, event="loop_failed", stopped=lambda: True
        )

    assert (body.runs, health.restarts) == (1, 0)


@pytest.mark.parametrize(("failures", "delay"), [(1, 0.5), (2, 1.0), (3, 2.0), (9, 5.0)])
def test_backoff_doubles_from_the_first_delay_up_to_the_cap(failures: int, delay: float) -> None:
    """Issue 25 item 1: capped exponential backoff."""
    assert Backoff(first=0.5, maximum=5.0).delay(failures) == delay


def test_loops_name_the_failing_ones() -> None:
    """Issue 25 item 1: health names the loops failing now."""
    loops = Loops()
    loops.add("repair_pass").failed(ValueError("x"))
    loops.add("lease_keeper").succeeded()

    assert loops.failing() == ["repair_pass"]
    assert [r["name"] for r in loops.report()] == ["lease_keeper", "repair_pass"]
    assert loops.add("repair_pass").failures == 1  # the same record again
