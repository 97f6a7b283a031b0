"""`burrow matching`: the dedicated matching role (SPEC M4c), the repair pass in a loop.

Run it beside workers started with `DW_V2_MATCHING_ROLE_QUEUE_WAKE=0`; several may run at once.
"""

from __future__ import annotations

import asyncio
import signal
from typing import Annotated

import typer

from burrow.cli import output
from burrow.cli.options import (
    AMQP_CLUSTER_HELP,
    DatabaseUrlOption,
    LogJsonOption,
    LogLevel,
    LogLevelOption,
    build_settings,
)
from burrow.config import Settings

MatchingIdOption = Annotated[
    str | None,
    typer.Option(
        "--matching-id",
        envvar="BURROW_MATCHING_ID",
        help="Names this process in logs and on the broker. Default: unique per process start.",
    ),
]
IntervalOption = Annotated[
    float | None,
    typer.Option(
        "--repair-interval",
        envvar="BURROW_REPAIR_INTERVAL_SECONDS",
        min=0.001,
        show_default="1.0",
        help="Seconds between passes at most (sooner when a timer is due).",
    ),
]
WakeTtlOption = Annotated[
    float | None,
    typer.Option(
        "--wake-ttl",
        envvar="DW_WAKE_SIGNAL_TTL_SECONDS",
        min=0.001,
        show_default="60",
        help="Seconds: ready work older than this is woken again (its wake was lost).",
    ),
]
OwnerStaleOption = Annotated[
    float | None,
    typer.Option(
        "--owner-stale",
        envvar="BURROW_STICKY_OWNER_STALE_SECONDS",
        min=0.001,
        show_default="30",
        help="Seconds: a worker silent this long is gone (its bindings and sessions end).",
    ),
]
WakesOption = Annotated[
    bool | None,
    typer.Option(
        "--wakes/--no-wakes",
        envvar="BURROW_WAKES",
        show_default="wakes",
        help="Publish RabbitMQ wakes for the work a pass makes ready.",
    ),
]
AmqpPrefixOption = Annotated[
    str | None,
    typer.Option(
        "--amqp-prefix",
        envvar="BURROW_AMQP_PREFIX",
        show_default="burrow",
        help="RabbitMQ exchange and queue name prefix (the workers' own).",
    ),
]
MatchingAmqpUrlOption = Annotated[
    str | None,
    typer.Option(
        "--amqp-url",
        envvar="BURROW_AMQP_URL",
        help="RabbitMQ URL the wakes go to (if it is down, passes go on; workers poll)."
        f" {AMQP_CLUSTER_HELP}",
    ),
]


def matching_command(
    matching_id: MatchingIdOption = None,
    repair_interval: IntervalOption = None,
    wake_ttl: WakeTtlOption = None,
    owner_stale: OwnerStaleOption = None,
    wakes: WakesOption = None,
    amqp_prefix: AmqpPrefixOption = None,
    log_json: LogJsonOption = None,
    log_level: LogLevelOption = LogLevel.INFO,
    database_url: DatabaseUrlOption = None,
    amqp_url: MatchingAmqpUrlOption = None,
) -> None:
    """Run the repair pass in a loop until SIGTERM or SIGINT (then finish the pass, exit 0)."""
    settings = build_settings(
        database_url=database_url,
        amqp_url=amqp_url,
        worker={"repair_interval_seconds": repair_interval},
        wakes={"ttl_seconds": wake_ttl, "enabled": wakes, "prefix": amqp_prefix},
        sticky={"owner_stale_seconds": owner_stale},
    )
    from burrow.logging import configure_logging

    configure_logging(json=log_json, level=log_level.value)
    output.run(serve(settings, matching_id=matching_id))


async def serve(settings: Settings, *, matching_id: str | None = None) -> None:
    """Run the matching role until SIGTERM or SIGINT, then stop after the current pass.

    Args:
        settings: Connection, wake and repair settings.
        matching_id: The process's id (default: unique per process start).
    """
    from burrow.matching import MatchingRole

    role = MatchingRole(settings, matching_id=matching_id)
    loop = asyncio.get_running_loop()
    stopping: list[asyncio.Task[None]] = []

    def on_signal() -> None:
        if not stopping:
            stopping.append(loop.create_task(role.shutdown()))

    signals = (signal.SIGTERM, signal.SIGINT)
    for signum in signals:
        loop.add_signal_handler(signum, on_signal)
    try:
        await role.run()
        if stopping:
            await stopping[0]
    finally:
        for signum in signals:
            loop.remove_signal_handler(signum)
