"""Worker sessions in workflow code (W4): several queued steps on one worker's local resource.

    session = workflow.worker_session(
        "gpu-render", WorkerSessionOptions(queue="gpu-activities", requirements=["gpu:nvidia-l4"])
    )
    frames = await session.activity(render_frames, video_id)
    manifest = await session.activity(assemble_manifest, frames)

Each call schedules a queued activity carrying the session snapshot (`worker_session` of
`schedule_activity`); the store admits it only to a worker whose capabilities cover the
requirements and that holds (or may create, or reacquire) the session. The snapshot is part of
the command, so replay checks it like any other step.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar, Unpack, overload

from pydantic import ValidationError

from burrow.protocol import shapes
from burrow.workflow.activities import call_activity
from burrow.workflow.options import (
    ActivityCancellationPolicy,
    ActivityOptions,
    Duration,
    RetryPolicy,
)

R = TypeVar("R")
A1 = TypeVar("A1")
A2 = TypeVar("A2")
A3 = TypeVar("A3")
A4 = TypeVar("A4")
A5 = TypeVar("A5")
A6 = TypeVar("A6")


@dataclass(frozen=True, slots=True)
class WorkerSessionOptions:
    """How a worker session is routed, leased and bounded (W4; PROTOCOL.md 12 defaults).

    `queue` and `connection` route its activities (a call's own `queue` or `connection` wins;
    without either, the run's connection);
    `requirements` are capability strings the holding worker must have registered (W3);
    `lease_seconds` is how long the session stays held without a heartbeat, `ttl_seconds` its
    absolute lifetime (each 1 to `MAX_SESSION_SECONDS`, about 68 years: the store keeps 32-bit
    seconds); `max_concurrent_activities` bounds its leased attempts. A session that
    lost its lease or holder is reacquired by another capable worker unless
    `allow_reacquire_after_failure` is False (W5). Invalid values raise ValueError.
    """

    queue: str | None = None
    connection: str | None = None
    requirements: Sequence[str] = ()
    lease_seconds: int = 120
    ttl_seconds: int = 1800
    max_concurrent_activities: int = 1
    create_if_missing: bool = True
    allow_reacquire_after_failure: bool = True

    def snapshot(self, session_id: str) -> shapes.SessionSpec:
        """The `worker_session` object for `session_id`; ValueError naming what is invalid."""
        try:
            return shapes.SessionSpec(
                session_id=session_id,
                queue=self.queue,
                connection=self.connection,
                requirements=list(self.requirements),
                lease_seconds=self.lease_seconds,
                ttl_seconds=self.ttl_seconds,
                max_concurrent_activities=self.max_concurrent_activities,
                create_if_missing=self.create_if_missing,
                allow_reacquire_after_failure=self.allow_reacquire_after_failure,
            )
        except ValidationError as exc:
            reasons = "; ".join(
                f"{'.'.join(str(p) for p in error['loc'])}: {error['msg']}"
                for error in exc.errors()
            )
            raise ValueError(f"invalid worker session {session_id!r}: {reasons}") from None


class WorkerSession:
    """A handle on one worker session: its activities run on the worker holding it (W1)."""

    __slots__ = ("_snapshot", "options", "session_id")

    def __init__(self, session_id: str, options: WorkerSessionOptions) -> None:
        self.session_id = session_id
        self.options = options
        self._snapshot = options.snapshot(session_id)

    @property
    def snapshot(self) -> shapes.SessionSpec:
        """The `worker_session` object its activities carry."""
        return self._snapshot

    @overload
    async def activity(
        self, fn: Callable[[], Awaitable[R]], /, **options: Unpack[ActivityOptions]
    ) -> R: ...

    @overload
    async def activity(
        self, fn: Callable[[A1], Awaitable[R]], a1: A1, /, **options: Unpack[ActivityOptions]
    ) -> R: ...

    @overload
    async def activity(
        self,
        fn: Callable[[A1, A2], Awaitable[R]],
        a1: A1,
        a2: A2,
        /,
        **options: Unpack[ActivityOptions],
    ) -> R: ...

    @overload
    async def activity(
        self,
        fn: Callable[[A1, A2, A3], Awaitable[R]],
        a1: A1,
        a2: A2,
        a3: A3,
        /,
        **options: Unpack[ActivityOptions],
    ) -> R: ...

    @overload
    async def activity(
        self,
        fn: Callable[[A1, A2, A3, A4], Awaitable[R]],
        a1: A1,
        a2: A2,
        a3: A3,
        a4: A4,
        /,
        **options: Unpack[ActivityOptions],
    ) -> R: ...

    @overload
    async def activity(
        self,
        fn: Callable[[A1, A2, A3, A4, A5], Awaitable[R]],
        a1: A1,
        a2: A2,
        a3: A3,
        a4: A4,
        a5: A5,
        /,
        **options: Unpack[ActivityOptions],
    ) -> R: ...

    @overload
    async def activity(
        self,
        fn: Callable[[A1, A2, A3, A4, A5, A6], Awaitable[R]],
        a1: A1,
        a2: A2,
        a3: A3,
        a4: A4,
        a5: A5,
        a6: A6,
        /,
        **options: Unpack[ActivityOptions],
    ) -> R: ...

    @overload
    async def activity(self, fn: Callable[[], R], /, **options: Unpack[ActivityOptions]) -> R: ...

    @overload
    async def activity(
        self, fn: Callable[[A1], R], a1: A1, /, **options: Unpack[ActivityOptions]
    ) -> R: ...

    @overload
    async def activity(
        self, fn: Callable[[A1, A2], R], a1: A1, a2: A2, /, **options: Unpack[ActivityOptions]
    ) -> R: ...

    @overload
    async def activity(
        self,
        fn: Callable[[A1, A2, A3], R],
        a1: A1,
        a2: A2,
        a3: A3,
        /,
        **options: Unpack[ActivityOptions],
    ) -> R: ...

    @overload
    async def activity(
        self,
        fn: Callable[[A1, A2, A3, A4], R],
        a1: A1,
        a2: A2,
        a3: A3,
        a4: A4,
        /,
        **options: Unpack[ActivityOptions],
    ) -> R: ...

    @overload
    async def activity(
        self,
        fn: Callable[[A1, A2, A3, A4, A5], R],
        a1: A1,
        a2: A2,
        a3: A3,
        a4: A4,
        a5: A5,
        /,
        **options: Unpack[ActivityOptions],
    ) -> R: ...

    @overload
    async def activity(
        self,
        fn: Callable[[A1, A2, A3, A4, A5, A6], R],
        a1: A1,
        a2: A2,
        a3: A3,
        a4: A4,
        a5: A5,
        a6: A6,
        /,
        **options: Unpack[ActivityOptions],
    ) -> R: ...

    @overload
    async def activity(
        self, fn: str, /, *args: object, **options: Unpack[ActivityOptions]
    ) -> Any: ...
    async def activity(
        self,
        fn: Callable[..., object] | str,
        *args: object,
        queue: str | None = None,
        connection: str | None = None,
        retry_policy: RetryPolicy | None = None,
        start_to_close_timeout: Duration | None = None,
        schedule_to_close_timeout: Duration | None = None,
        schedule_to_start_timeout: Duration | None = None,
        heartbeat_timeout: Duration | None = None,
        cancellation_policy: ActivityCancellationPolicy = ActivityCancellationPolicy.TRY_CANCEL,
    ) -> object:
        """Run a queued activity in this session and return its result (W4).

        Arguments and options are those of `workflow.activity()`; `queue` and `connection`
        override the session's (M7). Each attempt keeps its own lease, retries and timeouts
        (W7), and a workflow cancellation reaches it through its heartbeats (W8).
        """
        return await call_activity(
            fn,
            args,
            queue=queue or self._snapshot.queue,
            connection=connection,
            retry_policy=retry_policy,
            start_to_close_timeout=start_to_close_timeout,
            schedule_to_close_timeout=schedule_to_close_timeout,
            schedule_to_start_timeout=schedule_to_start_timeout,
            heartbeat_timeout=heartbeat_timeout,
            worker_session=self._snapshot,
            cancellation_policy=cancellation_policy,
        )


def worker_session(session_id: str, options: WorkerSessionOptions | None = None) -> WorkerSession:
    """A handle whose `activity()` calls run in worker session `session_id` (W4).

    Nothing is recorded until its first activity is scheduled; the session itself is created
    when a capable worker is admitted to that activity (W5). Invalid options raise ValueError.
    """
    return WorkerSession(session_id, options or WorkerSessionOptions())
