"""History export files: one run as a `durable-workflow.v2.history-export` bundle, and back.

One format serves both verifiers. The `durable-workflow` SDK's tooling reads it as is:
`history_bundle_verify` checks its sections and sha256 integrity, and its `Replayer` takes the
`history_events` records (PROTOCOL.md 8.1), the workflow type from `WorkflowStarted` and the start
input from that event's `arguments` envelope. Burrow reads the same records back into its typed
events; the one key it adds to a stored payload, `WorkflowStarted.arguments` (Burrow keeps the
input on the run, not in the event), is taken out again on reading.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from burrow import codec
from burrow.codec import Payload
from burrow.errors import PayloadError
from burrow.protocol import events as ev
from burrow.protocol import shown_groups
from burrow.protocol.events import HistoryEvent
from burrow.protocol.shapes import JsonDict
from burrow.replay.instance import RunContext
from burrow.replay.verify import RecordedRun

BUNDLE_SCHEMA = "durable-workflow.v2.history-export"
BUNDLE_SCHEMA_VERSION = 1
CANONICALIZATION = "json-recursive-ksort-v1"
_START_INPUT_KEY = "arguments"  # where the SDK's Replayer looks for the start input
_EMPTY_SECTIONS: JsonDict = {
    "commands": [],
    "signals": [],
    "updates": [],
    "tasks": [],
    "activities": [],
    "timers": [],
    "failures": [],
    "codec_schemas": {},
}


class BundleError(PayloadError):
    """A file that is not a readable Burrow history export."""


def export_bundle(
    *,
    run: RunContext,
    events: Sequence[HistoryEvent],
    status: str,
    started_at: datetime,
    closed_at: datetime | None,
    exported_at: datetime | None = None,
) -> JsonDict:
    """The bundle of one run: its identity, start input, every history event, and a checksum."""
    exported = (exported_at or datetime.now(UTC)).isoformat()
    bundle: JsonDict = {
        "schema": BUNDLE_SCHEMA,
        "schema_version": BUNDLE_SCHEMA_VERSION,
        "exported_at": exported,
        "dedupe_key": f"{run.run_id}:{len(events)}:{exported}",
        "history_complete": True,
        "workflow": {
            "instance_id": run.workflow_id,
            "run_id": run.run_id,
            "workflow_type": run.workflow_type,
            "namespace": run.namespace,
            "task_queue": run.task_queue,
            "status": status,
            "last_history_sequence": max((e.sequence for e in events), default=0),
            "started_at": started_at.isoformat(),
            "closed_at": None if closed_at is None else closed_at.isoformat(),
        },
        "payloads": {"codec": run.input.get("codec"), "arguments": _available(run.input)},
        "history_events": [_record(e, run.input) for e in events],
        "links": {"projection_source": "history", **_links(events)},
        "redaction": {"applied": False, "policy": None, "paths": []},
        "payload_manifest": {"version": 1, "entries": []},
        **_EMPTY_SECTIONS,
    }
    bundle["integrity"] = {
        "canonicalization": CANONICALIZATION,
        "checksum_algorithm": "sha256",
        "checksum": checksum(bundle),
        "signature_algorithm": None,
        "signature": None,
        "key_id": None,
    }
    return bundle


def _links(events: Sequence[HistoryEvent]) -> JsonDict:
    """The run's parent (from WorkflowStarted) and the children its steps started."""
    parents: list[JsonDict] = []
    children: list[JsonDict] = []
    for record in events:
        event = record.event
        if isinstance(event, ev.WorkflowStarted) and event.parent_workflow_run_id is not None:
            parents.append(
                {
                    "workflow_instance_id": event.parent_workflow_instance_id,
                    "workflow_run_id": event.parent_workflow_run_id,
                    "sequence": event.parent_sequence,
                }
            )
        elif isinstance(event, ev.ChildWorkflowScheduled):
            children.append(
                {
                    "workflow_instance_id": event.child_workflow_instance_id,
                    "workflow_run_id": event.child_workflow_run_id,
                    "workflow_type": event.child_workflow_type,
                    "sequence": event.sequence,
                    "parent_close_policy": event.parent_close_policy,
                }
            )
    return {"parents": parents, "children": children}


def _available(payload: Mapping[str, object]) -> JsonDict:
    return {"available": True, "data": dict(payload)}


def _record(event: HistoryEvent, start_input: Mapping[str, object]) -> JsonDict:
    """One history record as the worker protocol serves it, with `type` for the bundle checker."""
    payload = event.payload
    if isinstance(event.event, ev.WorkflowStarted):
        payload = {**payload, _START_INPUT_KEY: dict(start_input)}
    return {
        "id": f"{event.run_id}:{event.sequence}",
        "sequence": event.sequence,
        "event_type": event.event_type,
        "type": event.event_type,
        "payload": payload,
        "workflow_task_id": event.workflow_task_id,
        "workflow_command_id": None,
        "recorded_at": event.recorded_at.isoformat(),
    }


# -- reading --------------------------------------------------------------------------------------


class _Lenient(BaseModel):
    """Bundles carry more than Burrow needs (other servers add sections): unknown keys pass."""

    model_config = ConfigDict(frozen=True, extra="ignore")


class _Workflow(_Lenient):
    instance_id: str
    run_id: str
    workflow_type: str
    namespace: str = "default"
    task_queue: str = ""


class _Available(_Lenient):
    available: bool = False
    data: dict[str, Any] | None = None


class _Payloads(_Lenient):
    arguments: _Available = _Available()


class _Record(_Lenient):
    sequence: int
    event_type: str
    payload: dict[str, Any]
    workflow_task_id: str | None = None
    recorded_at: datetime


class _Integrity(_Lenient):
    canonicalization: str
    checksum_algorithm: str
    checksum: str


class _Bundle(_Lenient):
    schema_: Literal["durable-workflow.v2.history-export"] = Field(alias="schema")
    schema_version: int
    workflow: _Workflow
    payloads: _Payloads = _Payloads()
    history_events: list[_Record]
    integrity: _Integrity | None = None


def read_bundle(document: object, *, source: str) -> RecordedRun:
    """The recorded run of a parsed bundle; BundleError names what is wrong with it."""
    try:
        bundle = _Bundle.model_validate(document)
    except ValidationError as exc:
        raise BundleError(f"{source}: not a history export: {_first_error(exc)}") from exc
    _check_integrity(document, bundle.integrity, source)
    flow = bundle.workflow
    start_input = bundle.payloads.arguments.data
    events = []
    for record in bundle.history_events:
        payload = shown_groups.without_shown_group(record.event_type, dict(record.payload))
        if record.event_type == ev.WorkflowStarted.event_type:
            start_input = start_input or payload.get(_START_INPUT_KEY)
            payload.pop(_START_INPUT_KEY, None)
        try:
            event = HistoryEvent.from_record(
                run_id=flow.run_id,
                sequence=record.sequence,
                event_type=record.event_type,
                payload=payload,
                recorded_at=record.recorded_at,
                workflow_task_id=record.workflow_task_id,
            )
        except ev.HistoryError as exc:
            raise BundleError(f"{source}: event {record.sequence}: {exc}") from exc
        except ValidationError as exc:
            raise BundleError(
                f"{source}: event {record.sequence} ({record.event_type}): {_first_error(exc)}"
            ) from exc
        events.append(event)
    run = RunContext(
        run_id=flow.run_id,
        workflow_id=flow.instance_id,
        workflow_type=flow.workflow_type,
        namespace=flow.namespace,
        task_queue=flow.task_queue,
        input=_payload(start_input, source),
    )
    return RecordedRun(run=run, events=events, source=source)


def _payload(data: object, source: str) -> Payload:
    if data is None:
        return codec.encode([])  # no input recorded: the run took no arguments
    if not isinstance(data, dict) or not {"codec", "blob"} <= set(data):
        raise BundleError(f"{source}: the start input is not a {{codec, blob}} envelope")
    return {"codec": str(data["codec"]), "blob": str(data["blob"])}


def _check_integrity(document: object, integrity: _Integrity | None, source: str) -> None:
    """A bundle that declares a checksum must match it: a modified file is refused."""
    if integrity is None:
        return
    if integrity.canonicalization != CANONICALIZATION or integrity.checksum_algorithm != "sha256":
        raise BundleError(
            f"{source}: unsupported integrity {integrity.canonicalization}"
            f"/{integrity.checksum_algorithm}"
        )
    if not isinstance(document, dict) or checksum(document) != integrity.checksum:
        raise BundleError(f"{source}: integrity checksum mismatch: the file was modified")


def _first_error(exc: ValidationError) -> str:
    error = exc.errors(include_url=False)[0]
    where = ".".join(str(part) for part in error["loc"]) or "document"
    return f"{where}: {error['msg']}"


# -- json-recursive-ksort-v1 ----------------------------------------------------------------------


def checksum(bundle: JsonDict) -> str:
    """sha256 of the canonical JSON of everything but `integrity` (json-recursive-ksort-v1)."""
    body = {k: v for k, v in bundle.items() if k != "integrity"}
    return hashlib.sha256(canonical_json(body).encode("utf-8")).hexdigest()


def canonical_json(value: object) -> str:
    """The byte form the Durable Workflow verifiers hash: sorted keys, PHP's number and escapes."""
    if isinstance(value, dict):
        items = sorted(value.items())
        return "{" + ",".join(f"{_string(k)}:{canonical_json(v)}" for k, v in items) + "}"
    if isinstance(value, list):
        return "[" + ",".join(canonical_json(item) for item in value) + "]"
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, float):
        return _float(value)
    return json.dumps(value, separators=(",", ":"), allow_nan=False)


def _string(value: str) -> str:
    """JSON string with every non-ASCII character escaped as UTF-16 units (as PHP does)."""
    encoded = json.dumps(value, ensure_ascii=False)
    if encoded.isascii():
        return encoded
    return "".join(c if ord(c) < 128 else _utf16_escape(c) for c in encoded)


def _utf16_escape(character: str) -> str:
    units = character.encode("utf-16-be").hex()
    return "".join("\\u" + units[i : i + 4] for i in range(0, len(units), 4))


def _float(value: float) -> str:
    """PHP's float form: fixed notation up to exponent 16, a kept `.0`, `1.0e+20` beyond."""
    if not math.isfinite(value):
        raise BundleError("history export numbers must be finite")
    text = float.__repr__(value)
    mantissa, separator, exponent_text = text.partition("e")
    if not separator:
        return text
    exponent = int(exponent_text)
    if -4 <= exponent < 17:
        fixed = format(Decimal(text), "f")
        return fixed if "." in fixed else fixed + ".0"
    if "." not in mantissa:
        mantissa += ".0"
    return f"{mantissa}e{exponent:+d}"
