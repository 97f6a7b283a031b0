"""`burrow worker MODULE:ATTR`: serve an App's workflows and activities, drain on a signal."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import importlib
import os
import signal
import sys
from typing import Annotated

import typer

from burrow.app import App
from burrow.cli import output
from burrow.cli.options import (
    DatabaseUrlOption,
    LogJsonOption,
    LogLevel,
    LogLevelOption,
    NamespaceOption,
    WorkerAmqpUrlOption,
    build_settings,
)
from burrow.config import Settings

TargetArgument = Annotated[str, typer.Argument(help="The App to serve, as MODULE:ATTR.")]
WorkerIdOption = Annotated[
    str | None,
    typer.Option(
        "--worker-id", envvar="BURROW_WORKER_ID", help="Default: unique per process start."
    ),
]
TaskQueueOption = Annotated[
    str | None,
    typer.Option("--task-queue", envvar="BURROW_TASK_QUEUE", help="Default: the App's."),
]
ConcurrencyOption = Annotated[
    int | None,
    typer.Option("--concurrency", envvar="BURROW_CONCURRENCY", help="Activity slots."),
]
WorkflowConcurrencyOption = Annotated[
    int | None,
    typer.Option(
        "--workflow-concurrency",
        envvar="BURROW_WORKFLOW_CONCURRENCY",
        help="Workflow task slots.",
    ),
]
LeaseSecondsOption = Annotated[
    float | None, typer.Option("--lease-seconds", envvar="BURROW_LEASE_SECONDS")
]
PollIntervalOption = Annotated[
    float | None,
    typer.Option("--poll-interval", envvar="BURROW_POLL_INTERVAL_SECONDS", help="Seconds."),
]
RepairIntervalOption = Annotated[
    float | None,
    typer.Option("--repair-interval", envvar="BURROW_REPAIR_INTERVAL_SECONDS", help="Seconds."),
]
RepairOption = Annotated[
    bool | None,
    typer.Option(
        "--repair/--no-repair",
        envvar="BURROW_REPAIR",
        show_default="repair",
        help="Run the repair loop (expired leases, timers, timeouts); never with"
        " DW_V2_MATCHING_ROLE_QUEUE_WAKE=0, where `burrow matching` runs it.",
    ),
]
BuildIdOption = Annotated[
    str | None,
    typer.Option("--build-id", envvar="BURROW_BUILD_ID", help="Code version of this worker."),
]
DrainSecondsOption = Annotated[
    float,
    typer.Option(
        "--drain-seconds",
        envvar="BURROW_DRAIN_SECONDS",
        min=0,
        help="On SIGTERM/SIGINT, how long running tasks may finish.",
    ),
]


StickyCacheCapacityOption = Annotated[
    int | None,
    typer.Option(
        "--sticky-cache-capacity",
        envvar="BURROW_STICKY_CACHE_CAPACITY",
        min=0,
        show_default="100",
        help="Runs kept warm between workflow tasks; 0 turns the cache and sticky routing off.",
    ),
]
StickyCacheMaxBytesOption = Annotated[
    int | None,
    typer.Option(
        "--sticky-cache-max-bytes",
        envvar="BURROW_STICKY_CACHE_MAX_BYTES",
        min=1,
        show_default="64 MiB",
        help="Approximate resident bytes of the warm runs kept at most.",
    ),
]
CapabilityOption = Annotated[
    list[str] | None,
    typer.Option(
        "--capability",
        help="A capability worker sessions may require, e.g. gpu:nvidia-l4 (repeatable;"
        " env BURROW_CAPABILITIES, comma-separated).",
        show_default=False,
    ),
]
MaxWorkerSessionsOption = Annotated[
    int | None,
    typer.Option(
        "--max-concurrent-worker-sessions",
        envvar="BURROW_MAX_CONCURRENT_WORKER_SESSIONS",
        min=0,
        show_default="10",
        help="Worker sessions this worker may hold at once.",
    ),
]
ConnectionOption = Annotated[
    str | None,
    typer.Option(
        "--connection",
        envvar="BURROW_CONNECTION",
        show_default="default",
        help="The connection (partition) every poller of this worker serves (M7).",
    ),
]
DatabasePoolSizeOption = Annotated[
    int | None,
    typer.Option(
        "--database-pool-size",
        envvar="BURROW_DATABASE_POOL_SIZE",
        min=1,
        show_default="one per 4 slots, 8 to 32",
        help="Store connections this worker opens at most.",
    ),
]


class TargetError(ValueError):
    """A MODULE:ATTR worker target that does not name an App."""


def load_app(target: str) -> App:
    """Import the App named by `MODULE:ATTR` (the current directory is importable).

    Args:
        target: e.g. `tests.apps.orders:app`; ATTR may be dotted.

    Returns:
        The App object.

    Raises:
        TargetError: The target is malformed, does not import, or is not an App.
    """
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise TargetError(f"worker target {target!r} must look like MODULE:ATTR, e.g. myapp:app")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        obj: object = importlib.import_module(module_name)
    except Exception as exc:
        raise TargetError(
            f"cannot import module {module_name!r} of worker target {target!r}:"
            f" {type(exc).__name__}: {exc}"
        ) from exc
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise TargetError(f"module {module_name!r} has no attribute {attr!r}") from None
    if not isinstance(obj, App):
        raise TargetError(f"worker target {target!r} is a {type(obj).__name__}, not a burrow.App")
    return obj


def worker_command(
    target: TargetArgument,
    worker_id: WorkerIdOption = None,
    task_queue: TaskQueueOption = None,
    concurrency: ConcurrencyOption = None,
    workflow_concurrency: WorkflowConcurrencyOption = None,
    lease_seconds: LeaseSecondsOption = None,
    poll_interval: PollIntervalOption = None,
    repair_interval: RepairIntervalOption = None,
    repair: RepairOption = None,
    build_id: BuildIdOption = None,
    sticky_cache_capacity: StickyCacheCapacityOption = None,
    sticky_cache_max_bytes: StickyCacheMaxBytesOption = None,
    capability: CapabilityOption = None,
    max_concurrent_worker_sessions: MaxWorkerSessionsOption = None,
    connection: ConnectionOption = None,
    database_pool_size: DatabasePoolSizeOption = None,
    drain_seconds: DrainSecondsOption = 30.0,
    log_json: LogJsonOption = None,
    log_level: LogLevelOption = LogLevel.INFO,
    database_url: DatabaseUrlOption = None,
    namespace: NamespaceOption = None,
    amqp_url: WorkerAmqpUrlOption = None,
) -> None:
    """Serve an App's workflows and activities until SIGTERM or SIGINT (then drain, exit 0)."""
    try:
        burrow_app = load_app(target)
    except TargetError as exc:
        output.fail(str(exc), code=output.EXIT_USAGE)
    tuning = {
        "concurrency": concurrency,
        "workflow_concurrency": workflow_concurrency,
        "lease_seconds": lease_seconds,
        "poll_interval_seconds": poll_interval,
        "repair_interval_seconds": repair_interval,
        "repair": repair,
        "sticky_cache_capacity": sticky_cache_capacity,
        "sticky_cache_max_bytes": sticky_cache_max_bytes,
        "capabilities": capability or None,
        "max_concurrent_worker_sessions": max_concurrent_worker_sessions,
        "connection": connection,
        "database_pool_size": database_pool_size,
    }
    settings = build_settings(
        database_url=database_url, namespace=namespace, amqp_url=amqp_url, worker=tuning
    )
    from burrow.logging import configure_logging

    configure_logging(json=log_json, level=log_level.value)
    output.run(
        serve(
            burrow_app,
            settings,
            worker_id=worker_id,
            task_queue=task_queue,
            build_id=build_id,
            drain_seconds=drain_seconds,
        )
    )


async def serve(
    burrow_app: App,
    settings: Settings,
    *,
    worker_id: str | None = None,
    task_queue: str | None = None,
    build_id: str | None = None,
    drain_seconds: float = 30.0,
) -> None:
    """Run a worker until SIGTERM or SIGINT, then drain it and return.

    Args:
        burrow_app: The App to serve.
        settings: Connection and worker settings.
        worker_id: The worker's id (default: unique per process start).
        task_queue: The queue to poll (default: the App's).
        build_id: The code version the worker declares.
        drain_seconds: How long running tasks may finish after a signal.
    """
    from burrow.worker.worker import Worker

    worker = Worker(
        burrow_app,
        settings=settings,
        worker_id=worker_id,
        task_queue=task_queue,
        build_id=build_id,
    )
    loop = asyncio.get_running_loop()
    draining: list[asyncio.Task[None]] = []

    def on_signal() -> None:
        if not draining:
            draining.append(loop.create_task(worker.shutdown(drain_seconds=drain_seconds)))

    signals = (signal.SIGTERM, signal.SIGINT)
    for signum in signals:
        loop.add_signal_handler(signum, on_signal)
    # The modules and definitions loaded so far live as long as the process: freeze them, so a
    # full garbage collection scans only what the worker allocates since (a 50 ms pause less).
    gc.collect()
    gc.freeze()
    try:
        await worker.run()
        if draining:
            await draining[0]
    except BaseException:
        if not worker.stopping:
            with contextlib.suppress(Exception):
                await worker.shutdown(drain_seconds=0)
        raise
    finally:
        for signum in signals:
            loop.remove_signal_handler(signum)
