"""Client: start workflows and talk to them (signal, query, update, cancel, result).

Calls take a workflow's methods themselves (`Checkout.run`, `Checkout.status`), so a type checker
matches arguments and results against their signatures; names (str) still work and give `Any`.
Typed calls take up to four positional arguments: pass more through a dataclass, or use names.
"""

from __future__ import annotations

import math
import os
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from datetime import timedelta
from types import TracebackType
from typing import Any, TypeVar, Unpack, overload

from burrow import payloads
from burrow.activity_handle import ActivityHandle as ActivityHandle
from burrow.config import Settings
from burrow.errors import (
    UnknownWorkflowType,
)
from burrow.handle import WorkflowHandle as WorkflowHandle  # re-exported: it was defined here
from burrow.handle import id_or_new
from burrow.list_query_client import ListQueryMethods
from burrow.namespace_client import NamespaceMethods
from burrow.outcomes import OutcomeWaiter
from burrow.schedule_handle import ScheduleHandle, ScheduleOptions, new_schedule
from burrow.search_attribute_client import SearchAttributeMethods
from burrow.start_options import ActivityStartOptions, StartOptions, workflow_timeouts
from burrow.store import Store
from burrow.store.models import (
    IdReusePolicy,
    RunInfo,
    RunStatus,
)
from burrow.store.schedule_models import ScheduleStatus, ScheduleSummary
from burrow.store.standalone import NewStandaloneActivity, StandaloneActivityInfo
from burrow.store.workflow_views import RunFilter
from burrow.wake_link import WakeLink
from burrow.workflow import fingerprints
from burrow.workflow.activities import activity_type_of
from burrow.workflow.definition import (
    WorkflowDefinition,
    definition_of_run,
    get_definition,
)
from burrow.workflow.options import Duration, RetryPolicy, timeout_seconds
from burrow.workflow.visibility import SearchAttributeValue

LIVE_WORKER_SECONDS = 60
WORKER_TYPES_CACHE_SECONDS = 1.0
"""How long a queue's live worker types read by `start_workflow` answer later starts."""

R = TypeVar("R")
S = TypeVar("S")
A1 = TypeVar("A1")
A2 = TypeVar("A2")
A3 = TypeVar("A3")
A4 = TypeVar("A4")


class Client(SearchAttributeMethods, ListQueryMethods, NamespaceMethods):
    """A connection to one Burrow database and namespace."""

    def __init__(
        self,
        store: Store,
        *,
        settings: Settings,
        owns_store: bool = False,
        wakes: WakeLink | None = None,
    ) -> None:
        self.store = store
        self.settings = settings
        self.namespace = settings.namespace
        self._owns_store = owns_store
        self._wakes = wakes
        # task queue -> (when read, the types its live workers declare; None: no live worker)
        self._live_types: dict[str, tuple[float, frozenset[str] | None]] = {}
        self.runs = OutcomeWaiter(
            store,
            fallback_seconds=settings.wakes.result_fallback_seconds,
            wakes_flowing=lambda: wakes is not None and wakes.healthy,
        )
        if wakes is not None:
            self.runs.attach(
                wakes.listen_for_run_changes(
                    on_change=self.runs.changed, on_resync=self.runs.resync
                )
            )

    @classmethod
    async def connect(
        cls,
        database_url: str | None = None,
        *,
        namespace: str | None = None,
        settings: Settings | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> Client:
        """Connect with defaults from BURROW_* environment variables."""
        if settings is None:
            final = Settings.load(environ, database_url=database_url, namespace=namespace)
        else:
            given = {"database_url": database_url, "namespace": namespace}
            final = settings.model_copy(update={k: v for k, v in given.items() if v is not None})
        wakes = None
        if final.wakes.enabled:
            # Starts, signals and cancels wake workers at once; without a broker they poll.
            wakes = WakeLink(final, name=f"burrow-client:{os.getpid()}")
            await wakes.start()
        store = Store.connect(
            final.database_url,
            pool_size=5,
            max_payload_bytes=final.max_payload_bytes,
            after_commit=None if wakes is None else wakes.publish_ready,
        )
        return cls(store, settings=final, owns_store=True, wakes=wakes)

    async def close(self) -> None:
        """Release connections."""
        await self.runs.close()
        if self._wakes is not None:
            await self._wakes.close()
        if self._owns_store:
            await self.store.close()

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    @overload
    async def start_workflow(
        self, workflow: str | type, /, *args: object, **options: Unpack[StartOptions]
    ) -> WorkflowHandle[Any]: ...

    @overload
    async def start_workflow(
        self, workflow: Callable[[S], Awaitable[R]], /, **options: Unpack[StartOptions]
    ) -> WorkflowHandle[R]: ...

    @overload
    async def start_workflow(
        self, workflow: Callable[[S, A1], Awaitable[R]], a1: A1, /, **options: Unpack[StartOptions]
    ) -> WorkflowHandle[R]: ...

    @overload
    async def start_workflow(
        self,
        workflow: Callable[[S, A1, A2], Awaitable[R]],
        a1: A1,
        a2: A2,
        /,
        **options: Unpack[StartOptions],
    ) -> WorkflowHandle[R]: ...

    @overload
    async def start_workflow(
        self,
        workflow: Callable[[S, A1, A2, A3], Awaitable[R]],
        a1: A1,
        a2: A2,
        a3: A3,
        /,
        **options: Unpack[StartOptions],
    ) -> WorkflowHandle[R]: ...

    @overload
    async def start_workflow(
        self,
        workflow: Callable[[S, A1, A2, A3, A4], Awaitable[R]],
        a1: A1,
        a2: A2,
        a3: A3,
        a4: A4,
        /,
        **options: Unpack[StartOptions],
    ) -> WorkflowHandle[R]: ...

    async def start_workflow(
        self,
        workflow: Callable[..., Awaitable[object]] | type | str,
        *args: object,
        id: str | None = None,
        task_queue: str,
        check_workers: bool = True,
        id_reuse_policy: IdReusePolicy = IdReusePolicy.ALLOW_DUPLICATE,
        build_id: str | None = None,
        connection: str = "default",
        execution_timeout: Duration | None = None,
        run_timeout: Duration | None = None,
        retry_policy: RetryPolicy | None = None,
        memo: Mapping[str, object] | None = None,
        search_attributes: Mapping[str, SearchAttributeValue] | None = None,
    ) -> WorkflowHandle[Any]:
        """Start a run of a workflow given by its run method, its class or its type name.

        `start_workflow(Checkout.run, "order-1", ...)` returns a `WorkflowHandle[str]` when
        `run` returns `str`; a class or a name gives `WorkflowHandle[Any]`.

        `id_reuse_policy` says what runs the id already has do to the start: by default
        (`ALLOW_DUPLICATE`) a running run refuses it and closed ones do not; `REJECT_DUPLICATE`
        refuses an id that ever had a run; `USE_EXISTING` returns a handle on the running run
        instead of refusing. It is applied in the statement that inserts the run, so of two
        concurrent starts of one id at most one creates a run.

        Raises WorkflowAlreadyStartedError when the policy refuses, and PayloadError for bad input:
        InvalidArgumentsError, before anything is written, for input that does not fit a run
        method given by its function or class (by name, such a run fails once with an
        `InvalidWorkflowInput` error). With `check_workers`, a type that live workers on the
        queue do not declare is refused (UnknownWorkflowType) before anything is written; with
        no live worker it is accepted. An empty or blank `id` raises ValueError (None gives a
        new random id); one holding a NUL character raises UnstorableText.

        `build_id` pins the run to workers of that build (M7): until one is live the run stays
        ready and shows as compatibility-blocked. The run records the fingerprint of the class
        given (or, by name, the one the queue's active worker heard from last registered for
        the type) (S8). `connection` puts the run on that connection (M7): only workers serving
        it claim its workflow tasks, and its activities go there unless they name another.

        `execution_timeout` bounds the whole chain of runs (continued as new and retried ones
        too), `run_timeout` each run (a timedelta or seconds): past either, the run is closed
        timed out (`WorkflowTimedOutError` from `result()`). `retry_policy` retries a failed run
        (not a cancelled or terminated one) as a new run of the same id, within the execution
        timeout; a run timeout is retried too. A timeout that is not positive, or a run timeout
        longer than the execution timeout, raises ValueError (TypeError for one that is not a
        duration) before anything is written.

        `memo` (a JSON object, at most 256 KiB) and `search_attributes` (registered in the
        namespace, each value of its type) are the run's visibility metadata: `describe()` and
        lists show them, list queries filter on the attributes, and workflow code may upsert
        both. Bad ones raise PayloadError, PayloadTooLarge or InvalidSearchAttribute before
        anything is written.
        """
        timeouts = workflow_timeouts(execution_timeout, run_timeout)
        definition: WorkflowDefinition | None = None
        if isinstance(workflow, str):
            workflow_type = workflow
        else:
            if isinstance(workflow, type):
                definition = get_definition(workflow)
            else:
                definition = definition_of_run(workflow)
            workflow_type = definition.name
        arguments = payloads.encode_args(
            args, limit=self.settings.max_payload_bytes, what="workflow input"
        )
        if definition is not None:
            # Known run method: input that would fail the run is refused before it is written.
            run_fn = getattr(definition.cls, definition.run_method)
            label = f"{definition.name}.{definition.run_method}"
            payloads.bind_args(arguments, run_fn, handler=label, skip_self=True)
        await self._check_namespace()
        if check_workers:
            await self._check_workflow_type(workflow_type, task_queue)
        notify_queue = self.runs.notify_queue()
        new_run_id = str(uuid.uuid4())
        run = await self.store.start_workflow(
            namespace=self.namespace,
            workflow_id=id_or_new(id, what="workflow id"),
            workflow_type=workflow_type,
            task_queue=task_queue,
            input=dict(arguments),
            notify_queue=notify_queue,
            id_reuse_policy=IdReusePolicy(id_reuse_policy),
            run_id=new_run_id,
            build_id=build_id,
            connection=connection,
            execution_timeout_seconds=timeouts[0],
            run_timeout_seconds=timeouts[1],
            retry_policy=None if retry_policy is None else dict(retry_policy.to_wire()),
            memo=None if memo is None else dict(memo),
            search_attributes=search_attributes,
            workflow_definition_fingerprint=None
            if definition is None
            else fingerprints.fingerprint(definition),
        )
        # A running run returned under USE_EXISTING was started by someone else: its changes
        # are not published to this client's queue.
        created = run.run_id == new_run_id
        return WorkflowHandle(
            self,
            run.workflow_id,
            run_id=run.run_id,
            definition=definition,
            _started_at=time.monotonic() if created else None,
            _notify_queue=notify_queue if created else None,
        )

    @overload
    async def start_activity(
        self, activity: str, /, *args: object, **options: Unpack[ActivityStartOptions]
    ) -> ActivityHandle[Any]: ...

    @overload
    async def start_activity(
        self, activity: Callable[[], Awaitable[R]], /, **options: Unpack[ActivityStartOptions]
    ) -> ActivityHandle[R]: ...

    @overload
    async def start_activity(
        self,
        activity: Callable[[A1], Awaitable[R]],
        a1: A1,
        /,
        **options: Unpack[ActivityStartOptions],
    ) -> ActivityHandle[R]: ...

    @overload
    async def start_activity(
        self,
        activity: Callable[[A1, A2], Awaitable[R]],
        a1: A1,
        a2: A2,
        /,
        **options: Unpack[ActivityStartOptions],
    ) -> ActivityHandle[R]: ...

    @overload
    async def start_activity(
        self,
        activity: Callable[[A1, A2, A3], Awaitable[R]],
        a1: A1,
        a2: A2,
        a3: A3,
        /,
        **options: Unpack[ActivityStartOptions],
    ) -> ActivityHandle[R]: ...

    @overload
    async def start_activity(
        self, activity: Callable[[], R], /, **options: Unpack[ActivityStartOptions]
    ) -> ActivityHandle[R]: ...

    @overload
    async def start_activity(
        self, activity: Callable[[A1], R], a1: A1, /, **options: Unpack[ActivityStartOptions]
    ) -> ActivityHandle[R]: ...

    @overload
    async def start_activity(
        self,
        activity: Callable[[A1, A2], R],
        a1: A1,
        a2: A2,
        /,
        **options: Unpack[ActivityStartOptions],
    ) -> ActivityHandle[R]: ...

    @overload
    async def start_activity(
        self,
        activity: Callable[[A1, A2, A3], R],
        a1: A1,
        a2: A2,
        a3: A3,
        /,
        **options: Unpack[ActivityStartOptions],
    ) -> ActivityHandle[R]: ...

    async def start_activity(
        self,
        activity: Callable[..., object] | str,
        /,
        *args: object,
        task_queue: str,
        id: str | None = None,
        connection: str = "default",
        retry_policy: RetryPolicy | None = None,
        start_to_close_timeout: Duration | None = None,
        schedule_to_close_timeout: Duration | None = None,
        schedule_to_start_timeout: Duration | None = None,
        heartbeat_timeout: Duration | None = None,
        activity_class: str | None = None,
        business_key: str | None = None,
    ) -> ActivityHandle[Any]:
        """Start a standalone activity: an `@activity.defn` function run without a workflow.

        Ordinary activity workers of `task_queue` run it, under `retry_policy` (default: retry
        without limit) and the timeouts, as they run an activity a workflow schedules;
        `start_activity(send_invoice, "order-1", task_queue="billing")` returns an
        `ActivityHandle[R]` when `send_invoice` returns `R` (an activity type name gives
        `ActivityHandle[Any]`). Up to three positional arguments are typed: pass more through a
        dataclass, or use the name. `activity_class` and `business_key` are labels a listing
        shows. The activity id (`id`, or a new random one) shares the namespace's workflow ids
        and is never reused.

        Raises WorkflowAlreadyStartedError when a run already has the id, ValueError or
        TypeError for an invalid timeout, and PayloadError for input that does not encode or
        (given the function) does not fit its parameters: before anything is written.
        """
        name, result_type = activity_type_of(activity)
        timeouts = timeout_seconds(
            f"start_activity({name!r})",
            start_to_close_timeout=start_to_close_timeout,
            schedule_to_close_timeout=schedule_to_close_timeout,
            schedule_to_start_timeout=schedule_to_start_timeout,
            heartbeat_timeout=heartbeat_timeout,
        )
        arguments = payloads.encode_args(
            args, limit=self.settings.max_payload_bytes, what="activity input"
        )
        if not isinstance(activity, str):
            payloads.bind_args(arguments, activity, handler=f"activity {name!r}", skip_self=False)
        await self._check_namespace()
        notify_queue = self.runs.notify_queue()
        started = await self.store.start_activity(
            NewStandaloneActivity(
                namespace=self.namespace,
                activity_id=id_or_new(id, what="activity id"),
                activity_type=name,
                task_queue=task_queue,
                arguments=dict(arguments),
                retry_policy=dict((retry_policy or RetryPolicy()).to_wire()),
                activity_class=activity_class,
                business_key=business_key,
                connection=connection,
                schedule_to_start_seconds=timeouts["schedule_to_start_timeout"],
                start_to_close_seconds=timeouts["start_to_close_timeout"],
                schedule_to_close_seconds=timeouts["schedule_to_close_timeout"],
                heartbeat_seconds=timeouts["heartbeat_timeout"],
                notify_queue=notify_queue,
            )
        )
        return ActivityHandle(
            self,
            started.activity_id,
            run_id=started.run_id,
            activity_type=name,
            result_hint=result_type,
            _started_at=time.monotonic(),
            _notify_queue=notify_queue,
        )

    def get_activity_handle(self, activity_id: str) -> ActivityHandle[Any]:
        """A handle on an existing standalone activity (its latest run of that id)."""
        return ActivityHandle(self, activity_id)

    async def list_activities(
        self, *, status: RunStatus | None = None, limit: int = 100
    ) -> list[StandaloneActivityInfo]:
        """Recent standalone activities in this namespace (of one host run status if given)."""
        page = await self.store.list_activities(
            namespace=self.namespace, statuses=None if status is None else [status], limit=limit
        )
        return page.activities

    async def _check_workflow_type(self, workflow_type: str, task_queue: str) -> None:
        """Refuse a type live workers on the queue do not declare.

        An acceptance is reused for WORKER_TYPES_CACHE_SECONDS, so a stream of starts costs
        one read per second, not one transaction each; a refusal is always read afresh (a
        worker that declares the type may have just started).
        """
        read_at, types = self._live_types.get(task_queue, (-math.inf, None))
        fresh = time.monotonic() - read_at < WORKER_TYPES_CACHE_SECONDS
        if fresh and (types is None or workflow_type in types):
            return
        live = await self.store.live_workers(
            namespace=self.namespace,
            task_queue=task_queue,
            stale_after=timedelta(seconds=LIVE_WORKER_SECONDS),
        )
        declared = frozenset(t for _, types_of, _ in live for t in types_of) if live else None
        self._live_types[task_queue] = (time.monotonic(), declared)
        if declared is not None and workflow_type not in declared:
            raise UnknownWorkflowType(
                workflow_type=workflow_type,
                task_queue=task_queue,
                detail=f"live workers there declare {sorted(declared)}",
            )

    def get_handle(self, workflow_id: str, *, run_id: str | None = None) -> WorkflowHandle[Any]:
        """A handle on an existing workflow (latest run unless run_id is given)."""
        return WorkflowHandle(self, workflow_id, run_id=run_id)

    async def create_schedule(
        self,
        schedule_id: str,
        workflow: Callable[..., Awaitable[object]] | type | str,
        /,
        *args: object,
        **options: Unpack[ScheduleOptions],
    ) -> ScheduleHandle:
        """Create a schedule that starts `workflow(*args)` at each fire time of `spec` (issue 30).

        Each fire time starts at most one run, with workflow id `<schedule_id>-<fire time>`
        (RFC 3339, UTC, seconds), fired by the repair pass of a worker or `burrow matching`.
        Raises InvalidScheduleSpec, InvalidArgumentsError and ScheduleAlreadyExists before
        anything is written. The options are `ScheduleOptions`.
        """
        new = new_schedule(
            self.namespace,
            id_or_new(schedule_id, what="schedule id"),
            workflow,
            args,
            limit=self.settings.max_payload_bytes,
            options=options,
        )
        await self.store.create_schedule(new)
        return ScheduleHandle(self, new.schedule_id)

    def get_schedule_handle(self, schedule_id: str) -> ScheduleHandle:
        """A handle on an existing schedule of this namespace."""
        return ScheduleHandle(self, schedule_id)

    async def list_schedules(
        self,
        *,
        status: ScheduleStatus | None = None,
        workflow_type: str | None = None,
        limit: int = 100,
        after: str | None = None,
    ) -> list[ScheduleSummary]:
        """This namespace's schedules by id; `after` (a schedule id) gives the next page."""
        return await self.store.list_schedules(
            namespace=self.namespace,
            status=status,
            workflow_type=workflow_type,
            after_schedule_id=after,
            limit=limit,
        )

    async def list_workflows(
        self,
        *,
        query: str | None = None,
        status: str | None = None,
        limit: int = 100,
        archived: bool | None = None,
    ) -> list[RunInfo]:
        """Recent runs in this namespace, newest first, or the first `limit` a list query selects.

        `query` is the list query language (`WorkflowType = 'Checkout' AND StartTime > ...
        ORDER BY ...`); `list_workflows_page` and `iter_workflows` page through all of them.
        Archived runs are listed with the others, as `GET /api/workflows` lists them;
        `archived=True` keeps only them, `archived=False` leaves them out (as its `archived`).
        """
        if query is None:
            return await self.store.list_workflows(
                namespace=self.namespace, status=status, limit=limit, archived=archived
            )
        wanted = RunFilter((RunStatus(status),) if status else (), archived=archived)
        page = await self.store.list_runs_page(
            namespace=self.namespace,
            wanted=wanted,
            limit=limit,
            query=await self.checked_query(query),
        )
        return [listed.run for listed in page.runs]
