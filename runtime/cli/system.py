"""`burrow system ...`: operator views of the whole system (PROTOCOL.md 15)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import typer
from rich.markup import escape
from rich.table import Table

from burrow.cli import output
from burrow.cli.options import DatabaseUrlOption, JsonOption, NamespaceOption, build_settings
from burrow.config import Settings
from burrow.store import Store
from burrow.store.metrics import OperatorMetrics

app = typer.Typer(
    name="system",
    help="Operator views of the whole system.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
)


async def collect(settings: Settings) -> OperatorMetrics:
    """The namespace's operator metrics, with the sticky settings this process runs with."""
    store = Store.connect(settings.database_url, pool_size=1)
    try:
        return await store.operator_metrics(
            namespace=settings.namespace,
            sticky_enabled=settings.sticky.enabled,
            sticky_ttl_seconds=settings.sticky.ttl_seconds,
            live_after=timedelta(seconds=settings.sticky.owner_stale_seconds),
        )
    finally:
        await store.close()


def document(namespace: str, snapshot: OperatorMetrics) -> dict[str, Any]:
    """The JSON document, shaped as the operator API serves it (PROTOCOL.md 15)."""
    return {"namespace": namespace, "operator_metrics": snapshot.model_dump(mode="json")}


@app.command("operator-metrics")
def operator_metrics_command(
    as_json: JsonOption = False,
    database_url: DatabaseUrlOption = None,
    namespace: NamespaceOption = None,
) -> None:
    """Sticky execution of a namespace: bindings, last-minute replay modes, worker caches (S11)."""
    settings = build_settings(database_url=database_url, namespace=namespace)
    snapshot = output.run(collect(settings))
    if as_json:
        output.emit_json(document(settings.namespace, snapshot))
        return
    out = output.stdout()
    out.print(
        f"namespace {escape(settings.namespace)} at {snapshot.generated_at:%Y-%m-%d %H:%M:%S %Z}"
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
