"""The poll registry keeps little, and not for long (issue 25 item 4; PROTOCOL.md 2.5)."""

from __future__ import annotations

from burrow.server.polls import RESEND_WINDOW_SECONDS, PollRegistry


class Clock:
    """A settable monotonic clock."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def key(poll_request_id: str) -> tuple[str, str, str, str, str]:
    return ("workflow", "default", "q", "w1", poll_request_id)


def remember(registry: PollRegistry, poll_request_id: str) -> None:
    answer = {"task_id": poll_request_id, "arguments": "A" * 1000, "history_events": [{}]}
    registry.remember(
        key(poll_request_id),
        task_id=poll_request_id,
        attempt=1,
        answer=answer,
        payloads={"arguments", "history_events"},
    )


def test_a_remembered_answer_leaves_out_its_payloads() -> None:
    """Issue 25 item 4: what is kept is the answer less the fields named as payloads."""
    registry = PollRegistry()
    remember(registry, "p1")
    kept = registry.leased(key("p1"))
    assert kept is not None
    assert (kept.task_id, kept.attempt, kept.answer) == ("p1", 1, {"task_id": "p1"})


def test_entries_past_the_resend_window_are_forgotten() -> None:
    """Issue 25 item 4: by age, at lookup and whenever a newer entry is remembered."""
    clock = Clock()
    registry = PollRegistry(clock=clock)
    remember(registry, "old")
    remember(registry, "older-lookup")
    clock.now = RESEND_WINDOW_SECONDS + 1
    assert registry.leased(key("older-lookup")) is None
    remember(registry, "new")
    assert len(registry) == 1
    assert registry.leased(key("new")) is not None


def test_the_oldest_entries_go_past_the_count_cap() -> None:
    """Issue 25 item 4: a bound by count as well, oldest first."""
    clock = Clock()
    registry = PollRegistry(max_entries=2, clock=clock)
    for n, poll_request_id in enumerate(("p1", "p2", "p3")):
        clock.now = n
        remember(registry, poll_request_id)
    assert len(registry) == 2
    assert registry.leased(key("p1")) is None
    assert registry.leased(key("p3")) is not None
