"""The `burrow` command line: migrate, demo, worker and workflow commands (typer + rich)."""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import os
import signal
import sys
from enum import StrEnum
from typing import Annotated, Any

import typer
from rich.pretty import Pretty

from burrow.app import App
from burrow.cli_queues import queues as queues_command
from burrow.cli_workflow import (
    EXIT_USAGE,
    AmqpUrlOption,
    DatabaseUrlOption,
    JsonOption,
    NamespaceOption,
    build_settings,
    emit_json,
    fail,
    history_table,
    redact_url,
    run,
    stdout,
    workflow_app,
)
from burrow.config import Settings

app = typer.Typer(
    name="burrow",
    help="Burrow: durable workflows on Postgres.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,
)
app.add_typer(workflow_app, name="workflow")
app.command("queues")(queues_command)


class LogLevel(StrEnum):
    """Log levels the worker accepts."""

    DEBUG = "debug"
    INFO = "info"
    WARNING = "warning"
    ERROR = "error"


LogJsonOption = Annotated[
    bool | None,
    typer.Option(
        "--log-json/--log-console",
        envvar="BURROW_LOG_JSON",
        show_default="JSON when stderr is not a terminal",
        help="Log format on stderr.",
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
        obj: Any = importlib.import_module(module_name)
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


@app.command("migrate")
def migrate_command(database_url: DatabaseUrlOption = None) -> None:
    """Create the database if it is missing and upgrade its schema to the latest revision."""
    from burrow.store import migrate
    from burrow.store.engine import create_database_if_missing

    settings = build_settings(database_url=database_url)

    async def go() -> bool:
        created = await create_database_if_missing(settings.database_url)
        await migrate.upgrade(settings.database_url, create_database=False)
        return created

    created = run(go())
    verb = "created and migrated" if created else "migrated"
    stdout().print(f"{verb} {redact_url(settings.database_url)} to head")


@app.command("demo")
def demo_command(
    as_json: JsonOption = False,
    log_level: Annotated[
        LogLevel,
        typer.Option("--log-level", envvar="BURROW_LOG_LEVEL", case_sensitive=False),
    ] = LogLevel.WARNING,
    log_json: LogJsonOption = None,
    database_url: DatabaseUrlOption = None,
    namespace: NamespaceOption = None,
    amqp_url: AmqpUrlOption = None,
) -> None:
    """Run the sample order workflow end to end with an in-process worker."""
    from burrow.demo import run_demo
    from burrow.logging import configure_logging

    settings = build_settings(database_url=database_url, namespace=namespace, amqp_url=amqp_url)
    configure_logging(json=log_json, level=log_level.value)
    result, events = run(run_demo(settings))
    if as_json:
        emit_json({"result": result, "history": [event.to_json() for event in events]})
        return
    out = stdout()
    out.print("[bold]result[/]")
    out.print(Pretty(result))
    out.print(history_table(events))


@app.command("worker")
def worker_command(
    target: Annotated[str, typer.Argument(help="The App to serve, as MODULE:ATTR.")],
    worker_id: Annotated[
        str | None,
        typer.Option(
            "--worker-id", envvar="BURROW_WORKER_ID", help="Default: unique per process start."
        ),
    ] = None,
    task_queue: Annotated[
        str | None,
        typer.Option("--task-queue", envvar="BURROW_TASK_QUEUE", help="Default: the App's."),
    ] = None,
    concurrency: Annotated[
        int | None,
        typer.Option("--concurrency", envvar="BURROW_CONCURRENCY", help="Activity slots."),
    ] = None,
    workflow_concurrency: Annotated[
        int | None,
        typer.Option(
            "--workflow-concurrency",
            envvar="BURROW_WORKFLOW_CONCURRENCY",
            help="Workflow task slots.",
        ),
    ] = None,
    lease_seconds: Annotated[
        float | None, typer.Option("--lease-seconds", envvar="BURROW_LEASE_SECONDS")
    ] = None,
    poll_interval: Annotated[
        float | None,
        typer.Option("--poll-interval", envvar="BURROW_POLL_INTERVAL_SECONDS", help="Seconds."),
    ] = None,
    repair_interval: Annotated[
        float | None,
        typer.Option("--repair-interval", envvar="BURROW_REPAIR_INTERVAL_SECONDS", help="Seconds."),
    ] = None,
    repair: Annotated[
        bool | None,
        typer.Option(
            "--repair/--no-repair",
            envvar="BURROW_REPAIR",
            show_default="repair",
            help="Run the repair loop (expired leases, timers, timeouts).",
        ),
    ] = None,
    build_id: Annotated[
        str | None,
        typer.Option("--build-id", envvar="BURROW_BUILD_ID", help="Code version of this worker."),
    ] = None,
    drain_seconds: Annotated[
        float,
        typer.Option(
            "--drain-seconds",
            envvar="BURROW_DRAIN_SECONDS",
            min=0,
            help="On SIGTERM/SIGINT, how long running tasks may finish.",
        ),
    ] = 30.0,
    log_json: LogJsonOption = None,
    log_level: Annotated[
        LogLevel, typer.Option("--log-level", envvar="BURROW_LOG_LEVEL", case_sensitive=False)
    ] = LogLevel.INFO,
    database_url: DatabaseUrlOption = None,
    namespace: NamespaceOption = None,
    amqp_url: AmqpUrlOption = None,
) -> None:
    """Serve an App's workflows and activities until SIGTERM or SIGINT (then drain, exit 0)."""
    try:
        burrow_app = load_app(target)
    except TargetError as exc:
        fail(str(exc), code=EXIT_USAGE)
    tuning = {
        "concurrency": concurrency,
        "workflow_concurrency": workflow_concurrency,
        "lease_seconds": lease_seconds,
        "poll_interval_seconds": poll_interval,
        "repair_interval_seconds": repair_interval,
        "repair": repair,
    }
    settings = build_settings(
        database_url=database_url, namespace=namespace, amqp_url=amqp_url, worker=tuning
    )
    from burrow.logging import configure_logging

    configure_logging(json=log_json, level=log_level.value)
    run(
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


def main() -> None:
    """Entry point of the `burrow` script and `python -m burrow`."""
    from burrow.logging import configure_logging

    # Logs go to stderr (stdout carries --json output); `worker` and `demo` reconfigure.
    configure_logging(level="WARNING")
    app(prog_name="burrow")
