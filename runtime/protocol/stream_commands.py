"""What a workflow's `record_side_effect` does to a run output stream (SDK workflow streams).

Re-exported by `burrow.protocol.commands`, whose `RecordSideEffect` carries a directive.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from burrow.protocol.shapes import JsonDict, WireModel


class WorkflowStreamItem(WireModel):
    """One item a workflow appends to a run output stream (SDK `WorkflowStreamAppendItem`)."""

    payload: JsonDict | None = None
    payload_reference: str | None = Field(default=None, min_length=1, max_length=2048)
    payload_codec: str | None = Field(default=None, min_length=1, max_length=64)
    idempotency_key: str | None = Field(default=None, min_length=1, max_length=255)
    item_type: str | None = Field(default=None, min_length=1, max_length=255)
    content_type: str | None = Field(default=None, min_length=1, max_length=255)

    @model_validator(mode="after")
    def _something(self) -> WorkflowStreamItem:
        if self.payload is None and self.payload_reference is None:
            raise ValueError("a stream item needs a payload or a payload_reference")
        return self


class WorkflowStreamDirective(WireModel):
    """What a `record_side_effect` does to a run output stream (SDK `ctx.*_workflow_stream`).

    `append` adds `items` (their idempotency keys derive from the command identity, so a task
    run again appends nothing twice); `close` and `error` end the stream.
    """

    operation: Literal["append", "close", "error"]
    stream_name: str = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9._:-]+$")
    command_identity: str | None = Field(default=None, max_length=255)
    command_ordinal: int | None = Field(default=None, ge=0)
    items: list[WorkflowStreamItem] = Field(default_factory=list, max_length=500)
    max_pending_items: int | None = Field(default=None, ge=1)
    error_reason: str | None = Field(default=None, min_length=1, max_length=2000)
    retention_seconds: int | None = Field(default=None, ge=1)

    @model_validator(mode="after")
    def _operation_fields(self) -> WorkflowStreamDirective:
        if (self.operation == "append") != bool(self.items):
            raise ValueError("an append carries items; a close or error carries none")
        if (self.operation == "error") != (self.error_reason is not None):
            raise ValueError("an error carries an error_reason; an append or close none")
        return self
