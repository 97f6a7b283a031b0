"""`burrow queues`: backlog per task queue from Postgres, and wake queues from RabbitMQ (M8)."""

from __future__ import annotations

from typing import Annotated, TypedDict

import typer
from rich.table import Table

from burrow.broker.errors import BrokerUnavailable
from burrow.broker.inspect import QueueDepth, inspect_queues
from burrow.broker.messages import TaskKind
from burrow.broker.topology import Topology
from burrow.cli import output
from burrow.cli.options import (
    DatabaseUrlOption,
    JsonOption,
    NamespaceOption,
    QueuesAmqpUrlOption,
    build_settings,
)
from burrow.config import Settings
from burrow.store import Store


class QueueDocument(TypedDict):
    """One queue's figures, as `burrow queues --json` prints them."""

    namespace: str
    connection: str
    queue: str
    kind: str
    ready: int
    scheduled: int
    leased: int
    oldest_ready_seconds: float | None
    live_workers: int
    blocked: int
    wake_queue: str
    wake_messages: int | None
    wake_consumers: int | None
    broker_error: str | None


async def collect(settings: Settings, *, all_namespaces: bool) -> list[QueueDocument]:
    """One document per (namespace, connection, queue, kind) with durable and broker figures."""
    store = Store.connect(settings.database_url, pool_size=1)
    try:
        stats = await store.queue_stats(namespace=None if all_namespaces else settings.namespace)
    finally:
        await store.close()
    topology = Topology(prefix=settings.wakes.prefix, queue_type=settings.wakes.queue_type)
    names = {
        topology.queue_name(
            namespace=s.namespace, connection=s.connection, queue=s.queue, kind=TaskKind(s.kind)
        ): s
        for s in stats
    }
    depths: dict[str, QueueDepth | None] = {}
    broker_error = None
    try:
        depths = await inspect_queues(settings.amqp_urls, names)
    except BrokerUnavailable as exc:
        broker_error = str(exc)
    documents: list[QueueDocument] = []
    for name, s in names.items():
        depth = depths.get(name)
        documents.append(
            {
                "namespace": s.namespace,
                "connection": s.connection,
                "queue": s.queue,
                "kind": s.kind,
                "ready": s.ready,
                "scheduled": s.scheduled,
                "leased": s.leased,
                "oldest_ready_seconds": s.oldest_ready_seconds,
                "live_workers": s.live_workers,
                "blocked": s.blocked,
                "wake_queue": name,
                "wake_messages": None if depth is None else depth.messages,
                "wake_consumers": None if depth is None else depth.consumers,
                "broker_error": broker_error,
            }
        )
    return documents


def queues_command(
    all_namespaces: Annotated[
        bool, typer.Option("--all-namespaces", help="Every namespace, not just the current one.")
    ] = False,
    as_json: JsonOption = False,
    database_url: DatabaseUrlOption = None,
    namespace: NamespaceOption = None,
    amqp_url: QueuesAmqpUrlOption = None,
) -> None:
    """Per connection and queue: ready depth, age, leased, live workers, blocked, wakes."""
    settings = build_settings(database_url=database_url, namespace=namespace, amqp_url=amqp_url)
    documents = output.run(collect(settings, all_namespaces=all_namespaces))
    if as_json:
        output.emit_json(documents)
        return
    table = Table(
        "namespace",
        "connection",
        "queue",
        "kind",
        "ready",
        "oldest ready",
        "leased",
        "workers",
        "blocked",
        "wakes",
        "consumers",
    )
    for d in documents:
        oldest = d["oldest_ready_seconds"]
        table.add_row(
            d["namespace"],
            d["connection"],
            d["queue"],
            d["kind"],
            str(d["ready"]),
            "-" if oldest is None else f"{oldest:.1f}s",
            str(d["leased"]),
            str(d["live_workers"]),
            str(d["blocked"]),
            "-" if d["wake_messages"] is None else str(d["wake_messages"]),
            "-" if d["wake_consumers"] is None else str(d["wake_consumers"]),
        )
    output.stdout().print(table)
    if documents and documents[0]["broker_error"]:
        output.stdout().print(f"[yellow]broker: {documents[0]['broker_error']}[/yellow]")
