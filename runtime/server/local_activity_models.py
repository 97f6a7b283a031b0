"""Typed bodies of the prepared local activity calls (PROTOCOL.md 5.6; SDK 2.12.0, 1.20).

A call's body names the workflow claim (lease owner, attempt) and what the SDK sends for the
operation; the local call itself is the SDK's `descriptor` (its `PreparedLocalActivityCall`),
which the store records as the execution's `LocalActivitySpec`.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from burrow.codec import Payload
from burrow.protocol.shapes import JsonDict, JsonValue, LocalActivitySpec, RetrySpec
from burrow.server.api_errors import ApiError
from burrow.server.worker_models import Envelope, WorkflowTaskFence
from burrow.store import prepared_admissions as prepared

MAX_SEQUENCE = 2**31 - 1
MAX_GROUP = 100
"""The most members the SDK puts in one prepared group."""
_IDENTITY = Field(min_length=1, max_length=255)


class LocalRetryPolicy(BaseModel):
    """A local call's retry policy, as the SDK canonicalizes it (at most 100 attempts)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_attempts: int | None = Field(default=None, ge=1, le=100)
    backoff_seconds: list[int] | None = Field(default=None, max_length=99)
    non_retryable_error_types: list[str] | None = Field(default=None, max_length=100)


class CleanupProof(BaseModel):
    """A local call's `cancellation_cleanup`: the request and delivery its cleanup runs under."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    request_id: str = _IDENTITY
    delivery_history_event_id: str = _IDENTITY
    scope_id: str | None = None


class LocalDescriptor(BaseModel):
    """The local call a `prepare` or `recover` names (the SDK's `descriptor`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: Literal["record_local_activity"]
    activity_type: str = _IDENTITY
    execution_mode: Literal["local"] = "local"
    arguments: Envelope
    payload_codec: str | None = None
    retry_policy: LocalRetryPolicy | None = None
    start_to_close_timeout: float | None = None
    schedule_to_close_timeout: float | None = None
    heartbeat_timeout: float | None = None
    cancellation_policy: str | None = None
    cancellation_cleanup: CleanupProof | None = None
    cancellation_scope_id: str | None = None
    parallel_group_id: str | None = None
    parallel_group_kind: str | None = None
    parallel_group_base_sequence: int | None = Field(default=None, ge=1, le=MAX_SEQUENCE)
    parallel_group_size: int | None = Field(default=None, ge=1, le=MAX_GROUP)
    parallel_group_index: int | None = Field(default=None, ge=0, lt=MAX_GROUP)
    parallel_group_path: list[JsonDict] | None = Field(default=None, min_length=1, max_length=1)

    def cleanup(self) -> prepared.CleanupProof | None:
        """The cancellation cleanup the call runs in, if any."""
        proof = self.cancellation_cleanup
        if proof is None:
            return None
        return prepared.CleanupProof(proof.request_id, proof.delivery_history_event_id)

    def group(self) -> tuple[int, int] | None:
        """The parallel group the call names (its base step and size), if any."""
        base, size = self.parallel_group_base_sequence, self.parallel_group_size
        return None if base is None or size is None else (base, size)

    def spec(self) -> LocalActivitySpec:
        """The execution's snapshot: 422 when its timeouts contradict, 409 when not installed.

        Explicit cancellation policies and scope authority are not installed.
        """
        scoped = self.cancellation_cleanup is not None and self.cancellation_cleanup.scope_id
        for name in ("cancellation_policy", "cancellation_scope_id"):
            if getattr(self, name) is not None or (name == "cancellation_scope_id" and scoped):
                raise ApiError(
                    409,
                    "worker_capability_not_supported",
                    f"prepared local calls with {name} are not installed",
                    capability="prepared_local_activity_cancellation_policies",
                    field=name,
                )
        arguments: Payload = {"codec": self.arguments.codec, "blob": self.arguments.blob}
        policy = RetrySpec() if self.retry_policy is None else self._retry(self.retry_policy)
        try:
            return LocalActivitySpec(
                activity_type=self.activity_type,
                arguments=arguments,
                retry_policy=policy,
                start_to_close_timeout=self.start_to_close_timeout,
                schedule_to_close_timeout=self.schedule_to_close_timeout,
                heartbeat_timeout=self.heartbeat_timeout,
            )
        except ValidationError as exc:
            raise ApiError(422, "validation_failed", f"invalid local call: {exc}") from exc

    @staticmethod
    def _retry(policy: LocalRetryPolicy) -> RetrySpec:
        return RetrySpec(
            max_attempts=policy.max_attempts,
            backoff_seconds=None if policy.backoff_seconds is None else policy.backoff_seconds,
            non_retryable_error_types=policy.non_retryable_error_types,
        )


class GroupMember(LocalDescriptor):
    """One member of `checkpoint-group`: a local call and its place in the group."""

    type: Literal["prepare_local_activity"]  # type: ignore[assignment]


class Checkpoint(WorkflowTaskFence):
    """`POST .../local-activities/checkpoint` and `checkpoint-group`."""

    checkpoint_id: str = _IDENTITY
    start_sequence: int = Field(ge=1, le=MAX_SEQUENCE)
    commands: list[JsonDict] = Field(max_length=1000)


class Prepare(WorkflowTaskFence):
    """`POST .../local-activities/prepare`: start the next attempt of a local step."""

    sequence: int = Field(ge=1, le=MAX_SEQUENCE)
    worker_attempt_id: str = _IDENTITY
    descriptor: LocalDescriptor


class Recover(WorkflowTaskFence):
    """`POST .../local-activities/recover`: close the attempt a lost claim left open."""

    sequence: int = Field(ge=1, le=MAX_SEQUENCE)
    descriptor: LocalDescriptor


class Control(WorkflowTaskFence):
    """`POST .../local-activities/{attemptId}/control`: may the attempt go on."""

    renew_lease: bool = True


class Heartbeat(WorkflowTaskFence):
    """`POST .../local-activities/{attemptId}/heartbeat`: the callback's application heartbeat."""

    progress: dict[str, JsonValue] = Field(default_factory=dict)


class OutcomeReport(BaseModel):
    """What the attempt's callback did: `completed` with its result, or `failed`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    outcome: Literal["completed", "failed"]
    result: Envelope | None = None
    payload_codec: str | None = None
    message: str | None = None
    exception_type: str | None = None
    non_retryable: bool = False


class Outcome(WorkflowTaskFence):
    """`POST .../local-activities/{attemptId}/outcome`."""

    report: OutcomeReport


class AcknowledgeCancellation(WorkflowTaskFence):
    """`POST .../local-activities/{attemptId}/acknowledge-cancellation`."""

    request_id: str = _IDENTITY
