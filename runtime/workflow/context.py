"""The seam between workflow code and the engine that runs it.

Authoring functions never import the engine: they find a `Runtime` through the running event
loop, where the engine installed itself with `install()`. `burrow.replay`'s `WorkflowInstance`
is the one implementation; a test may install another.
"""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Protocol, TypeVar

from burrow.errors import NotInWorkflowError
from burrow.protocol.events import WorkflowStarted
from burrow.protocol.shapes import ActivityCancellationPolicyName, RetrySpec, SessionSpec

T = TypeVar("T")

_RUNTIME_ATTR = "burrow_runtime"
"""The loop attribute an engine's runtime is installed under."""


class RunIdentity(Protocol):
    """The identity of the run workflow code belongs to."""

    @property
    def run_id(self) -> str:
        """The run id."""

    @property
    def workflow_id(self) -> str:
        """The workflow id, shared by the runs of one workflow."""

    @property
    def workflow_type(self) -> str:
        """The registered workflow name."""

    @property
    def namespace(self) -> str:
        """The namespace the run lives in."""

    @property
    def task_queue(self) -> str:
        """The queue its workflow tasks go to."""


class Runtime(Protocol):
    """What workflow code needs from the engine running it; every call is replay-safe."""

    @property
    def run(self) -> RunIdentity:
        """The run being executed."""

    @property
    def started(self) -> WorkflowStarted | None:
        """The run's `WorkflowStarted` event (parent, attempt, timeouts) once it was applied."""

    @property
    def now(self) -> datetime:
        """When the current activation's events were recorded."""

    @property
    def rng(self) -> random.Random:
        """The run's seeded generator."""

    @property
    def is_replaying(self) -> bool:
        """Whether the code re-runs steps already in history."""

    def schedule_activity(
        self,
        activity_type: str,
        args: Sequence[object],
        *,
        queue: str | None,
        retry_policy: RetrySpec,
        timeouts: Mapping[str, float | None],
        result_type: object,
        worker_session: SessionSpec | None = None,
        connection: str | None = None,
        cancellation_policy: ActivityCancellationPolicyName | None = None,
    ) -> asyncio.Future[object]:
        """A queued activity step; the future resolves to its result (a user payload)."""

    def cancel_activity(self, result: asyncio.Future[object], *, wait: bool) -> None:
        """Ask the queued activity whose result future is `result` to stop (once)."""

    def local_activity(
        self,
        activity_type: str,
        args: Sequence[object],
        *,
        retry_policy: RetrySpec,
        timeouts: Mapping[str, float | None],
        result_type: object,
    ) -> asyncio.Future[object]:
        """A local activity step (A3); the future resolves to its result (a user payload)."""

    def side_effect(self, fn: Callable[[], T]) -> T:
        """Run `fn` once and record its value; replays return the recorded value."""

    def uuid4(self) -> uuid.UUID:
        """A deterministic UUID."""

    def get_version(self, change_id: str, min_supported: int, max_supported: int) -> int:
        """The version this run uses for `change_id`."""

    def wait_condition(self, predicate: Callable[[], bool]) -> asyncio.Future[bool]:
        """A future that resolves once `predicate()` holds."""

    def start_child_workflow(
        self,
        workflow_type: str,
        args: Sequence[object],
        *,
        workflow_id: str | None,
        queue: str | None,
        connection: str | None,
        parent_close_policy: str,
        cancellation_policy: str,
        retry_policy: RetrySpec | None,
        execution_timeout: float | None,
        run_timeout: float | None,
        result_type: object,
        memo: Mapping[str, object] | None = None,
        search_attributes: Mapping[str, object] | None = None,
    ) -> tuple[int, str, asyncio.Future[object]]:
        """A child workflow step: its step number, the child's id and its result future."""

    def signal_child_workflow(
        self, child_seq: int, signal_name: str, args: Sequence[object]
    ) -> None:
        """A step that signals the child started at step `child_seq`."""

    def cancel_child_workflow(self, child_seq: int) -> None:
        """Ask the child started at step `child_seq` to cancel (once)."""

    @property
    def memo(self) -> dict[str, object]:
        """The run's memo as of this point of its code."""

    @property
    def search_attributes(self) -> dict[str, object]:
        """The run's custom search attributes as of this point of its code."""

    def upsert_memo(self, entries: Mapping[str, object]) -> None:
        """A step merging `entries` into the memo (None deletes a key)."""

    def upsert_search_attributes(self, attributes: Mapping[str, object]) -> None:
        """A step setting the named search attributes (None removes one)."""


class ContinueAsNewRequest(BaseException):
    """Raised by workflow.continue_as_new(); the engine ends the run and starts a new one.

    A BaseException, so a user's `except Exception` cannot swallow it.
    """

    def __init__(
        self, args: Sequence[object], workflow_type: str | None, queue: str | None
    ) -> None:
        super().__init__("continue as new")
        self.arguments = list(args)
        self.workflow_type = workflow_type
        self.queue = queue


def install(loop: asyncio.AbstractEventLoop, runtime: Runtime) -> None:
    """Make `runtime` what `current()` returns while `loop` runs (called by the engine)."""
    setattr(loop, _RUNTIME_ATTR, runtime)


def current() -> Runtime:
    """The runtime whose deterministic loop is running, or NotInWorkflowError."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        loop = None
    runtime: Runtime | None = getattr(loop, _RUNTIME_ATTR, None)
    if runtime is None:
        raise NotInWorkflowError(
            "this call only works inside workflow code (a @workflow.run method or its handlers)"
        )
    return runtime


def in_workflow() -> bool:
    """Whether the caller runs inside workflow code."""
    try:
        current()
    except NotInWorkflowError:
        return False
    return True
