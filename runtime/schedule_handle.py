"""`ScheduleHandle`: the client's grip on one schedule (issue 30).

`Client.create_schedule` builds the spec, action and policies (refusing bad ones before
anything is written) and returns a handle; the handle's methods are one store transaction each.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Required, TypedDict

from burrow import payloads
from burrow.protocol.schedules import (
    OverlapPolicy,
    ScheduleAction,
    SchedulePolicies,
    ScheduleSpec,
)
from burrow.store.schedule_models import (
    NewSchedule,
    ScheduleDescription,
    ScheduleFire,
    ScheduleSummary,
    ScheduleUpdate,
)
from burrow.workflow.definition import definition_of_run, get_definition
from burrow.workflow.options import Duration, timeout_seconds, to_seconds

if TYPE_CHECKING:
    from burrow.client import Client

__all__ = ["ScheduleHandle", "ScheduleOptions", "new_schedule", "schedule_action", "whole_seconds"]


class ScheduleOptions(TypedDict, total=False):
    """`Client.create_schedule`'s options (issue 30)."""

    spec: Required[ScheduleSpec]
    task_queue: Required[str]
    overlap_policy: OverlapPolicy
    """What a fire does while the previous run is open (default `skip`)."""
    catchup_window: Duration
    """Fires missed longer than this after downtime are counted, not started (default a year)."""
    jitter: Duration
    """Each fire starts up to this much late (whole seconds)."""
    max_runs: int
    paused: bool
    note: str
    memo: dict[str, Any]
    connection: str
    execution_timeout: Duration
    run_timeout: Duration


def whole_seconds(value: Duration | None, *, what: str) -> int | None:
    """A duration option in whole seconds (None stays None)."""
    if value is None:
        return None
    seconds = to_seconds(value, what)
    if seconds != int(seconds):
        raise ValueError(f"{what} must be whole seconds, got {seconds}")
    return int(seconds)


def schedule_action(
    workflow: Callable[..., Awaitable[object]] | type | str,
    args: Sequence[object],
    *,
    task_queue: str,
    limit: int,
    connection: str = "default",
    execution_timeout: Duration | None = None,
    run_timeout: Duration | None = None,
) -> ScheduleAction:
    """The start a fire makes: the workflow's type and its encoded input, checked as a start is.

    Input that does not fit a run method given by its function or class is refused here
    (InvalidArgumentsError), before anything is written.
    """
    arguments = payloads.encode_args(args, limit=limit, what="schedule input")
    if isinstance(workflow, str):
        workflow_type = workflow
    else:
        definition = (
            get_definition(workflow) if isinstance(workflow, type) else definition_of_run(workflow)
        )
        workflow_type = definition.name
        run_fn = getattr(definition.cls, definition.run_method)
        label = f"{definition.name}.{definition.run_method}"
        payloads.bind_args(arguments, run_fn, handler=label, skip_self=True)
    return ScheduleAction(
        workflow_type=workflow_type,
        task_queue=task_queue,
        input=dict(arguments),
        connection=connection,
        **timeout_seconds(
            "schedule action",
            execution_timeout_seconds=execution_timeout,
            run_timeout_seconds=run_timeout,
        ),
    )


def new_schedule(
    namespace: str,
    schedule_id: str,
    workflow: Callable[..., Awaitable[object]] | type | str,
    args: Sequence[object],
    *,
    limit: int,
    options: ScheduleOptions,
) -> NewSchedule:
    """The schedule `Client.create_schedule` asks for, every part checked.

    Raises:
        InvalidScheduleSpec: a spec or policy that cannot work.
        InvalidArgumentsError: input that does not fit the run method.
    """
    action = schedule_action(
        workflow,
        args,
        task_queue=options["task_queue"],
        limit=limit,
        connection=options.get("connection", "default"),
        execution_timeout=options.get("execution_timeout"),
        run_timeout=options.get("run_timeout"),
    )
    policies: dict[str, object] = {
        "overlap_policy": options.get("overlap_policy", OverlapPolicy.SKIP),
        "max_runs": options.get("max_runs"),
        "jitter_seconds": whole_seconds(options.get("jitter"), what="jitter") or 0,
    }
    window = whole_seconds(options.get("catchup_window"), what="catchup_window")
    if window is not None:
        policies["catchup_window_seconds"] = window
    return NewSchedule(
        namespace=namespace,
        schedule_id=schedule_id,
        spec=options["spec"],
        action=action,
        policies=SchedulePolicies.model_validate(policies),
        paused=options.get("paused", False),
        note=options.get("note"),
        memo=options.get("memo"),
    )


class ScheduleHandle:
    """One schedule of the client's namespace, by id (issue 30)."""

    def __init__(self, client: Client, schedule_id: str) -> None:
        self.client = client
        self.schedule_id = schedule_id

    @property
    def _ids(self) -> dict[str, str]:
        return {"namespace": self.client.namespace, "schedule_id": self.schedule_id}

    def __repr__(self) -> str:
        return f"ScheduleHandle({self.schedule_id!r})"

    async def describe(self, *, upcoming: int = 5, recent: int = 10) -> ScheduleDescription:
        """The schedule's state and counters, its next `upcoming` fire times and latest fires."""
        return await self.client.store.describe_schedule(
            **self._ids, upcoming=upcoming, recent=recent
        )

    async def pause(self, note: str | None = None) -> ScheduleSummary:
        """Stop firing until `resume()`; `note` says why (shown by `describe`)."""
        return await self.client.store.pause_schedule(**self._ids, note=note)

    async def resume(self, note: str | None = None) -> ScheduleSummary:
        """Fire again from the next fire time after now (times passed while paused are not)."""
        return await self.client.store.resume_schedule(**self._ids, note=note)

    async def trigger(self, *, overlap_policy: OverlapPolicy | None = None) -> ScheduleFire:
        """Fire now; `overlap_policy` overrides the schedule's for this fire only."""
        return await self.client.store.trigger_schedule(**self._ids, overlap=overlap_policy)

    async def backfill(
        self, start: datetime, end: datetime, *, overlap_policy: OverlapPolicy | None = None
    ) -> list[ScheduleFire]:
        """Fire each fire time in `[start, end)` not fired before (at most 1,000 of them)."""
        return await self.client.store.backfill_schedule(
            **self._ids, start=start, end=end, overlap=overlap_policy
        )

    async def update(
        self,
        *,
        spec: ScheduleSpec | None = None,
        action: ScheduleAction | None = None,
        overlap_policy: OverlapPolicy | None = None,
        catchup_window: Duration | None = None,
        jitter: Duration | None = None,
        max_runs: int | None = None,
        memo: dict[str, Any] | None = None,
        note: str | None = None,
    ) -> ScheduleSummary:
        """Change the fields given (`schedule_action(...)` builds an action)."""
        update = ScheduleUpdate(
            spec=spec,
            action=action,
            overlap_policy=overlap_policy,
            catchup_window_seconds=whole_seconds(catchup_window, what="catchup_window"),
            jitter_seconds=whole_seconds(jitter, what="jitter"),
            max_runs=max_runs,
            memo=memo,
            note=note,
        )
        return await self.client.store.update_schedule(**self._ids, update=update)

    async def delete(self) -> None:
        """Delete the schedule; the runs it started go on."""
        await self.client.store.delete_schedule(**self._ids)
