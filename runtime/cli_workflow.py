"""`burrow workflow ...`: talk to workflows from a shell; also the CLI's shared helpers.

The helpers (option types, settings, error handling, output) live here rather than in
`burrow.cli` so that `burrow.cli` can import this module without an import cycle.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import os
import urllib.parse
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from datetime import date, datetime
from typing import Annotated, Any, NoReturn, TypeVar

import typer
import uvloop
from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape
from rich.pretty import Pretty
from rich.table import Table

from burrow import payloads
from burrow.client import Client
from burrow.config import DEFAULT_DATABASE_URL, DEFAULT_NAMESPACE, Settings, WorkerSettings
from burrow.errors import BurrowError, PayloadError
from burrow.store.engine import async_url
from burrow.store.models import HistoryEvent, RunDescription, RunInfo, RunStatus

T = TypeVar("T")

EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
SUMMARY_WIDTH = 80
JSON_KINDS: dict[type, str] = {
    dict: "an object",
    str: "a string",
    int: "a number",
    float: "a number",
    bool: "a boolean",
    type(None): "null",
}
SUMMARY_KEYS = (
    "workflow_type",
    "activity_type",
    "signal_name",
    "update_name",
    "query_name",
    "attempt_number",
    "delay_seconds",
    "change_id",
    "version",
    "exception_type",
    "message",
    "reason",
)

# -- shared options ------------------------------------------------------------------------------

DatabaseUrlOption = Annotated[
    str | None,
    typer.Option(
        "--database-url",
        envvar="BURROW_DATABASE_URL",
        show_default=DEFAULT_DATABASE_URL,
        help="Postgres URL of the Burrow database.",
    ),
]
NamespaceOption = Annotated[
    str | None,
    typer.Option(
        "--namespace",
        envvar="BURROW_NAMESPACE",
        show_default=DEFAULT_NAMESPACE,
        help="Namespace of the workflows.",
    ),
]
AmqpUrlOption = Annotated[
    str | None,
    typer.Option("--amqp-url", envvar="BURROW_AMQP_URL", help="RabbitMQ URL (stored, not used)."),
]
JsonOption = Annotated[
    bool, typer.Option("--json", help="Print one machine-readable JSON document on stdout.")
]
RunIdOption = Annotated[
    str | None, typer.Option("--run-id", help="A specific run (default: the latest run).")
]
WorkflowIdArgument = Annotated[str, typer.Argument(help="The workflow id.", show_default=False)]
InputOption = Annotated[
    str,
    typer.Option("--input", help="A JSON array of positional arguments, e.g. '[1, \"a\"]'."),
]
ReasonOption = Annotated[str, typer.Option("--reason", help="Why; recorded in history.")]


# -- settings, errors, output ---------------------------------------------------------------------


def build_settings(
    *,
    database_url: str | None = None,
    namespace: str | None = None,
    amqp_url: str | None = None,
    worker: Mapping[str, Any] | None = None,
) -> Settings:
    """Settings from BURROW_* environment variables, overridden by the flags that were given.

    Args:
        database_url: The --database-url flag, if given.
        namespace: The --namespace flag, if given.
        amqp_url: The --amqp-url flag, if given.
        worker: WorkerSettings fields from flags; None values are ignored.

    Returns:
        The validated settings; invalid values exit with code 2.
    """
    flags = {"database_url": database_url, "namespace": namespace, "amqp_url": amqp_url}
    try:
        base = Settings.from_env(os.environ)
        tuned = {k: v for k, v in (worker or {}).items() if v is not None}
        worker_settings = WorkerSettings.model_validate({**base.worker.model_dump(), **tuned})
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(map(str, e['loc']))}: {e['msg']} (got {e['input']!r})" for e in exc.errors()
        )
        fail(f"invalid settings: {problems}", code=EXIT_USAGE)
    update: dict[str, Any] = {k: v for k, v in flags.items() if v is not None}
    settings = base.model_copy(update={**update, "worker": worker_settings})
    try:
        async_url(settings.database_url)
    except Exception:  # the URL parser's own error type is the store's business
        fail(f"invalid database URL {redact_url(settings.database_url)!r}", code=EXIT_USAGE)
    return settings


def redact_url(url: str) -> str:
    """The URL with any password replaced by `***`, fit for printing.

    Args:
        url: A database or broker URL.

    Returns:
        The redacted URL.
    """
    parts = urllib.parse.urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))


def _is_database_error(exc: BaseException) -> bool:
    """A driver or SQL toolkit error the store let through untranslated."""
    return any(
        cls.__module__.split(".")[0] in ("sqlalchemy", "asyncpg") for cls in type(exc).__mro__
    )


def _database_error_message(exc: BaseException) -> str:
    detail = str(getattr(exc, "orig", None) or exc).splitlines()[0]
    message = f"database error: {detail}"
    if "does not exist" in detail:
        message += " (is the database created and migrated? run `burrow migrate`)"
    return message


def stdout() -> Console:
    """A console on stdout (created per call: consoles read the environment)."""
    return Console(soft_wrap=True)


def fail(message: str, *, code: int = EXIT_ERROR) -> NoReturn:
    """Print `error: message` in red on stderr and exit with `code`.

    Args:
        message: What went wrong.
        code: The exit code (1 for failed operations, 2 for bad usage).

    Raises:
        typer.Exit: Always.
    """
    Console(stderr=True, soft_wrap=True).print(f"[bold red]error:[/] {escape(message)}")
    raise typer.Exit(code)


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine; Burrow errors, timeouts and database errors exit 1 without a traceback.

    Args:
        coro: The command's async work.

    Returns:
        The coroutine's result.
    """
    try:
        # uvloop's event loop cuts the driver's I/O overhead; workflow code never sees it (it
        # runs on the deterministic loop).
        return uvloop.run(coro)
    except BurrowError as exc:
        fail(str(exc))
    except TimeoutError as exc:
        fail(str(exc) or "timed out")
    except KeyboardInterrupt:
        fail("interrupted", code=EXIT_INTERRUPTED)
    except Exception as exc:
        if not _is_database_error(exc):
            raise
        fail(_database_error_message(exc))


async def with_client(settings: Settings, fn: Callable[[Client], Awaitable[T]]) -> T:
    """Connect a client, run `fn` with it and close it.

    Args:
        settings: Where to connect.
        fn: The work to do with the client.

    Returns:
        What `fn` returned.
    """
    client = await Client.connect(settings=settings)
    try:
        return await fn(client)
    finally:
        await client.close()


def parse_input(text: str) -> list[Any]:
    """Parse --input: a JSON array of positional arguments; anything else exits with code 2.

    Args:
        text: The option's value.

    Returns:
        The arguments.
    """
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        fail(f"--input is not valid JSON ({exc}): {text!r}", code=EXIT_USAGE)
    if not isinstance(value, list):
        kind = JSON_KINDS.get(type(value), type(value).__name__)
        fail(
            f"--input must be a JSON array of positional arguments, got {kind};"
            f" wrap a single argument in brackets: '[{text}]'",
            code=EXIT_USAGE,
        )
    return value


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, enum.Enum):
        return value.value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, bytes):
        return value.hex()
    return str(value)


def emit_json(document: Any) -> None:
    """Print one JSON document on stdout (datetimes as ISO strings).

    Args:
        document: Anything JSON-like; dataclasses, enums and datetimes are converted.
    """
    typer.echo(json.dumps(document, default=_json_default, indent=2))


def _decoded(payload: Mapping[str, Any] | None, *, args: bool) -> Any:
    try:
        return payloads.decode_args(payload) if args else payloads.decode_value(payload)
    except PayloadError:
        return payload


def run_document(run: RunInfo) -> dict[str, Any]:
    """A run as a JSON-ready dict; `input` (argument list) and `result` are decoded.

    Args:
        run: The run.

    Returns:
        Its fields; undecodable payloads are kept as their stored envelopes.
    """
    document = dataclasses.asdict(run)
    document["input"] = _decoded(run.input, args=True)
    document["result"] = _decoded(run.result, args=False)
    return document


def describe_document(description: RunDescription) -> dict[str, Any]:
    """describe() as a JSON-ready dict: run fields, workflow_task, activities, gap.

    Args:
        description: What the store described.

    Returns:
        The flat document.
    """
    task = description.workflow_task
    return {
        **run_document(description.run),
        "workflow_task": None if task is None else dataclasses.asdict(task),
        "activities": [dataclasses.asdict(a) for a in description.activities],
        "compatibility_gap": description.compatibility_gap,
    }


def summarize(payload: Mapping[str, Any]) -> str:
    """A short, human summary of an event payload (its most telling scalar fields).

    Args:
        payload: The event's payload.

    Returns:
        `key=value` pairs, cut to SUMMARY_WIDTH characters.
    """
    parts = [
        f"{key}={payload[key]}"
        for key in SUMMARY_KEYS
        if isinstance(payload.get(key), str | int | float | bool)
    ]
    text = ", ".join(parts)
    return text if len(text) <= SUMMARY_WIDTH else text[: SUMMARY_WIDTH - 1] + "…"


def history_table(events: list[HistoryEvent]) -> Table:
    """A rich table of history events.

    Args:
        events: The events, in sequence order.

    Returns:
        The table (sequence, event type, recorded at, summary).
    """
    table = Table("seq", "event_type", "recorded_at", "summary")
    for event in events:
        table.add_row(
            str(event.sequence),
            event.event_type,
            event.recorded_at.strftime("%H:%M:%S.%f")[:-3],
            escape(summarize(event.payload)),
        )
    return table


def print_result(result: Any) -> None:
    """Print a workflow result prettily on stdout.

    Args:
        result: The decoded result.
    """
    stdout().print(Pretty(result))


# -- workflow commands ----------------------------------------------------------------------------

workflow_app = typer.Typer(
    name="workflow",
    help="Start, inspect and control workflows.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
)


@workflow_app.command("start")
def start(
    workflow_type: Annotated[str, typer.Argument(help="The workflow type name.")],
    task_queue: Annotated[
        str, typer.Option("--task-queue", envvar="BURROW_TASK_QUEUE", help="Task queue to run on.")
    ],
    workflow_id: Annotated[
        str | None, typer.Option("--id", help="Workflow id (default: a new UUID).")
    ] = None,
    input_json: InputOption = "[]",
    wait: Annotated[bool, typer.Option("--wait", help="Wait for the result and print it.")] = False,
    timeout: Annotated[
        float | None, typer.Option("--timeout", help="With --wait: give up after S seconds.")
    ] = None,
    as_json: JsonOption = False,
    database_url: DatabaseUrlOption = None,
    namespace: NamespaceOption = None,
    amqp_url: AmqpUrlOption = None,
) -> None:
    """Start a workflow run; print its workflow id and run id (and result with --wait)."""
    args = parse_input(input_json)
    settings = build_settings(database_url=database_url, namespace=namespace, amqp_url=amqp_url)

    async def go(client: Client) -> dict[str, Any]:
        handle = await client.start_workflow(
            workflow_type, *args, id=workflow_id, task_queue=task_queue, check_workers=True
        )
        document: dict[str, Any] = {"workflow_id": handle.workflow_id, "run_id": handle.run_id}
        if wait:
            document["result"] = await handle.result(timeout=timeout)
        return document

    document = run(with_client(settings, go))
    if as_json:
        emit_json(document)
        return
    out = stdout()
    out.print(f"workflow id: {escape(document['workflow_id'])}")
    out.print(f"run id:      {escape(str(document['run_id']))}")
    if wait:
        print_result(document["result"])


@workflow_app.command("describe")
def describe(
    workflow_id: WorkflowIdArgument,
    run_id: RunIdOption = None,
    as_json: JsonOption = False,
    database_url: DatabaseUrlOption = None,
    namespace: NamespaceOption = None,
    amqp_url: AmqpUrlOption = None,
) -> None:
    """Show a run's status, open workflow task, open activities and any compatibility gap."""
    settings = build_settings(database_url=database_url, namespace=namespace, amqp_url=amqp_url)
    description = run(
        with_client(settings, lambda c: c.get_handle(workflow_id, run_id=run_id).describe())
    )
    if as_json:
        emit_json(describe_document(description))
        return
    _print_description(description)


def _print_description(description: RunDescription) -> None:
    out = stdout()
    document = run_document(description.run)
    table = Table.grid(padding=(0, 2))
    for key in ("workflow_id", "run_id", "workflow_type", "task_queue", "status", "created_at"):
        table.add_row(key, escape(str(_json_default(document[key]))))
    for key in ("closed_at", "build_id", "continued_to_run_id", "failure", "result"):
        if document[key] is not None:
            table.add_row(key, Pretty(document[key]))
    table.add_row("input", Pretty(document["input"]))
    table.add_row("cancel_requested", str(document["cancel_requested"]))
    out.print(table)
    task = description.workflow_task
    if task is not None:
        out.print(
            f"workflow task: {task.state} attempt {task.attempt}"
            f" owner {escape(str(task.lease_owner))}"
        )
    if description.activities:
        acts = Table("seq", "activity_type", "state", "attempt", "owner")
        for act in description.activities:
            acts.add_row(
                str(act.step_seq),
                act.activity_type,
                str(act.state),
                str(act.attempt_number),
                escape(str(act.lease_owner)),
            )
        out.print(acts)
    if description.compatibility_gap:
        out.print(f"[yellow]compatibility gap:[/] {escape(description.compatibility_gap)}")


@workflow_app.command("history")
def history(
    workflow_id: WorkflowIdArgument,
    run_id: RunIdOption = None,
    as_json: JsonOption = False,
    database_url: DatabaseUrlOption = None,
    namespace: NamespaceOption = None,
    amqp_url: AmqpUrlOption = None,
) -> None:
    """Print a run's history events (a table, or a JSON list of events with --json)."""
    settings = build_settings(database_url=database_url, namespace=namespace, amqp_url=amqp_url)
    events = run(
        with_client(settings, lambda c: c.get_handle(workflow_id, run_id=run_id).history())
    )
    if as_json:
        emit_json([event.to_json() for event in events])
        return
    stdout().print(history_table(events))


@workflow_app.command("signal")
def signal(
    workflow_id: WorkflowIdArgument,
    name: Annotated[str, typer.Argument(help="The signal name.", show_default=False)],
    input_json: InputOption = "[]",
    signal_id: Annotated[
        str | None,
        typer.Option("--signal-id", help="Idempotency key: a repeated id is delivered once."),
    ] = None,
    run_id: RunIdOption = None,
    as_json: JsonOption = False,
    database_url: DatabaseUrlOption = None,
    namespace: NamespaceOption = None,
    amqp_url: AmqpUrlOption = None,
) -> None:
    """Send a signal to a running workflow."""
    args = parse_input(input_json)
    settings = build_settings(database_url=database_url, namespace=namespace, amqp_url=amqp_url)
    delivered = run(
        with_client(
            settings,
            lambda c: c.get_handle(workflow_id, run_id=run_id).signal(
                name, *args, signal_id=signal_id
            ),
        )
    )
    if as_json:
        emit_json({"workflow_id": workflow_id, "signal": name, "delivered": delivered})
        return
    state = "delivered" if delivered else "duplicate signal id, not delivered again"
    stdout().print(f"signal {escape(name)!r} to {escape(workflow_id)}: {state}")


@workflow_app.command("cancel")
def cancel(
    workflow_id: WorkflowIdArgument,
    reason: ReasonOption = "",
    run_id: RunIdOption = None,
    as_json: JsonOption = False,
    database_url: DatabaseUrlOption = None,
    namespace: NamespaceOption = None,
    amqp_url: AmqpUrlOption = None,
) -> None:
    """Request cancellation; the workflow code sees it and may clean up."""
    settings = build_settings(database_url=database_url, namespace=namespace, amqp_url=amqp_url)

    async def go(client: Client) -> None:
        await client.get_handle(workflow_id, run_id=run_id).cancel(reason=reason)

    run(with_client(settings, go))
    if as_json:
        emit_json({"workflow_id": workflow_id, "cancel_requested": True})
        return
    stdout().print(f"cancellation requested for {escape(workflow_id)}")


@workflow_app.command("terminate")
def terminate(
    workflow_id: WorkflowIdArgument,
    reason: ReasonOption = "",
    run_id: RunIdOption = None,
    as_json: JsonOption = False,
    database_url: DatabaseUrlOption = None,
    namespace: NamespaceOption = None,
    amqp_url: AmqpUrlOption = None,
) -> None:
    """Close the run immediately, without running workflow code."""
    settings = build_settings(database_url=database_url, namespace=namespace, amqp_url=amqp_url)

    async def go(client: Client) -> None:
        await client.get_handle(workflow_id, run_id=run_id).terminate(reason=reason)

    run(with_client(settings, go))
    if as_json:
        emit_json({"workflow_id": workflow_id, "terminated": True})
        return
    stdout().print(f"terminated {escape(workflow_id)}")


@workflow_app.command("list")
def list_(
    status: Annotated[
        RunStatus | None, typer.Option("--status", case_sensitive=False, help="Only this status.")
    ] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, help="At most N runs.")] = 50,
    as_json: JsonOption = False,
    database_url: DatabaseUrlOption = None,
    namespace: NamespaceOption = None,
    amqp_url: AmqpUrlOption = None,
) -> None:
    """List the namespace's most recent runs, newest first."""
    settings = build_settings(database_url=database_url, namespace=namespace, amqp_url=amqp_url)
    status_value = None if status is None else status.value
    runs = run(with_client(settings, lambda c: c.list_workflows(status=status_value, limit=limit)))
    if as_json:
        emit_json([run_document(r) for r in runs])
        return
    table = Table("workflow_id", "workflow_type", "status", "task_queue", "created_at", "run_id")
    for r in runs:
        table.add_row(
            escape(r.workflow_id),
            escape(r.workflow_type),
            str(r.status),
            escape(r.task_queue),
            r.created_at.strftime("%Y-%m-%d %H:%M:%S"),
            r.run_id,
        )
    stdout().print(table)


@workflow_app.command("result")
def result(
    workflow_id: WorkflowIdArgument,
    timeout: Annotated[
        float | None, typer.Option("--timeout", help="Give up after S seconds (exit 1).")
    ] = None,
    run_id: RunIdOption = None,
    as_json: JsonOption = False,
    database_url: DatabaseUrlOption = None,
    namespace: NamespaceOption = None,
    amqp_url: AmqpUrlOption = None,
) -> None:
    """Wait for the run to close and print its result; a failed run exits 1."""
    settings = build_settings(database_url=database_url, namespace=namespace, amqp_url=amqp_url)
    value = run(
        with_client(
            settings, lambda c: c.get_handle(workflow_id, run_id=run_id).result(timeout=timeout)
        )
    )
    if as_json:
        emit_json({"workflow_id": workflow_id, "result": value})
        return
    print_result(value)
