"""Workflow time from history: recorded_at, or the time a warm write's code ran with (D1, S12)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from burrow.protocol import events as ev

RECORDED = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def _completed(**times: datetime) -> ev.HistoryEvent:
    completed = ev.ActivityCompleted(
        activity_execution_id="e",
        activity_attempt_id="a",
        activity_type="charge",
        sequence=1,
        attempt_number=1,
        result="x",
        payload_codec="avro",
        **times,
    )
    return ev.HistoryEvent(run_id="r", sequence=4, event=completed, recorded_at=RECORDED)


def test_s12_a_result_written_with_its_task_gives_the_time_its_code_ran_with() -> None:
    """S12: the stored `workflow_time` (warm, written with its task) is the code's time."""
    seen = RECORDED - timedelta(milliseconds=3)
    assert _completed(workflow_time=seen).workflow_time == seen


def test_d1_any_other_event_gives_its_recorded_at_as_older_histories_did() -> None:
    """D1: without `workflow_time` (older histories, claimed tasks) replay uses recorded_at;
    `finished_at`, the worker's own clock, never becomes workflow time."""
    finished = RECORDED - timedelta(seconds=9)
    assert _completed().workflow_time == RECORDED
    assert _completed(finished_at=finished).workflow_time == RECORDED


def test_d3_the_attempts_own_times_round_trip_as_payload_fields() -> None:
    """D3: `finished_at` and `workflow_time` are stored as ISO times, absent when unset."""
    finished = RECORDED - timedelta(seconds=9)
    payload = _completed(finished_at=finished, workflow_time=RECORDED).payload
    assert payload["finished_at"] == finished.isoformat()
    assert payload["workflow_time"] == RECORDED.isoformat()
    assert "finished_at" not in _completed().payload
    parsed = ev.parse("ActivityCompleted", payload)
    assert isinstance(parsed, ev.ActivityCompleted) and parsed.finished_at == finished
