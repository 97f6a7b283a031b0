"""Worker-plane answers about a live claim: an activity lease renewed, a query claim observed.

Times are `WireTime`: the SDK (2.12.0) measures leases and deadlines only from UTC text with
six fractional digits, and refuses anything else.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, PlainSerializer


def _utc_micros(value: datetime) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


WireTime = Annotated[datetime, PlainSerializer(_utc_micros, return_type=str)]
"""A time the SDK measures a lease or a deadline by: UTC, six fractional digits, `Z`."""


class _Response(BaseModel):
    model_config = ConfigDict(frozen=True)


class ActivityLeaseRenewed(_Response):
    """A renewed activity lease with the original claim's identity, for the SDK to check.

    The SDK (2.12.0, `ActivityLeaseAuthority.acknowledge`) refuses a reply whose identity
    differs from the claim it holds, or that records a heartbeat; `lease_expires_at` minus
    `server_time` is the grant.
    """

    workflow_task_id: str
    workflow_instance_id: str
    workflow_run_id: str
    activity_execution_id: str
    activity_attempt_id: str
    attempt_number: int
    lease_owner: str
    lease_renewed: Literal[True] = True
    heartbeat_recorded: Literal[False] = False
    can_continue: bool
    cancel_requested: bool
    reason: str | None = None
    server_time: WireTime
    lease_expires_at: WireTime
    last_heartbeat_at: WireTime | None = None
    heartbeat_deadline_at: WireTime | None = None


class QueryTaskObserved(_Response):
    """A live query claim observed by its holder: the original timing, nothing renewed.

    The SDK (2.12.0, `QueryTaskAuthority.confirm`) requires the claim's identity and times
    exactly as the poll gave them, `query_task_status` "leased" and `can_continue`.
    """

    query_task_id: str
    query_task_attempt: int
    lease_owner: str
    query_task_status: Literal["leased"] = "leased"
    can_continue: Literal[True] = True
    reason: None = None
    lease_expires_at: WireTime
    query_admitted_at: WireTime
    query_deadline_at: WireTime
    server_time: WireTime
