"""`burrow system ...`: operator views of the whole system (PROTOCOL.md 15)."""

from __future__ import annotations

import typer
from rich.markup import escape
from rich.table import Table

from burrow.cli import output
from burrow.cli.options import DatabaseUrlOption, JsonOption, NamespaceOption, build_settings
from burrow.config import Settings
from burrow.errors import ConfigurationError
from burrow.store import Store
from burrow.store.metrics import OperatorMetrics

app = typer.Typer(
    name="system",
    help="Operator views of the whole system.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
)


async def collect(settings: Settings) -> OperatorMetrics:
    """The namespace's operator metrics, with the settings this process runs with."""
    from burrow.server import operator_metrics

    store = Store.connect(settings.database_url, pool_size=1)
    try:
        return await operator_metrics.snapshot(store, settings, settings.namespace)
    finally:
        await store.close()


def document(namespace: str, snapshot: OperatorMetrics, settings: Settings) -> dict[str, object]:
    """The JSON document the operator API serves (PROTOCOL.md 15), matching role included.

    The server's own figures in it (lease lengths, poll probe) come from the same
    BURROW_SERVER_* variables `burrow server` reads.
    """
    from burrow.server import operator_metrics
    from burrow.server.settings import ServerSettings

    try:
        server = ServerSettings.load(default_namespace=settings.namespace)
    except ConfigurationError as exc:
        output.fail(str(exc), code=output.EXIT_USAGE)
    return operator_metrics.document(namespace, snapshot, settings, server)


@app.command("operator-metrics")
def operator_metrics_command(
    as_json: JsonOption = False,
    database_url: DatabaseUrlOption = None,
    namespace: NamespaceOption = None,
) -> None:
    """Backlog, workers, sticky execution (S11), sessions and the matching role of a namespace."""
    settings = build_settings(database_url=database_url, namespace=namespace)
    snapshot = output.run(collect(settings))
    if as_json:
        output.emit_json(document(settings.namespace, snapshot, settings))
        return
    out = output.stdout()
    out.print(
        f"namespace {escape(settings.namespace)} at {snapshot.generated_at:%Y-%m-%d %H:%M:%S %Z}"
    )
    backlog = Table(
        "kind", "ready", "delayed", "leased", "stale leases", "unhealthy", "oldest ready (s)"
    )
    for kind in snapshot.backlog.by_kind:
        age = kind.oldest_ready_age_seconds
        backlog.add_row(
            kind.kind,
            str(kind.ready),
            str(kind.delayed),
            str(kind.leased),
            str(kind.stale_leases) if not kind.stale_leases else f"[yellow]{kind.stale_leases}[/]",
            str(kind.unhealthy) if not kind.unhealthy else f"[yellow]{kind.unhealthy}[/]",
            "-" if age is None else f"{age:.1f}",
        )
    out.print(backlog)
    fleet = snapshot.workers
    out.print(
        f"workers: {fleet.active_workers} live, {fleet.stale_workers} stale,"
        f" {fleet.draining_workers} draining, on {fleet.active_worker_scopes} queue(s),"
        f" {fleet.slot_capacity} slot(s) declared"
    )
    figures = Table("sticky execution", "value")
    for key, value in snapshot.sticky_execution.model_dump().items():
        shown = f"{value:.0%}" if key.endswith("_rate_last_minute") else str(value)
        figures.add_row(key, shown)
    out.print(figures)
    workers = Table(
        "worker_id", "queue", "state", "live", "size", "hits", "misses", "forced cold", "evictions"
    )
    for w in snapshot.sticky_execution_workers:
        size = f"{w.size}/{w.capacity}" + (" [yellow]pressure[/]" if w.capacity_pressure else "")
        workers.add_row(
            escape(w.worker_id),
            escape(w.task_queue),
            str(w.state),
            "yes" if w.live else "[red]no[/]",
            size,
            str(w.hit_count),
            str(w.miss_count),
            str(w.forced_cold_replay_count),
            str(w.eviction_count),
        )
    out.print(workers)
    sessions = Table("worker sessions", "count")
    for key, value in snapshot.worker_sessions.model_dump().items():
        sessions.add_row(key, str(value))
    out.print(sessions)
