"""Issue 31: the run page's timeline lanes, bars and marks, from constructed history events."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from burrow import codec
from burrow.protocol import child_events as ce
from burrow.protocol import events as ev
from burrow.protocol.activity_events import (
    ActivityCompleted,
    ActivityRetryScheduled,
    ActivityScheduled,
    ActivityStarted,
    AttemptSummary,
)
from burrow.protocol.event_base import Event
from burrow.protocol.shapes import ActivitySpec, SessionSpec
from burrow.ui import timeline

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
ARGS = dict(codec.encode([]))


def _at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def _history(*items: tuple[float, Event]) -> list[ev.HistoryEvent]:
    return [
        ev.HistoryEvent(run_id="r", sequence=n, event=event, recorded_at=_at(seconds))
        for n, (seconds, event) in enumerate(items, start=1)
    ]


def _scheduled(seq: int, **extra: object) -> ActivityScheduled:
    spec = ActivitySpec(activity_type="charge", queue="q", arguments=ARGS, **extra)
    return ActivityScheduled(
        activity_execution_id=f"r:{seq}",
        activity_type="charge",
        sequence=seq,
        workflow_task_id="wt",
        activity=spec,
    )


def _ids(seq: int, attempt: int) -> dict[str, object]:
    return {
        "activity_execution_id": f"r:{seq}",
        "activity_attempt_id": f"a{attempt}",
        "activity_type": "charge",
        "sequence": seq,
        "attempt_number": attempt,
    }


def _retried() -> list[ev.HistoryEvent]:
    return _history(
        (0, ev.WorkflowStarted(workflow_type="t", workflow_instance_id="w", workflow_run_id="r")),
        (1, _scheduled(2)),
        (2, ActivityStarted(**_ids(2, 1))),
        (
            5.5,  # written late (with the next workflow task): its times say when it failed
            ActivityRetryScheduled(
                **_ids(2, 1),
                exception_type="IOError",
                message="<b>flaky</b>",
                retry_backoff_seconds=2.0,
                retry_available_at=_at(5),
                retry_after_attempt=1,
                retry_reason="failure",
                max_attempts=3,
            ),
        ),
        (5, ActivityStarted(**_ids(2, 2))),
        (7, ActivityCompleted(**_ids(2, 2), result="x", payload_codec="avro")),
    )


def test_each_activity_attempt_is_a_bar_with_the_backoff_between() -> None:
    """Issue 31: a failed attempt (bar-failed), its backoff, then the successful attempt."""
    drawn = timeline.build(_retried(), now=_at(10), closed_at=_at(8))
    (lane,) = drawn.lanes
    kinds = [(s.kind, s.attempt) for s in lane.shapes]
    assert kinds == [("activity", 1), ("backoff", None), ("activity", 2)]
    failed, backoff, done = lane.shapes
    assert "bar-failed" in failed.css and "bar-queued" in failed.css
    assert "<b>flaky</b>" in failed.title  # escaped by the template, not here
    assert (backoff.start, backoff.end) == (_at(3), _at(5))
    assert "bar-failed" not in done.css and not done.is_open
    assert failed.x < backoff.x < done.x and all(s.width >= 2 for s in lane.shapes)
    assert drawn.ticks[0].label == "+0 ms" and len(drawn.ticks) == timeline.TICKS


def test_local_attempts_are_laid_out_by_their_durations() -> None:
    """Issue 31: a local execution's events share one time; its attempts are placed by their
    recorded durations, with the in-process backoff between them (bar-local)."""
    local = {"execution_mode": "local", "local_activity": True}

    def ran(attempt: int, ms: int) -> dict[str, object]:
        summary = AttemptSummary(
            attempt_id=f"a{attempt}", attempt_number=attempt, outcome="x", duration_ms=ms
        )
        return {**_ids(1, attempt), "activity_attempt": summary}

    history = _history(
        (1, _scheduled(1).model_copy(update=local)),
        (1, ActivityStarted(**ran(1, 100), **local)),
        (
            1,
            ActivityRetryScheduled(
                **ran(1, 100),
                **local,
                exception_type=None,
                message="once",
                retry_backoff_seconds=0.5,
                retry_after_attempt=1,
                retry_reason="failure",
                max_attempts=2,
            ),
        ),
        (1, ActivityStarted(**ran(2, 200), **local)),
        (1, ActivityCompleted(**_ids(1, 2), result="x", payload_codec="avro", **local)),
    )
    (lane,) = timeline.build(history, now=_at(3), closed_at=_at(3)).lanes
    first, backoff, second = lane.shapes
    assert first.css == "bar-local bar-failed" and second.css == "bar-local"
    assert (first.start, first.end) == (_at(1), _at(1.1))
    assert (backoff.start, backoff.end) == (_at(1.1), _at(1.6))
    assert (second.start, second.end) == (_at(1.6), _at(1.8))


def test_open_items_run_to_now_with_bar_open() -> None:
    """Issue 31: a running attempt, a pending timer and an open wait end at now, bar-open."""
    history = _history(
        (0, _scheduled(1, worker_session=SessionSpec(session_id="s1"))),
        (1, ActivityStarted(**_ids(1, 1))),
        (2, ev.TimerScheduled(timer_id="t1", sequence=2, delay_seconds=60, fire_at=_at(62))),
        (3, ev.ConditionWaitOpened(condition_wait_id="c1", sequence=3)),
    )
    drawn = timeline.build(history, now=_at(10))
    shapes = [lane.shapes[-1] for lane in drawn.lanes]
    assert [s.kind for s in shapes] == ["activity", "timer", "wait"]
    assert all(s.is_open and "bar-open" in s.css and s.end == _at(10) for s in shapes)
    assert "bar-session" in shapes[0].css
    assert len(drawn.open_shapes) == 3


def test_signals_and_updates_are_marks_and_timers_close() -> None:
    """Issue 31: signal and update marks; a fired timer is a closed bar."""
    history = _history(
        (0, ev.TimerScheduled(timer_id="t1", sequence=1, delay_seconds=1, fire_at=_at(1))),
        (1, ev.TimerFired(timer_id="t1", sequence=1, delay_seconds=1, fired_at=_at(1))),
        (
            2,
            ev.SignalReceived(
                signal_id="s",
                signal_name="<script>",
                workflow_instance_id="w",
                workflow_run_id="r",
                arguments=ARGS,
            ),
        ),
        (
            3,
            ev.UpdateAccepted(
                update_id="u",
                update_name="bump",
                workflow_instance_id="w",
                workflow_run_id="r",
                arguments=ARGS,
            ),
        ),
    )
    drawn = timeline.build(history, now=_at(4), closed_at=_at(4))
    timer, signals, updates = drawn.lanes
    assert timer.shapes[0].kind == "timer" and not timer.shapes[0].is_open
    assert signals.shapes[0].mark and signals.shapes[0].css == "mark-signal"
    assert "<script>" in signals.shapes[0].title
    assert updates.shapes[0].kind == "update"


def test_lanes_are_bounded_and_the_rest_counted() -> None:
    """Issue 31: a huge history draws at most max_lanes lanes; the rest are summarized."""
    items: list[tuple[float, Event]] = [
        (n, ev.TimerScheduled(timer_id=f"t{n}", sequence=n, delay_seconds=1, fire_at=_at(n)))
        for n in range(1, 26)
    ]
    drawn = timeline.build(_history(*items), now=_at(30), max_lanes=10)
    assert len(drawn.lanes) == 10 and drawn.hidden_lanes == 15
    assert drawn.hidden_summary == "15 timer"


def test_an_empty_history_draws_nothing() -> None:
    """Issue 31: no events, no lanes (the template says so)."""
    drawn = timeline.build([], now=T0)
    assert drawn.lanes == [] and drawn.hidden_lanes == 0


def test_a_child_and_a_condition_wait_are_bars() -> None:
    """Issue 31: a child workflow runs from its scheduling to its close; a condition wait from
    its opening to its satisfaction."""
    child = {
        "sequence": 1,
        "child_workflow_instance_id": "kid",
        "child_workflow_run_id": "kid-run",
        "child_workflow_type": "kiddo",
    }
    history = _history(
        (0, ce.ChildWorkflowScheduled(**child)),
        (1, ev.ConditionWaitOpened(condition_wait_id="c", sequence=2, condition_key="ready")),
        (2, ev.ConditionWaitSatisfied(condition_wait_id="c", sequence=2)),
        (
            4,
            ce.ChildRunCompleted(
                **child,
                child_status="completed",
                closed_reason="completed",
                output="x",
                payload_codec="avro",
                closed_at=_at(3),
            ),
        ),
    )
    kid, wait = timeline.build(history, now=_at(5), closed_at=_at(5)).lanes
    assert kid.label == "child kiddo" and wait.label == "wait ready"
    (bar,) = kid.shapes
    assert (bar.kind, bar.css, bar.start, bar.end) == ("child", "bar-child", _at(0), _at(3))
    assert "kid" in bar.title and "completed" in bar.title
    assert [(s.kind, s.is_open) for s in wait.shapes] == [("wait", False)]
