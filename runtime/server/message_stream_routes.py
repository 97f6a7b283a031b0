"""Workflow message streams as the SDK Client appends to them (PROTOCOL.md 17).

`POST /api/workflows/{id}/message-streams/{stream}/messages` appends one message, once per
`message_id`, to the workflow id's stream, for its current run to read: positions and ids
count across the runs continue-as-new chains (store/message_streams.py). The SDK's workflow
receives it as its message-stream signal (`MESSAGE_STREAM_SIGNAL`), whose one argument is the
message envelope it reads: schema, stream name, message id, the server's position and the
caller's payload envelope. Replay reads the same signals from history, so what a workflow
consumed is never consumed twice.
"""

from __future__ import annotations

import structlog
from fastapi import APIRouter
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from burrow import codec
from burrow.protocol.shapes import JsonDict
from burrow.server.api_errors import ApiError
from burrow.server.deps import OperatorCaller, State
from burrow.server.worker_models import Envelope
from burrow.store import message_streams

router = APIRouter(prefix="/api/workflows")
log = structlog.get_logger("burrow.server")

MESSAGE_STREAM_SIGNAL = message_streams.SIGNAL_NAME
"""The signal name the SDK's workflows take message-stream messages from."""
MESSAGE_STREAM_SCHEMA = message_streams.MESSAGE_SCHEMA


class AppendMessage(BaseModel):
    """The body `Client.append_message_stream` sends."""

    model_config = ConfigDict(extra="allow", frozen=True)

    message_id: str = Field(min_length=1, max_length=255)
    input: Envelope | None = None


class MessageReceipt(BaseModel):
    """202: the message's place in its stream; `deduplicated` when its id was already there."""

    model_config = ConfigDict(frozen=True)

    workflow_id: str
    run_id: str
    stream_name: str
    message_id: str
    position: int
    outcome: str


def message_envelope(
    stream_name: str, message_id: str, position: int, payload: JsonDict
) -> JsonDict:
    """The signal's arguments: one message envelope, as the SDK's workflow accepts it."""
    message = {
        "schema": MESSAGE_STREAM_SCHEMA,
        "stream_name": stream_name,
        "message_id": message_id,
        "position": position,
        "payload_envelope": {"codec": payload["codec"], "blob": payload["blob"]},
    }
    return dict(codec.encode([message]))


@router.post("/{workflow_id}/message-streams/{stream_name}/messages")
async def append_message(
    workflow_id: str,
    stream_name: str,
    body: AppendMessage,
    state: State,
    caller: OperatorCaller,
) -> JSONResponse:
    """Append a message to the current run's stream, once per `message_id` (202).

    A message id already in the stream with another payload is 409 `message_id_conflict`; a
    closed run takes no new message (409 `run_not_active`).
    """
    if not valid_stream_name(stream_name):
        raise ApiError(
            422,
            "validation_failed",
            f"invalid message stream name {stream_name[:130]!r}",
            errors={"stream_name": ["1-128 characters of A-Z a-z 0-9 . _ : -"]},
        )
    payload = body.input.model_dump() if body.input is not None else dict(codec.encode([]))
    appended = await state.store.append_message(
        namespace=caller.namespace,
        workflow_id=workflow_id,
        stream_name=stream_name,
        message_id=body.message_id,
        payload=payload,
        signal_name=MESSAGE_STREAM_SIGNAL,
        signal_arguments=lambda position: message_envelope(
            stream_name, body.message_id, position, payload
        ),
    )
    if not appended.appended and appended.payload != payload:
        raise ApiError(
            409,
            "message_id_conflict",
            f"message {body.message_id!r} is in stream {stream_name!r} with another payload",
            message_id=body.message_id,
            position=appended.position,
        )
    log.info(
        "message appended" if appended.appended else "message resent",
        namespace=caller.namespace,
        run_id=appended.run_id,
        workflow_id=workflow_id,
        stream_name=stream_name,
        position=appended.position,
    )
    receipt = MessageReceipt(
        workflow_id=workflow_id,
        run_id=appended.run_id,
        stream_name=stream_name,
        message_id=body.message_id,
        position=appended.position,
        outcome="message_appended" if appended.appended else "deduplicated",
    )
    return JSONResponse(receipt.model_dump(mode="json"), status_code=202)


def valid_stream_name(name: str) -> bool:
    """Whether a stream name is 1-128 characters of A-Z a-z 0-9 . _ : - (both stream kinds)."""
    allowed = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._:-")
    return 0 < len(name) <= 128 and all(character in allowed for character in name)
