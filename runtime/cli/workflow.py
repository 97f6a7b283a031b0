"""`burrow workflow ...`: start, inspect and control workflows from a shell."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, TypeVar

import typer
from rich.markup import escape
from rich.pretty import Pretty
from rich.table import Table

from burrow import payloads
from burrow.cli import output
from burrow.cli.list_queries import QueryOption, refusing_bad_queries
from burrow.cli.options import (
    ClientAmqpUrlOption,
    DatabaseUrlOption,
    InputOption,
    JsonOption,
    NamespaceOption,
    NewWorkflowIdOption,
    ReasonOption,
    RunIdOption,
    SignalIdOption,
    WorkflowIdArgument,
    build_settings,
    check_workflow_timeouts,
    parse_input,
)
from burrow.cli.visibility_options import (
    MemoOption,
    SearchAttributesOption,
    parse_memo,
    parse_search_attributes,
    refusing_bad_attributes,
)
from burrow.client import Client
from burrow.config import Settings
from burrow.errors import PayloadError
from burrow.handle import WorkflowHandle
from burrow.protocol.shapes import JsonDict
from burrow.replay_verify import bundle_of
from burrow.store.models import IdReusePolicy, RunDescription, RunInfo, RunStatus

T = TypeVar("T")

app = typer.Typer(
    name="workflow",
    help="Start, inspect and control workflows.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
)


@app.command("start")
def start(
    workflow_type: Annotated[str, typer.Argument(help="The workflow type name.")],
    task_queue: Annotated[
        str, typer.Option("--task-queue", envvar="BURROW_TASK_QUEUE", help="Task queue to run on.")
    ],
    workflow_id: NewWorkflowIdOption = None,
    id_reuse_policy: Annotated[
        IdReusePolicy,
        typer.Option(
            "--id-reuse-policy",
            help="What runs the id already has do to this start: allow-duplicate starts a new"
            " run unless one is running; reject-duplicate refuses an id that ever had a run;"
            " use-existing prints the running run instead of refusing.",
        ),
    ] = IdReusePolicy.ALLOW_DUPLICATE,
    input_json: InputOption = "[]",
    build_id: Annotated[
        str | None,
        typer.Option(
            "--build-id",
            help="Pin the run to workers of this build: it waits, compatibility-blocked,"
            " until one runs it.",
        ),
    ] = None,
    connection: Annotated[
        str,
        typer.Option(
            "--connection",
            help="The connection the run is on: only workers serving it run it (M7).",
        ),
    ] = "default",
    execution_timeout: Annotated[
        float | None,
        typer.Option(
            "--execution-timeout",
            help="Time the workflow out after S seconds, across every run of its chain.",
        ),
    ] = None,
    run_timeout: Annotated[
        float | None,
        typer.Option(
            "--run-timeout",
            help="Time each run out after S seconds (at most --execution-timeout).",
        ),
    ] = None,
    memo_json: MemoOption = None,
    attributes_json: SearchAttributesOption = None,
    wait: Annotated[bool, typer.Option("--wait", help="Wait for the result and print it.")] = False,
    timeout: Annotated[
        float | None, typer.Option("--timeout", help="With --wait: give up after S seconds.")
    ] = None,
    as_json: JsonOption = False,
    database_url: DatabaseUrlOption = None,
    namespace: NamespaceOption = None,
    amqp_url: ClientAmqpUrlOption = None,
) -> None:
    """Start a workflow run; print its workflow id and run id (and result with --wait)."""
    check_workflow_timeouts(execution_timeout, run_timeout)
    memo, attributes = parse_memo(memo_json), parse_search_attributes(attributes_json)
    args = parse_input(input_json)
    settings = build_settings(database_url=database_url, namespace=namespace, amqp_url=amqp_url)

    async def go(client: Client) -> dict[str, object]:
        with refusing_bad_attributes():
            handle = await client.start_workflow(
                workflow_type,
                *args,
                id=workflow_id,
                task_queue=task_queue,
                check_workers=True,
                id_reuse_policy=id_reuse_policy,
                build_id=build_id,
                connection=connection,
                execution_timeout=execution_timeout,
                run_timeout=run_timeout,
                memo=memo,
                search_attributes=attributes,
            )
        document: dict[str, object] = {
            "workflow_id": handle.workflow_id,
            "run_id": handle.run_id,
        }
        if wait:
            document["result"] = await handle.result(timeout=timeout)
        return document

    document = output.run(with_client(settings, go))
    if as_json:
        output.emit_json(document)
        return
    out = output.stdout()
    out.print(f"workflow id: {escape(str(document['workflow_id']))}")
    out.print(f"run id:      {escape(str(document['run_id']))}")
    if wait:
        output.print_result(document["result"])


@app.command("describe")
def describe(
    workflow_id: WorkflowIdArgument,
    run_id: RunIdOption = None,
    as_json: JsonOption = False,
    database_url: DatabaseUrlOption = None,
    namespace: NamespaceOption = None,
    amqp_url: ClientAmqpUrlOption = None,
) -> None:
    """Show a run's status, open work, sticky binding and any compatibility gap."""
    settings = build_settings(database_url=database_url, namespace=namespace, amqp_url=amqp_url)
    description = output.run(
        with_client(settings, lambda c: c.get_handle(workflow_id, run_id=run_id).describe())
    )
    if as_json:
        output.emit_json(describe_document(description))
        return
    _print_description(description)


_TEXT_FIELDS = (
    "workflow_id",
    "run_id",
    "workflow_type",
    "task_queue",
    "status",
    "created_at",
    "closed_at",
    "build_id",
    "continued_to_run_id",
    "parent_workflow_id",
    "parent_run_id",
    "execution_timeout_seconds",
    "run_timeout_seconds",
    "execution_deadline_at",
    "run_deadline_at",
    "retry_attempt",
    "retry_of_run_id",
)


def _print_description(description: RunDescription) -> None:
    out = output.stdout()
    document = run_document(description.run)
    table = Table.grid(padding=(0, 2))
    for key in _TEXT_FIELDS:
        if document[key] is not None:
            table.add_row(key, _cell(document[key]))
    for key in ("failure", "result"):
        if document[key] is not None:
            table.add_row(key, Pretty(document[key]))
    table.add_row("input", Pretty(document["input"]))
    table.add_row("cancel_requested", str(document["cancel_requested"]))
    for key, held in (
        ("memo", description.memo),
        ("search_attributes", description.search_attributes),
    ):
        if held:
            table.add_row(key, Pretty(held))  # Pretty escapes markup: values are user input
    for key, value in _sticky_rows(description):
        table.add_row(key, escape(value))
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
    if description.children:
        kids = Table("seq", "child workflow_id", "workflow_type", "state", "closed", "on close")
        for child in description.children:
            kids.add_row(
                str(child.step),
                escape(child.workflow_id),
                escape(child.workflow_type),
                child.state,
                str(child.closed_status or ""),
                f"{child.parent_close_policy} ({child.policy_state})",
            )
        out.print(kids)
    if description.local_activities:
        # A3: they ran inside workflow tasks; `history` lists their attempts.
        out.print(f"local activities recorded: {description.local_activities}")
    if description.compatibility_gap:
        out.print(f"[yellow]compatibility gap:[/] {escape(description.compatibility_gap)}")


def _cell(value: object) -> str:
    """A field as text: a time in ISO 8601, as --json prints it (not its Python repr)."""
    return escape(str(output.json_default(value)))


def _sticky_rows(description: RunDescription) -> list[tuple[str, str]]:
    """The binding (S4) and the latest claim's replay mode (S7), when there are any."""
    rows = []
    if description.sticky_worker_id is not None:
        rows.append(("sticky_worker_id", description.sticky_worker_id))
    until = description.sticky_until
    if until is not None:
        # This machine's clock: a hint for the reader, not the store's verdict.
        expired = " (expired)" if until <= datetime.now(UTC) else ""
        rows.append(("sticky_until", until.isoformat() + expired))
    if description.sticky_replay_mode is not None:
        rows.append(("sticky_replay_mode", description.sticky_replay_mode))
    if description.sticky_claimed_at is not None:
        rows.append(("sticky_claimed_at", description.sticky_claimed_at.isoformat()))
    return rows


ExportOption = Annotated[
    Path | None,
    typer.Option(
        "--export",
        help="Write the run as a history export file (`-`: stdout) for `burrow replay verify`"
        " and the durable-workflow SDK's replay tools.",
        show_default=False,
    ),
]


@app.command("history")
def history(
    workflow_id: WorkflowIdArgument,
    run_id: RunIdOption = None,
    as_json: JsonOption = False,
    export: ExportOption = None,
    database_url: DatabaseUrlOption = None,
    namespace: NamespaceOption = None,
    amqp_url: ClientAmqpUrlOption = None,
) -> None:
    """Print a run's history events (a table, or a JSON list of events with --json)."""
    settings = build_settings(database_url=database_url, namespace=namespace, amqp_url=amqp_url)
    if export is not None:
        _export_history(settings, workflow_id, run_id, export)
        return
    events = output.run(
        with_client(settings, lambda c: c.get_handle(workflow_id, run_id=run_id).history())
    )
    if as_json:
        output.emit_json([event.to_json() for event in events])
        return
    output.stdout().print(output.history_table(events))


def _export_history(settings: Settings, workflow_id: str, run_id: str | None, path: Path) -> None:
    """Write one run's history export bundle to `path` (or stdout for `-`)."""

    async def go(client: Client) -> JsonDict:
        handle = client.get_handle(workflow_id, run_id=run_id)
        run = (await handle.describe()).run
        events = await client.get_handle(workflow_id, run_id=run.run_id).history()
        return bundle_of(run, events)

    bundle = output.run(with_client(settings, go))
    text = json.dumps(bundle, indent=2) + "\n"
    if str(path) == "-":
        output.echo(text)
        return
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        output.fail(f"cannot write {path}: {exc}")
    events = len(bundle["history_events"])
    output.stdout().print(
        f"exported {events} events of run {bundle['workflow']['run_id']} to {path}"
    )


@app.command("signal")
def signal(
    workflow_id: WorkflowIdArgument,
    name: Annotated[str, typer.Argument(help="The signal name.", show_default=False)],
    input_json: InputOption = "[]",
    signal_id: SignalIdOption = None,
    run_id: RunIdOption = None,
    as_json: JsonOption = False,
    database_url: DatabaseUrlOption = None,
    namespace: NamespaceOption = None,
    amqp_url: ClientAmqpUrlOption = None,
) -> None:
    """Send a signal to a running workflow."""
    args = parse_input(input_json)
    settings = build_settings(database_url=database_url, namespace=namespace, amqp_url=amqp_url)
    delivered = output.run(
        with_client(
            settings,
            lambda c: c.get_handle(workflow_id, run_id=run_id).signal(
                name, *args, signal_id=signal_id
            ),
        )
    )
    if as_json:
        output.emit_json({"workflow_id": workflow_id, "signal": name, "delivered": delivered})
        return
    state = "delivered" if delivered else "duplicate signal id, not delivered again"
    output.stdout().print(f"signal {escape(name)!r} to {escape(workflow_id)}: {state}")


def _close_run(
    settings: Settings,
    workflow_id: str,
    run_id: str | None,
    action: Callable[[WorkflowHandle[object]], Awaitable[None]],
) -> None:
    """Cancel or terminate: one call on the run's handle, errors mapped to exit codes."""

    async def go(client: Client) -> None:
        await action(client.get_handle(workflow_id, run_id=run_id))

    output.run(with_client(settings, go))


@app.command("cancel")
def cancel(
    workflow_id: WorkflowIdArgument,
    reason: ReasonOption = "",
    run_id: RunIdOption = None,
    as_json: JsonOption = False,
    database_url: DatabaseUrlOption = None,
    namespace: NamespaceOption = None,
    amqp_url: ClientAmqpUrlOption = None,
) -> None:
    """Request cancellation; the workflow code sees it and may clean up."""
    settings = build_settings(database_url=database_url, namespace=namespace, amqp_url=amqp_url)
    _close_run(settings, workflow_id, run_id, lambda handle: handle.cancel(reason=reason))
    if as_json:
        output.emit_json({"workflow_id": workflow_id, "cancel_requested": True})
        return
    output.stdout().print(f"cancellation requested for {escape(workflow_id)}")


@app.command("terminate")
def terminate(
    workflow_id: WorkflowIdArgument,
    reason: ReasonOption = "",
    run_id: RunIdOption = None,
    as_json: JsonOption = False,
    database_url: DatabaseUrlOption = None,
    namespace: NamespaceOption = None,
    amqp_url: ClientAmqpUrlOption = None,
) -> None:
    """Close the run immediately, without running workflow code."""
    settings = build_settings(database_url=database_url, namespace=namespace, amqp_url=amqp_url)
    _close_run(settings, workflow_id, run_id, lambda handle: handle.terminate(reason=reason))
    if as_json:
        output.emit_json({"workflow_id": workflow_id, "terminated": True})
        return
    output.stdout().print(f"terminated {escape(workflow_id)}")


@app.command("list")
def list_(
    status: Annotated[
        RunStatus | None, typer.Option("--status", case_sensitive=False, help="Only this status.")
    ] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, help="At most N runs.")] = 50,
    query: QueryOption = None,
    as_json: JsonOption = False,
    database_url: DatabaseUrlOption = None,
    namespace: NamespaceOption = None,
    amqp_url: ClientAmqpUrlOption = None,
) -> None:
    """List the namespace's most recent runs, newest first, or those a list query selects."""
    settings = build_settings(database_url=database_url, namespace=namespace, amqp_url=amqp_url)
    status_value = None if status is None else status.value

    async def listed(c: Client) -> list[RunInfo]:
        return await c.list_workflows(query=query, status=status_value, limit=limit)

    runs = output.run(refusing_bad_queries(query, with_client(settings, listed)))
    if as_json:
        output.emit_json([run_document(r) for r in runs])
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
    output.stdout().print(table)


@app.command("count")
def count(
    query: QueryOption = None,
    as_json: JsonOption = False,
    database_url: DatabaseUrlOption = None,
    namespace: NamespaceOption = None,
    amqp_url: ClientAmqpUrlOption = None,
) -> None:
    """Count the runs a list query selects; per status with GROUP BY ExecutionStatus."""
    settings = build_settings(database_url=database_url, namespace=namespace, amqp_url=amqp_url)
    counted = output.run(
        refusing_bad_queries(query, with_client(settings, lambda c: c.count_workflows(query=query)))
    )
    if as_json:
        output.emit_json({"count": counted.count, "groups": counted.groups})
        return
    output.echo(f"{counted.count}\n")
    for status_name, n in (counted.groups or {}).items():
        output.echo(f"  {status_name}: {n}\n")


@app.command("result")
def result(
    workflow_id: WorkflowIdArgument,
    timeout: Annotated[
        float | None, typer.Option("--timeout", help="Give up after S seconds (exit 1).")
    ] = None,
    run_id: RunIdOption = None,
    as_json: JsonOption = False,
    database_url: DatabaseUrlOption = None,
    namespace: NamespaceOption = None,
    amqp_url: ClientAmqpUrlOption = None,
) -> None:
    """Wait for the run to close and print its result; a failed run exits 1."""
    settings = build_settings(database_url=database_url, namespace=namespace, amqp_url=amqp_url)
    value = output.run(
        with_client(
            settings, lambda c: c.get_handle(workflow_id, run_id=run_id).result(timeout=timeout)
        )
    )
    if as_json:
        output.emit_json({"workflow_id": workflow_id, "result": value})
        return
    output.print_result(value)


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


def _decoded(payload: Mapping[str, object] | None, *, args: bool) -> object:
    try:
        return payloads.decode_args(payload) if args else payloads.decode_value(payload)
    except PayloadError:
        return payload


def run_document(run: RunInfo) -> dict[str, object]:
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


def describe_document(description: RunDescription) -> dict[str, object]:
    """describe() as a JSON-ready dict: run fields, workflow_task, activities, gap, sticky fields.

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
        "sticky_worker_id": description.sticky_worker_id,
        "sticky_until": description.sticky_until,
        "sticky_replay_mode": description.sticky_replay_mode,
        "sticky_claimed_at": description.sticky_claimed_at,
        "local_activities": description.local_activities,
        "children": [dataclasses.asdict(c) for c in description.children],
        "memo": description.memo,
        "search_attributes": description.search_attributes,
    }
