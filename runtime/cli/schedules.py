"""`burrow schedule create|list|describe|pause|resume|trigger|backfill|update|delete` (issue 30).

Through the native client, on the namespace of `--namespace`. A spec, policy, time or input that
cannot work is bad usage: exit 2 before connecting, nothing written. A refusal of the store (no
such schedule, an id taken) exits 1. `--json` prints one document: the schedule as the client
returns it, with an `outcome` the way the HTTP routes answer.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Annotated, Any, NoReturn, TypeVar

import typer
from pydantic import ValidationError
from rich.markup import escape
from rich.table import Table

from burrow.cli import output
from burrow.cli.options import (
    DatabaseUrlOption,
    InputOption,
    JsonOption,
    NamespaceOption,
    build_settings,
    parse_input,
)
from burrow.cli.output import EXIT_USAGE
from burrow.client import Client
from burrow.config import Settings
from burrow.errors import InvalidScheduleSpec
from burrow.protocol.schedules import OverlapPolicy, SchedulePolicies, ScheduleSpec
from burrow.store.schedule_models import ScheduleFire, ScheduleStatus, ScheduleSummary

app = typer.Typer(
    name="schedule",
    help="Schedules: start a workflow at each fire time of cron expressions or intervals.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
)

T = TypeVar("T")

IdArgument = Annotated[str, typer.Argument(help="The schedule's id.")]
CronOption = Annotated[
    list[str] | None,
    typer.Option("--cron", help="A cron expression (5 fields, 6 with seconds, or @hourly...)."),
]
IntervalOption = Annotated[
    list[str] | None,
    typer.Option("--interval", help="EVERY[/OFFSET], ISO 8601 durations: PT30M, PT1H/PT5M."),
]
TimezoneOption = Annotated[
    str | None, typer.Option("--timezone", help="IANA zone the cron expressions are read in.")
]
OverlapOption = Annotated[
    OverlapPolicy | None,
    typer.Option("--overlap-policy", help="What a fire does while the previous run is open."),
]
JitterOption = Annotated[
    int | None, typer.Option("--jitter", help="Start each fire up to this many seconds late.")
]
MaxRunsOption = Annotated[
    int | None, typer.Option("--max-runs", help="Fire no more after this many runs.")
]
CatchupOption = Annotated[
    int | None,
    typer.Option("--catchup-window", help="Seconds within which a missed fire is still taken."),
]
NoteOption = Annotated[str | None, typer.Option("--note", help="Why; shown by describe.")]


def _usage(message: str) -> NoReturn:
    output.fail(message, code=EXIT_USAGE)


def _spec(
    cron: list[str] | None, intervals: list[str] | None, timezone: str | None
) -> ScheduleSpec:
    """The spec the flags give; one that cannot work exits 2."""
    parsed = []
    for text in intervals or []:
        every, _, offset = text.partition("/")
        parsed.append({"every": every, **({"offset": offset} if offset else {})})
    fields: dict[str, Any] = {"cron_expressions": cron or [], "intervals": parsed}
    if timezone is not None:
        fields["timezone"] = timezone
    try:
        return ScheduleSpec.model_validate(fields)
    except (InvalidScheduleSpec, ValidationError) as exc:
        _usage(str(exc))


def _policies(**given: object) -> dict[str, object]:
    """The policy fields given, checked together (exit 2 on ones that cannot work)."""
    fields = {name: value for name, value in given.items() if value is not None}
    try:
        SchedulePolicies.model_validate(fields)
    except (InvalidScheduleSpec, ValidationError) as exc:
        _usage(str(exc))
    return fields


def _moment(value: str, flag: str) -> datetime:
    try:
        moment = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        _usage(f"{flag} {value!r} is not an ISO 8601 time (such as 2026-01-01T00:00:00Z)")
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _with_client(settings: Settings, fn: Callable[[Client], Awaitable[T]]) -> T:
    async def go() -> T:
        client = await Client.connect(settings=settings)
        try:
            return await fn(client)
        finally:
            await client.close()

    return output.run(go())


def _summary(summary: ScheduleSummary) -> dict[str, Any]:
    document: dict[str, Any] = summary.model_dump(mode="json")
    document["remaining_actions"] = summary.remaining_actions
    return document


def _fire(fire: ScheduleFire) -> dict[str, Any]:
    document: dict[str, Any] = fire.model_dump(mode="json")
    return document


def _done(as_json: bool, outcome: str, summary: ScheduleSummary) -> None:
    if as_json:
        output.emit_json(
            {"schedule_id": summary.schedule_id, "outcome": outcome, **_summary(summary)}
        )
        return
    nxt = summary.next_fire_at.isoformat() if summary.next_fire_at else "none"
    output.echo(f"{outcome} {summary.schedule_id} ({summary.status.value}; next fire {nxt})\n")


@app.command("create")
def create_command(
    schedule_id: IdArgument,
    workflow_type: Annotated[str, typer.Argument(help="The workflow type each fire starts.")],
    task_queue: Annotated[str, typer.Option("--task-queue", help="The queue runs start on.")],
    cron: CronOption = None,
    interval: IntervalOption = None,
    timezone: TimezoneOption = None,
    input_json: InputOption = "[]",
    overlap_policy: OverlapOption = None,
    jitter: JitterOption = None,
    max_runs: MaxRunsOption = None,
    catchup_window: CatchupOption = None,
    paused: Annotated[bool, typer.Option("--paused", help="Create it paused.")] = False,
    note: NoteOption = None,
    as_json: JsonOption = False,
    database_url: DatabaseUrlOption = None,
    namespace: NamespaceOption = None,
) -> None:
    """Create a schedule; each fire starts WORKFLOW_TYPE with workflow id `<id>-<fire time>`."""
    if not schedule_id.strip():
        _usage("the schedule id is empty")
    spec = _spec(cron, interval, timezone)
    _policies(
        overlap_policy=overlap_policy,
        jitter_seconds=jitter,
        max_runs=max_runs,
        catchup_window_seconds=catchup_window,
    )
    args = parse_input(input_json)
    settings = build_settings(database_url=database_url, namespace=namespace)
    options: dict[str, Any] = {"spec": spec, "task_queue": task_queue, "paused": paused}
    given = {
        "overlap_policy": overlap_policy,
        "jitter": jitter,
        "max_runs": max_runs,
        "catchup_window": catchup_window,
        "note": note,
    }
    options.update({name: value for name, value in given.items() if value is not None})

    async def go(client: Client) -> ScheduleSummary:
        handle = await client.create_schedule(schedule_id, workflow_type, *args, **options)
        return await handle.describe(upcoming=0, recent=0)

    _done(as_json, "created", _with_client(settings, go))


@app.command("list")
def list_command(
    status: Annotated[ScheduleStatus | None, typer.Option("--status")] = None,
    workflow_type: Annotated[str | None, typer.Option("--workflow-type")] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, max=1000)] = 100,
    as_json: JsonOption = False,
    database_url: DatabaseUrlOption = None,
    namespace: NamespaceOption = None,
) -> None:
    """The namespace's schedules by id."""
    settings = build_settings(database_url=database_url, namespace=namespace)
    found = _with_client(
        settings,
        lambda c: c.list_schedules(status=status, workflow_type=workflow_type, limit=limit),
    )
    if as_json:
        output.emit_json({"schedules": [_summary(s) for s in found]})
        return
    table = Table("schedule id", "status", "workflow type", "next fire", "fires", "failures")
    for s in found:
        nxt = s.next_fire_at.isoformat() if s.next_fire_at else "-"
        table.add_row(
            escape(s.schedule_id),
            s.status.value,
            escape(s.action.workflow_type),
            nxt,
            str(s.fires_count),
            str(s.failures_count),
        )
    output.stdout().print(table)


@app.command("describe")
def describe_command(
    schedule_id: IdArgument,
    as_json: JsonOption = False,
    database_url: DatabaseUrlOption = None,
    namespace: NamespaceOption = None,
) -> None:
    """The schedule, its counters, next fire times and recent fires."""
    settings = build_settings(database_url=database_url, namespace=namespace)
    found = _with_client(settings, lambda c: c.get_schedule_handle(schedule_id).describe())
    document = {
        **_summary(found),
        "next_fire_times": [t.isoformat() for t in found.next_fire_times],
    }
    document["recent_fires"] = [_fire(f) for f in found.recent_fires]
    if as_json:
        output.emit_json(document)
        return
    for name in ("schedule_id", "status", "note", "fires_count", "failures_count"):
        output.echo(f"{name}: {document[name]}\n")
    output.echo(f"overlap_policy: {found.overlap_policy.value}\n")
    for moment in document["next_fire_times"]:
        output.echo(f"next fire: {moment}\n")
    for fire in found.recent_fires:
        output.echo(f"fired {fire.fire_at.isoformat()}: {fire.outcome.value} {fire.workflow_id}\n")


@app.command("pause")
def pause_command(
    schedule_id: IdArgument,
    note: NoteOption = None,
    as_json: JsonOption = False,
    database_url: DatabaseUrlOption = None,
    namespace: NamespaceOption = None,
) -> None:
    """Stop firing until resumed."""
    settings = build_settings(database_url=database_url, namespace=namespace)
    done = _with_client(settings, lambda c: c.get_schedule_handle(schedule_id).pause(note))
    _done(as_json, "paused", done)


@app.command("resume")
def resume_command(
    schedule_id: IdArgument,
    note: NoteOption = None,
    as_json: JsonOption = False,
    database_url: DatabaseUrlOption = None,
    namespace: NamespaceOption = None,
) -> None:
    """Fire again from the next fire time after now."""
    settings = build_settings(database_url=database_url, namespace=namespace)
    done = _with_client(settings, lambda c: c.get_schedule_handle(schedule_id).resume(note))
    _done(as_json, "resumed", done)


@app.command("trigger")
def trigger_command(
    schedule_id: IdArgument,
    overlap_policy: OverlapOption = None,
    as_json: JsonOption = False,
    database_url: DatabaseUrlOption = None,
    namespace: NamespaceOption = None,
) -> None:
    """Fire now (this second), under the overlap policy or the one given."""
    settings = build_settings(database_url=database_url, namespace=namespace)
    fired = _with_client(
        settings,
        lambda c: c.get_schedule_handle(schedule_id).trigger(overlap_policy=overlap_policy),
    )
    if as_json:
        output.emit_json(_fire(fired))
        return
    why = f" ({fired.reason})" if fired.reason else ""
    output.echo(f"{fired.outcome.value} {fired.workflow_id}{why}\n")


@app.command("backfill")
def backfill_command(
    schedule_id: IdArgument,
    start: Annotated[str, typer.Option("--start", help="First time, ISO 8601 (included).")],
    end: Annotated[str, typer.Option("--end", help="Last time, ISO 8601 (excluded).")],
    overlap_policy: OverlapOption = None,
    as_json: JsonOption = False,
    database_url: DatabaseUrlOption = None,
    namespace: NamespaceOption = None,
) -> None:
    """Fire every fire time in [start, end) not fired before (at most 1,000)."""
    begins, ends = _moment(start, "--start"), _moment(end, "--end")
    if ends <= begins:
        _usage("--end must be after --start")
    settings = build_settings(database_url=database_url, namespace=namespace)
    fires = _with_client(
        settings,
        lambda c: c.get_schedule_handle(schedule_id).backfill(
            begins, ends, overlap_policy=overlap_policy
        ),
    )
    if as_json:
        output.emit_json(
            {
                "schedule_id": schedule_id,
                "outcome": "backfill_started",
                "fires_attempted": len(fires),
                "results": [_fire(f) for f in fires],
            }
        )
        return
    for fire in fires:
        output.echo(f"{fire.fire_at.isoformat()}: {fire.outcome.value} {fire.workflow_id}\n")
    output.echo(f"{len(fires)} fire time(s) in range\n")


@app.command("update")
def update_command(
    schedule_id: IdArgument,
    cron: CronOption = None,
    interval: IntervalOption = None,
    timezone: TimezoneOption = None,
    overlap_policy: OverlapOption = None,
    jitter: JitterOption = None,
    max_runs: MaxRunsOption = None,
    catchup_window: CatchupOption = None,
    note: NoteOption = None,
    as_json: JsonOption = False,
    database_url: DatabaseUrlOption = None,
    namespace: NamespaceOption = None,
) -> None:
    """Change the fields given; --cron/--interval/--timezone replace the whole spec."""
    spec = _spec(cron, interval, timezone) if cron or interval or timezone else None
    _policies(
        overlap_policy=overlap_policy,
        jitter_seconds=jitter,
        max_runs=max_runs,
        catchup_window_seconds=catchup_window,
    )
    settings = build_settings(database_url=database_url, namespace=namespace)
    done = _with_client(
        settings,
        lambda c: c.get_schedule_handle(schedule_id).update(
            spec=spec,
            overlap_policy=overlap_policy,
            jitter=jitter,
            max_runs=max_runs,
            catchup_window=catchup_window,
            note=note,
        ),
    )
    _done(as_json, "updated", done)


@app.command("delete")
def delete_command(
    schedule_id: IdArgument,
    as_json: JsonOption = False,
    database_url: DatabaseUrlOption = None,
    namespace: NamespaceOption = None,
) -> None:
    """Delete the schedule; runs it started go on."""
    settings = build_settings(database_url=database_url, namespace=namespace)
    _with_client(settings, lambda c: c.get_schedule_handle(schedule_id).delete())
    if as_json:
        output.emit_json({"schedule_id": schedule_id, "outcome": "deleted"})
    else:
        output.echo(f"deleted {schedule_id}\n")
