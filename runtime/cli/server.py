"""`burrow server`: the Durable Workflow v2 HTTP API on the store (PROTOCOL.md, SPEC M4b)."""

from __future__ import annotations

from typing import Annotated

import typer

from burrow.cli import output
from burrow.cli.options import (
    DatabaseUrlOption,
    LogJsonOption,
    LogLevel,
    LogLevelOption,
    NamespaceOption,
    build_settings,
)
from burrow.errors import ConfigurationError

HostOption = Annotated[
    str | None,
    typer.Option(
        "--host",
        envvar="BURROW_SERVER_HOST",
        help="Address to bind; beyond loopback only with a token set (BURROW_AUTH_TOKEN).",
    ),
]
PortOption = Annotated[
    int | None,
    typer.Option("--port", envvar="BURROW_SERVER_PORT", help="Port to listen on (default 8080)."),
]


def server_command(
    host: HostOption = None,
    port: PortOption = None,
    database_url: DatabaseUrlOption = None,
    namespace: NamespaceOption = None,
    log_level: LogLevelOption = LogLevel.INFO,
    log_json: LogJsonOption = None,
) -> None:
    """Serve the worker protocol and control plane over HTTP for external workers and clients."""
    from burrow.server.asgi_app import serve
    from burrow.server.settings import ServerSettings

    settings = build_settings(database_url=database_url, namespace=namespace)
    try:
        server = ServerSettings.load(host=host, port=port, default_namespace=settings.namespace)
        server.check_bind()
    except ConfigurationError as exc:
        output.fail(str(exc), code=output.EXIT_USAGE)
    from burrow.logging import configure_logging

    configure_logging(json=log_json, level=log_level.value)
    output.run(serve(server, settings))
