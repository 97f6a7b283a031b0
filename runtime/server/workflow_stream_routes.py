"""Run output streams as the SDK 2.12.0 Client reads and writes them (PROTOCOL.md 17).

`/api/workflows/{id}/runs/{runId}/streams[/{name}[/items|/close]]`: list a run's streams,
describe one, page through its items from an offset (long-polled up to `wait_seconds`), append
items and close (or error) it. Offsets count from 0; a page's `next_offset` is the offset to
resume from, and delivery is at least once. A page is `terminal` once the subscriber has every
item of a stream that takes no more: closed, errored, or of a closed run.

Unlike a message stream (message_stream_routes.py: input the workflow receives as signals), an
output stream is what a run publishes; the two share the stream-name rule only.

Refusals write nothing: a closed or errored stream 409 `stream_closed` / `stream_errored`, an
append past `max_pending_items` 429 `stream_full`, an idempotency key reused for another item
409 `idempotency_key_conflict`, an unknown stream 404 `stream_not_found`, an unknown run 404
`run_not_found`, a closed run's new item 409 `run_not_active`.
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import datetime
from typing import Annotated, Any

import structlog
from fastapi import APIRouter, Query, Request
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from burrow.errors import WorkflowNotFoundError
from burrow.protocol.shapes import JsonDict
from burrow.server.api_errors import ApiError
from burrow.server.deps import OperatorCaller, ServerState, State
from burrow.server.longpoll import deadline_of
from burrow.server.message_stream_routes import valid_stream_name
from burrow.store import workflow_streams as ws
from burrow.store.models import RunStatus

router = APIRouter(prefix="/api/workflows")
log = structlog.get_logger("burrow.server")

MAX_APPEND_ITEMS = 500
MAX_PAGE_ITEMS = 500
MAX_WAIT_SECONDS = 60


class AppendItem(BaseModel):
    """One item of `Client.append_workflow_stream`: a payload envelope and/or a reference."""

    model_config = ConfigDict(extra="allow", frozen=True)

    payload: dict[str, Any] | None = None
    payload_reference: str | None = Field(default=None, min_length=1, max_length=2048)
    payload_codec: str | None = Field(default=None, min_length=1, max_length=64)
    idempotency_key: str | None = Field(default=None, min_length=1, max_length=255)
    item_type: str | None = Field(default=None, min_length=1, max_length=255)
    content_type: str | None = Field(default=None, min_length=1, max_length=255)

    @field_validator("payload")
    @classmethod
    def _envelope(cls, payload: dict[str, Any] | None) -> dict[str, Any] | None:
        if payload is None:
            return None
        if not isinstance(payload.get("codec"), str) or not payload["codec"]:
            raise ValueError("payload needs a codec")
        if not isinstance(payload.get("blob"), str) and not isinstance(
            payload.get("external_storage"), dict
        ):
            raise ValueError("payload needs a blob or an external_storage reference")
        return payload

    @model_validator(mode="after")
    def _something(self) -> AppendItem:
        if self.payload is None and self.payload_reference is None:
            raise ValueError("an item needs a payload or a payload_reference")
        return self

    def new_item(self) -> ws.NewItem:
        """The item as the store appends it."""
        return ws.NewItem(
            payload=self.payload,
            payload_reference=self.payload_reference,
            payload_codec=self.payload_codec,
            idempotency_key=self.idempotency_key,
            item_type=self.item_type,
            content_type=self.content_type,
        )


class AppendBody(BaseModel):
    """The body `Client.append_workflow_stream` sends."""

    model_config = ConfigDict(extra="allow", frozen=True)

    items: list[AppendItem] = Field(min_length=1, max_length=MAX_APPEND_ITEMS)
    max_pending_items: int | None = Field(default=None, ge=1)


class CloseBody(BaseModel):
    """The body `Client.close_workflow_stream` sends (empty closes, `error_reason` errors)."""

    model_config = ConfigDict(extra="allow", frozen=True)

    error_reason: str | None = Field(default=None, min_length=1, max_length=2000)
    retention_seconds: int | None = Field(default=None, ge=1)


def _at(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def stream_body(workflow_id: str, stream: ws.StreamState) -> JsonDict:
    """A stream as `WorkflowStreamDescription.from_dict` reads it."""
    return {
        "workflow_id": workflow_id,
        "workflow_run_id": stream.run_id,
        "stream_name": stream.stream_name,
        "status": stream.status.value,
        "last_offset": stream.last_offset,
        "total_items": stream.total_items,
        "pending_items": stream.pending_items,
        "error_reason": stream.error_reason,
        "opened_at": _at(stream.opened_at),
        "last_appended_at": _at(stream.last_appended_at),
        "closed_at": _at(stream.closed_at),
        "retention_seconds": stream.retention_seconds,
    }


def item_body(item: ws.StreamItem) -> JsonDict:
    """An item as `subscribe_workflow_stream` reads it."""
    return {
        "offset": item.offset,
        "payload": item.payload,
        "payload_reference": item.payload_reference,
        "payload_codec": item.payload_codec,
        "idempotency_key": item.idempotency_key,
        "item_type": item.item_type,
        "content_type": item.content_type,
        "origin": item.origin,
        "origin_reference": item.origin_reference,
        "emitted_at": item.emitted_at.isoformat(),
    }


def _check_ids(workflow_id: str, run_id: str, stream_name: str | None = None) -> None:
    try:
        uuid.UUID(run_id)
    except ValueError:
        raise _run_not_found(workflow_id, run_id) from None
    if stream_name is not None and not valid_stream_name(stream_name):
        raise ApiError(
            422,
            "validation_failed",
            f"invalid stream name {stream_name[:130]!r}",
            errors={"stream_name": ["1-128 characters of A-Z a-z 0-9 . _ : -"]},
        )


def _run_not_found(workflow_id: str, run_id: str) -> ApiError:
    return ApiError(
        404, "run_not_found", "Workflow run not found.", workflow_id=workflow_id, run_id=run_id
    )


def _not_found(workflow_id: str, run_id: str, stream_name: str) -> ApiError:
    return ApiError(
        404,
        "stream_not_found",
        f"run {run_id} has no stream {stream_name!r}",
        workflow_id=workflow_id,
        run_id=run_id,
        stream_name=stream_name,
    )


@router.get("/{workflow_id}/runs/{run_id}/streams")
async def list_streams(
    workflow_id: str, run_id: str, state: State, caller: OperatorCaller
) -> JsonDict:
    """Every output stream of the run, by name."""
    _check_ids(workflow_id, run_id)
    try:
        streams = await state.store.list_workflow_streams(
            namespace=caller.namespace, workflow_id=workflow_id, run_id=run_id
        )
    except WorkflowNotFoundError:
        raise _run_not_found(workflow_id, run_id) from None
    return {
        "workflow_id": workflow_id,
        "workflow_run_id": run_id,
        "streams": [stream_body(workflow_id, stream) for stream in streams],
    }


@router.get("/{workflow_id}/runs/{run_id}/streams/{stream_name}")
async def describe_stream(
    workflow_id: str, run_id: str, stream_name: str, state: State, caller: OperatorCaller
) -> JsonDict:
    """One stream's lifecycle, offsets and pending count; 404 `stream_not_found`."""
    _check_ids(workflow_id, run_id, stream_name)
    try:
        _, stream, _ = await state.store.read_workflow_stream(
            namespace=caller.namespace,
            workflow_id=workflow_id,
            run_id=run_id,
            stream_name=stream_name,
        )
    except WorkflowNotFoundError:
        raise _run_not_found(workflow_id, run_id) from None
    if stream is None:
        raise _not_found(workflow_id, run_id, stream_name)
    return {
        "workflow_id": workflow_id,
        "workflow_run_id": run_id,
        "stream": stream_body(workflow_id, stream),
    }


@router.get("/{workflow_id}/runs/{run_id}/streams/{stream_name}/items")
async def subscribe(
    workflow_id: str,
    run_id: str,
    stream_name: str,
    request: Request,
    state: State,
    caller: OperatorCaller,
    from_offset: Annotated[int, Query(alias="from", ge=0)] = 0,
    max_items: Annotated[int, Query(ge=1, le=MAX_PAGE_ITEMS)] = 100,
    wait_seconds: Annotated[int, Query(ge=0, le=MAX_WAIT_SECONDS)] = 0,
) -> JsonDict:
    """Up to `max_items` items from offset `from`, held up to `wait_seconds` for the first.

    A stream the open run has not opened yet reads as an empty open one; a closed run's
    unknown stream is 404 `stream_not_found`.
    """
    _check_ids(workflow_id, run_id, stream_name)
    deadline = deadline_of(request, wait_seconds)
    loop = asyncio.get_running_loop()
    while True:
        page = await _page(
            state, caller.namespace, workflow_id, run_id, stream_name, from_offset, max_items
        )
        left = deadline - loop.time()
        if page["items"] or page["terminal"] or left <= 0 or await request.is_disconnected():
            return page
        await state.stream_waits.wait(run_id, stream_name, timeout=left)


async def _page(
    state: ServerState,
    namespace: str,
    workflow_id: str,
    run_id: str,
    stream_name: str,
    from_offset: int,
    max_items: int,
) -> JsonDict:
    try:
        run, stream, items = await state.store.read_workflow_stream(
            namespace=namespace,
            workflow_id=workflow_id,
            run_id=run_id,
            stream_name=stream_name,
            from_offset=from_offset,
            limit=max_items,
        )
    except WorkflowNotFoundError:
        raise _run_not_found(workflow_id, run_id) from None
    run_open = run.status == RunStatus.RUNNING
    if stream is None:
        if not run_open:
            raise _not_found(workflow_id, run_id, stream_name)
        stream = ws.StreamState.unopened(run_id, stream_name)
    next_offset = items[-1].offset + 1 if items else from_offset
    ended = stream.terminal or not run_open
    return {
        "workflow_id": workflow_id,
        "workflow_run_id": run_id,
        "stream": stream_body(workflow_id, stream),
        "items": [item_body(item) for item in items],
        "next_offset": next_offset,
        "terminal": ended and next_offset >= stream.total_items,
    }


@router.post("/{workflow_id}/runs/{run_id}/streams/{stream_name}/items")
async def append(
    workflow_id: str,
    run_id: str,
    stream_name: str,
    body: AppendBody,
    state: State,
    caller: OperatorCaller,
) -> JsonDict:
    """Append items in order; a known idempotency key returns its first offset (`deduped`)."""
    _check_ids(workflow_id, run_id, stream_name)
    try:
        appended = await state.store.append_workflow_stream(
            namespace=caller.namespace,
            workflow_id=workflow_id,
            run_id=run_id,
            stream_name=stream_name,
            items=[item.new_item() for item in body.items],
            max_pending_items=body.max_pending_items,
        )
    except WorkflowNotFoundError:
        raise _run_not_found(workflow_id, run_id) from None
    if appended.accepted:
        state.stream_waits.changed(run_id, stream_name)
    log.info(
        "workflow stream appended",
        namespace=caller.namespace,
        workflow_id=workflow_id,
        run_id=run_id,
        stream_name=stream_name,
        accepted=appended.accepted,
        deduped=appended.deduplicated,
    )
    return {
        "workflow_id": workflow_id,
        "workflow_run_id": run_id,
        "stream": stream_body(workflow_id, appended.stream),
        "accepted_offsets": appended.offsets,
        "accepted": appended.accepted,
        "deduped": appended.deduplicated,
    }


@router.post("/{workflow_id}/runs/{run_id}/streams/{stream_name}/close")
async def close(
    workflow_id: str,
    run_id: str,
    stream_name: str,
    body: CloseBody,
    state: State,
    caller: OperatorCaller,
) -> JsonDict:
    """Close the stream, or mark it errored with `error_reason`; the same close again is a no-op."""
    _check_ids(workflow_id, run_id, stream_name)
    try:
        stream = await state.store.close_workflow_stream(
            namespace=caller.namespace,
            workflow_id=workflow_id,
            run_id=run_id,
            stream_name=stream_name,
            error_reason=body.error_reason,
            retention_seconds=body.retention_seconds,
        )
    except WorkflowNotFoundError:
        raise _run_not_found(workflow_id, run_id) from None
    state.stream_waits.changed(run_id, stream_name)
    log.info(
        "workflow stream closed",
        namespace=caller.namespace,
        workflow_id=workflow_id,
        run_id=run_id,
        stream_name=stream_name,
        status=stream.status.value,
    )
    return {
        "workflow_id": workflow_id,
        "workflow_run_id": run_id,
        "stream": stream_body(workflow_id, stream),
    }
