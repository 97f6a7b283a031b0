"""`burrow sessions list|show`: worker sessions as operators see them (W9, PROTOCOL.md 6.4)."""

from __future__ import annotations

import json
from dataclasses import asdict
from datetime import datetime, timedelta
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from burrow.cli import output
from burrow.cli.options import DatabaseUrlOption, JsonOption, NamespaceOption, build_settings
from burrow.config import Settings
from burrow.store import Store
from burrow.store.models import SessionCounts, SessionState, WorkerSessionInfo

app = typer.Typer(
    name="sessions",
    help="Worker sessions: owner, queue, requirements, leases and state.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
)

StateOption = Annotated[
    SessionState | None,
    typer.Option("--state", help="Only sessions in this state.", show_default=False),
]
LimitOption = Annotated[int, typer.Option("--limit", min=1, help="At most this many sessions.")]
SessionIdArgument = Annotated[str, typer.Argument(help="The session id.")]


def _owner_stale(settings: Settings) -> timedelta:
    """When a silent holder counts as gone: the claims' and repair pass's threshold."""
    return timedelta(seconds=settings.sticky.owner_stale_seconds)


async def collect_list(
    settings: Settings, *, state: SessionState | None, limit: int
) -> tuple[list[WorkerSessionInfo], SessionCounts]:
    """The newest sessions of the namespace and its counts per state."""
    store = Store.connect(settings.database_url, pool_size=1)
    try:
        return await store.list_worker_sessions(
            namespace=settings.namespace,
            state=state,
            limit=limit,
            owner_stale=_owner_stale(settings),
        )
    finally:
        await store.close()


async def collect_one(settings: Settings, session_id: str) -> WorkerSessionInfo | None:
    """One session of the namespace, or None."""
    store = Store.connect(settings.database_url, pool_size=1)
    try:
        return await store.get_worker_session(
            namespace=settings.namespace, session_id=session_id, owner_stale=_owner_stale(settings)
        )
    finally:
        await store.close()


def list_document(
    namespace: str, listed: list[WorkerSessionInfo], counts: SessionCounts
) -> dict[str, object]:
    """The listing as the operator API serves it: `{namespace, metrics, sessions}`."""
    return {
        "namespace": namespace,
        "metrics": asdict(counts),
        "sessions": [info.to_json() for info in listed],
    }


def _when(value: datetime | None) -> str:
    return "-" if value is None else f"{value:%Y-%m-%d %H:%M:%S}"


@app.command("list")
def list_command(
    state: StateOption = None,
    limit: LimitOption = 100,
    as_json: JsonOption = False,
    database_url: DatabaseUrlOption = None,
    namespace: NamespaceOption = None,
) -> None:
    """The namespace's newest worker sessions, with counts per state."""
    settings = build_settings(database_url=database_url, namespace=namespace)
    listed, counts = output.run(collect_list(settings, state=state, limit=limit))
    if as_json:
        output.emit_json(list_document(settings.namespace, listed, counts))
        return
    table = Table(
        "session_id", "state", "owner", "queue", "requirements", "active", "lease expires", "ttl"
    )
    for info in listed:
        reason = f" ({info.failure_reason.value})" if info.failure_reason else ""
        table.add_row(
            escape(info.session_id),
            f"{info.state.value}{reason}",
            escape(info.lease_owner or "-"),
            escape(info.queue or "-"),
            escape(", ".join(info.requirements) or "-"),
            f"{info.active_activity_count}/{info.max_concurrent_activities}",
            _when(info.lease_expires_at),
            _when(info.ttl_expires_at),
        )
    out = output.stdout()
    out.print(table)
    figures = ", ".join(f"{name} {value}" for name, value in asdict(counts).items())
    out.print(f"namespace {escape(settings.namespace)}: {figures}")


@app.command("show")
def show_command(
    session_id: SessionIdArgument,
    as_json: JsonOption = False,
    database_url: DatabaseUrlOption = None,
    namespace: NamespaceOption = None,
) -> None:
    """One worker session: owner and its liveness, leases, requirements, counts, failure."""
    settings = build_settings(database_url=database_url, namespace=namespace)
    info = output.run(collect_one(settings, session_id))
    if info is None:
        output.fail(
            f"worker_session_not_found: no session {session_id!r}"
            f" in namespace {settings.namespace!r}"
        )
    if as_json:
        output.emit_json({"namespace": settings.namespace, "session": info.to_json()})
        return
    table = Table("field", "value")
    for key, value in info.to_json().items():
        shown = json.dumps(value) if isinstance(value, dict | list) else str(value)
        table.add_row(key, escape(shown))
    output.stdout().print(table)
