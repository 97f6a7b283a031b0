"""History export files: the Durable Workflow bundle shape, read back exactly; bad files refused."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from durable_workflow import history_bundle_verify

from burrow.replay.bundle import BundleError, canonical_json, export_bundle, read_bundle
from burrow.replay.instance import RunContext
from burrow.replay.verify import Verdict
from burrow.replay_verify import verify_history_files
from burrow.testing.helpers import history_from_json
from tests.apps import flows

GOLDEN = Path(__file__).with_name("histories") / "order_flow.json"
EXPORTED_AT = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def exported() -> dict[str, Any]:
    doc = json.loads(GOLDEN.read_text())
    run = RunContext(**doc["run"])
    events = history_from_json(doc["events"], run.run_id)
    bundle = export_bundle(
        run=run,
        events=events,
        status="completed",
        started_at=events[0].recorded_at,
        closed_at=events[-1].recorded_at,
        exported_at=EXPORTED_AT,
    )
    as_file: dict[str, Any] = json.loads(json.dumps(bundle))  # as a file holds it
    return as_file


def test_export_is_a_bundle_the_sdk_checker_accepts() -> None:
    report = history_bundle_verify.verify_bundle(exported())
    assert report["status"] == "ok", report["findings"]
    assert report["integrity"]["checksum_matches"] is True
    assert report["bundle"]["history_event_count"] == 18


def test_export_reads_back_to_the_same_run_and_events() -> None:
    doc = json.loads(GOLDEN.read_text())
    original = history_from_json(doc["events"], doc["run"]["run_id"])
    back = read_bundle(exported(), source="order.json")
    assert back.run == RunContext(**doc["run"])
    assert [(e.sequence, e.event, e.workflow_task_id, e.recorded_at) for e in back.events] == [
        (e.sequence, e.event, e.workflow_task_id, e.recorded_at) for e in original
    ]
    assert back.source == "order.json"


def test_start_input_rides_on_workflow_started_for_the_sdk_replayer() -> None:
    bundle = exported()
    started = bundle["history_events"][0]
    assert started["event_type"] == started["type"] == "WorkflowStarted"
    assert started["payload"]["arguments"] == bundle["payloads"]["arguments"]["data"]


def test_a_modified_bundle_is_refused() -> None:
    bundle = exported()
    bundle["history_events"][3]["payload"]["activity_type"] = "charge"
    with pytest.raises(BundleError, match="integrity checksum mismatch"):
        read_bundle(bundle, source="edited.json")


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ([{"sequence": 1, "event_type": "WorkflowStarted"}], "not a history export: document"),
        ({"schema": "something-else"}, "not a history export: schema"),
    ],
)
def test_what_is_not_a_bundle_is_refused(document: Any, message: str) -> None:
    with pytest.raises(BundleError, match=message):
        read_bundle(document, source="x.json")


def test_an_unknown_event_is_refused_naming_it() -> None:
    bundle = exported()
    del bundle["integrity"]
    bundle["history_events"][1]["event_type"] = "ServiceCallStarted"
    with pytest.raises(
        BundleError, match="event 2: unknown history event type 'ServiceCallStarted'"
    ):
        read_bundle(bundle, source="x.json")


def test_an_event_with_a_field_its_type_lacks_is_refused_naming_it() -> None:
    bundle = exported()
    del bundle["integrity"]
    bundle["history_events"][3]["payload"]["invented"] = 1
    with pytest.raises(
        BundleError, match=r"event 4: malformed ActivityScheduled payload.*invented"
    ):
        read_bundle(bundle, source="x.json")


def test_group_fields_shown_on_step_events_are_dropped_when_read_back() -> None:
    """PROTOCOL 8.3: the server shows a step's parallel group on its events; they are derived."""
    bundle = exported()
    del bundle["integrity"]
    shown = {"parallel_group_id": "parallel-activities:1:2", "parallel_group_index": 0}
    step = next(e for e in bundle["history_events"] if e["event_type"] == "ActivityScheduled")
    step["payload"].update(shown, parallel_group_path=[shown])
    back = read_bundle(bundle, source="x.json").events
    assert [e.event for e in back] == [e.event for e in read_bundle(exported(), source="y").events]


@pytest.mark.parametrize(
    "value",
    [
        {"b": 1e-05, "a": [0.1, 1e20, 3.0, 12345678901234567.0, -2.5e-7]},
        {"text": "naïve ☃ 😀 \u007f", "n": None, "t": True, "i": 7},
    ],
)
def test_canonical_json_matches_the_sdk_checker(value: Any) -> None:
    """The checksum is over PHP's JSON bytes: floats and non-ASCII text must agree exactly."""
    canonical = history_bundle_verify._canonical_json_value(
        history_bundle_verify._canonicalize_value(value)
    )
    assert canonical_json(value) == canonical


def test_files_that_are_not_exports_are_errors_for_those_files(tmp_path: Path) -> None:
    (tmp_path / "a-good.json").write_text(json.dumps(exported()))
    (tmp_path / "b-broken.json").write_text("{not json")
    (tmp_path / "notes.txt").write_text("ignored: not *.json")
    report = verify_history_files(flows.app, [tmp_path])
    assert [r.verdict for r in report.runs] == [Verdict.OK, Verdict.ERROR]
    assert report.runs[1].source == str(tmp_path / "b-broken.json")
    assert "Expecting property name" in (report.runs[1].error or "")
    assert not report.ok
