"""The flags the `burrow` commands share, and the settings built from them.

Each flag mirrors an environment variable (`envvar=`); `build_settings()` hands the flags that were
given to `Settings.load()`, the loader `Worker` and `Client.connect()` use too, so a flag beats its
variable and a variable beats the default in every command alike.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from enum import StrEnum
from typing import Annotated, Any

import typer

from burrow.cli.output import EXIT_USAGE, fail, redact_url
from burrow.config import DEFAULT_DATABASE_URL, DEFAULT_NAMESPACE, Settings
from burrow.errors import ConfigurationError
from burrow.store.engine import async_url

JSON_KINDS: dict[type, str] = {
    dict: "an object",
    str: "a string",
    int: "a number",
    float: "a number",
    bool: "a boolean",
    type(None): "null",
}


class LogLevel(StrEnum):
    """Log levels the commands accept."""

    DEBUG = "debug"
    INFO = "info"
    WARNING = "warning"
    ERROR = "error"


def _amqp_url(text: str) -> Any:
    return typer.Option("--amqp-url", envvar="BURROW_AMQP_URL", help=text)


# -- connection ----------------------------------------------------------------------------------

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
        help="Namespace of the workflows and task queues.",
    ),
]
# Wakes are hints (C1): without RabbitMQ, or with BURROW_WAKES=0, everything still works by polling.
ClientAmqpUrlOption = Annotated[
    str | None,
    _amqp_url(
        "RabbitMQ URL: when a start, signal or cancel commits, the client wakes workers through it"
        " (if it is down, workers find the work by polling Postgres; BURROW_WAKES=0: no wakes)."
    ),
]
WorkerAmqpUrlOption = Annotated[
    str | None,
    _amqp_url(
        "RabbitMQ URL: the worker takes wakes from it and publishes wakes after its commits"
        " (if it is down, the worker polls Postgres; BURROW_WAKES=0: no wakes)."
    ),
]
QueuesAmqpUrlOption = Annotated[
    str | None,
    _amqp_url("RabbitMQ URL whose wake queues are counted (messages and consumers)."),
]

# -- output and logs -----------------------------------------------------------------------------

JsonOption = Annotated[
    bool, typer.Option("--json", help="Print one machine-readable JSON document on stdout.")
]
LogLevelOption = Annotated[
    LogLevel, typer.Option("--log-level", envvar="BURROW_LOG_LEVEL", case_sensitive=False)
]
LogJsonOption = Annotated[
    bool | None,
    typer.Option(
        "--log-json/--log-console",
        envvar="BURROW_LOG_JSON",
        show_default="JSON when stderr is not a terminal",
        help="Log format on stderr.",
    ),
]

# -- workflows -----------------------------------------------------------------------------------

WorkflowIdArgument = Annotated[str, typer.Argument(help="The workflow id.", show_default=False)]
RunIdOption = Annotated[
    str | None, typer.Option("--run-id", help="A specific run (default: the latest run).")
]
InputOption = Annotated[
    str,
    typer.Option("--input", help="A JSON array of positional arguments, e.g. '[1, \"a\"]'."),
]
ReasonOption = Annotated[str, typer.Option("--reason", help="Why; recorded in history.")]


def build_settings(
    *,
    database_url: str | None = None,
    namespace: str | None = None,
    amqp_url: str | None = None,
    worker: Mapping[str, object] | None = None,
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
    try:
        settings = Settings.load(
            database_url=database_url, namespace=namespace, amqp_url=amqp_url, worker=worker
        )
    except ConfigurationError as exc:
        fail(str(exc), code=EXIT_USAGE)
    try:
        async_url(settings.database_url)
    except Exception:  # the URL parser's own error type is the store's business
        fail(f"invalid database URL {redact_url(settings.database_url)!r}", code=EXIT_USAGE)
    return settings


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
