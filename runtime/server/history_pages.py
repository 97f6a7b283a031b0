"""History paging for workers and clients (PROTOCOL.md 9): from sequence 1, token base64(seq)."""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from burrow.protocol.cancellation_events import CooperativeCancellationRequested
from burrow.server import parallel_groups, selections
from burrow.server.api_errors import ApiError
from burrow.store.models import ClaimedQueryTask, HistoryEvent, JsonDict

Groups = Mapping[int, JsonDict]
"""Parallel group path entries by step (`parallel_groups.groups_of`)."""
MAX_SEQUENCE = 2**31 - 1
"""The largest history sequence (an int4 column)."""
_SEQUENCE = re.compile(rb"[0-9]{1,10}")


def encode_token(after_sequence: int) -> str:
    """The page token that continues after `after_sequence`."""
    return base64.b64encode(str(after_sequence).encode()).decode()


def decode_token(token: str | None) -> int:
    """The sequence a page token continues after (0 for none); 400 `invalid_page_token`.

    Only tokens `encode_token` can make are taken: base64 of ASCII digits naming a sequence
    the store can hold. `wrI=` is "²", a digit to str.isdigit() that int() refuses, and a
    sequence past the column's range would fail in Postgres (issue 25).
    """
    if not token:
        return 0
    try:
        text = base64.b64decode(token.encode(), validate=True)
    except (binascii.Error, UnicodeEncodeError):
        text = b""
    if _SEQUENCE.fullmatch(text) is None or int(text) > MAX_SEQUENCE:
        raise ApiError(400, "invalid_page_token", f"invalid page token {token[:80]!r}")
    return int(text)


def page(events: Sequence[HistoryEvent], page_size: int) -> tuple[list[HistoryEvent], str | None]:
    """The first `page_size` events and the token for the rest (None when there is none)."""
    shown = list(events[:page_size])
    if len(events) > page_size and shown:
        return shown, encode_token(shown[-1].sequence)
    return shown, None


def worker_event(event: HistoryEvent, namespace: str, groups: Groups) -> JsonDict:
    """The worker-facing record (PROTOCOL.md 8.1), its step's parallel group shown."""
    record = {"id": selections.event_id(event), **event.to_json(), "namespace": namespace}
    return _with_context(parallel_groups.annotate(record, groups), event)


def client_event(event: HistoryEvent, groups: Groups) -> JsonDict:
    """The control-plane record (PROTOCOL.md 8.1): `timestamp` beside `recorded_at`."""
    record = {"id": selections.event_id(event), **event.to_json()}
    record["timestamp"] = record["recorded_at"]
    return _with_context(parallel_groups.annotate(record, groups), event)


def _stamp(moment: datetime) -> str:
    return moment.isoformat(timespec="microseconds").replace("+00:00", "Z")


def _with_context(record: JsonDict, event: HistoryEvent) -> JsonDict:
    """A cancellation request shown with its context (the SDK's `cancellation-context/v1`).

    A run's own request is its root: its lineage is that run alone, its requester the client.
    The SDK's prepared local calls in cleanup take their deadline and identities from it.
    """
    request = event.event
    if not isinstance(request, CooperativeCancellationRequested):
        return record
    context = {
        "schema": "durable-workflow.cancellation-context/v1",
        "request_id": request.workflow_command_id,
        "root_request_id": request.workflow_command_id,
        "root_workflow_instance_id": request.workflow_instance_id,
        "root_workflow_run_id": request.workflow_run_id,
        "parent_request_id": None,
        "reason": request.reason,
        "requester": {"type": "client"},
        "source": "client",
        "requested_at": _stamp(request.requested_at),
        "cleanup_deadline_at": _stamp(request.cleanup_deadline_at),
        "lineage": [
            {
                "request_id": request.workflow_command_id,
                "workflow_instance_id": request.workflow_instance_id,
                "workflow_run_id": request.workflow_run_id,
            }
        ],
    }
    return {**record, "payload": {**record["payload"], "cancellation": context}}


def whole_history_task(claimed: ClaimedQueryTask) -> dict[str, Any]:
    """The fields a query or update-validation task shares: its run and its whole history."""
    run = claimed.run
    groups = parallel_groups.groups_of(claimed.history)
    return {
        "namespace": run.namespace,
        "workflow_id": run.workflow_id,
        "run_id": run.run_id,
        "workflow_type": run.workflow_type,
        "payload_codec": str(run.input.get("codec", "avro")),
        "workflow_arguments": run.input,
        "history_events": [worker_event(e, run.namespace, groups) for e in claimed.history],
        "task_queue": run.task_queue,
        "lease_owner": claimed.lease.lease_owner,
        "lease_expires_at": claimed.lease.lease_expires_at,
    }
