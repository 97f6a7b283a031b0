"""The flags the `burrow` commands share, and the settings built from them.

Each flag mirrors an environment variable (`envvar=`); `build_settings()` hands the flags that were
given to `Settings.load()`, the loader `Worker` and `Client.connect()` use too, so a flag beats its
variable and a variable beats the default in every command alike.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from enum import StrEnum
from typing import Annotated

import typer
from typer.models import OptionInfo

from burrow.cli import inputs
from burrow.cli.output import EXIT_USAGE, fail
from burrow.config import DEFAULT_DATABASE_URL, DEFAULT_NAMESPACE, Settings
from burrow.errors import ConfigurationError
from burrow.protocol.shapes import JsonValue
from burrow.store.engine import async_url


class LogLevel(StrEnum):
    """Log levels the commands accept."""

    DEBUG = "debug"
    INFO = "info"
    WARNING = "warning"
    ERROR = "error"


AMQP_CLUSTER_HELP = "A cluster: its nodes' URLs, comma-separated, tried in order."


def _amqp_url(text: str) -> OptionInfo:
    option: OptionInfo = typer.Option(
        "--amqp-url", envvar="BURROW_AMQP_URL", help=f"{text} {AMQP_CLUSTER_HELP}"
    )
    return option


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


def _checked_workflow_id(value: str) -> str:
    return _usable(inputs.check_id, value, what="workflow id")


def _checked_new_workflow_id(value: str | None) -> str | None:
    if value is None:
        return None
    return _usable(
        inputs.check_id, value, what="--id", if_empty="; leave --id out for a generated id"
    )


def _checked_signal_id(value: str | None) -> str | None:
    return None if value is None else _usable(inputs.check_id, value, what="--signal-id")


def _checked_run_id(value: str | None) -> str | None:
    return None if value is None else _usable(inputs.check_run_id, value)


def _usable(check: Callable[..., str], value: str, **kwargs: str) -> str:
    """Run one of the `inputs` checks as a flag callback: before any connection, exit 2."""
    try:
        return check(value, **kwargs)
    except inputs.InputError as exc:
        fail(str(exc), code=EXIT_USAGE)


# Issue 13 item 8: ids and run ids are checked while the flags are parsed, so every command
# that takes them refuses a bad one before it connects to anything.
WorkflowIdArgument = Annotated[
    str,
    typer.Argument(help="The workflow id.", show_default=False, callback=_checked_workflow_id),
]
NewWorkflowIdOption = Annotated[
    str | None,
    typer.Option(
        "--id",
        help="Workflow id: non-empty, printable, no leading or trailing spaces"
        " (default: a new UUID).",
        callback=_checked_new_workflow_id,
    ),
]
RunIdOption = Annotated[
    str | None,
    typer.Option(
        "--run-id",
        help="A specific run, by its UUID (default: the latest run).",
        callback=_checked_run_id,
    ),
]
SignalIdOption = Annotated[
    str | None,
    typer.Option(
        "--signal-id",
        help="Idempotency key: a repeated id is delivered once.",
        callback=_checked_signal_id,
    ),
]
InputOption = Annotated[
    str,
    typer.Option(
        "--input",
        help="The positional arguments as a JSON array, e.g. '[1, \"a\"]';"
        " @FILE reads the array from a file, - from stdin.",
    ),
]
ReasonOption = Annotated[str, typer.Option("--reason", help="Why; recorded in history.")]


def build_settings(
    *,
    database_url: str | None = None,
    namespace: str | None = None,
    amqp_url: str | None = None,
    worker: Mapping[str, object] | None = None,
    wakes: Mapping[str, object] | None = None,
    sticky: Mapping[str, object] | None = None,
) -> Settings:
    """Settings from BURROW_* environment variables, overridden by the flags that were given.

    Args:
        database_url: The --database-url flag, if given.
        namespace: The --namespace flag, if given.
        amqp_url: The --amqp-url flag, if given.
        worker: WorkerSettings fields from flags; None values are ignored.
        wakes: WakeSettings fields from flags; None values are ignored.
        sticky: StickySettings fields from flags; None values are ignored.

    Returns:
        The validated settings; invalid values exit with code 2.
    """
    try:
        settings = Settings.load(
            database_url=database_url,
            namespace=namespace,
            amqp_url=amqp_url,
            worker=worker,
            wakes=wakes,
            sticky=sticky,
        )
    except ConfigurationError as exc:
        fail(str(exc), code=EXIT_USAGE)
    try:
        async_url(settings.database_url)
    except ConfigurationError as exc:
        fail(f"invalid {exc}", code=EXIT_USAGE)
    return settings


def check_workflow_timeouts(execution: float | None, run: float | None) -> None:
    """Refuse bad --execution-timeout / --run-timeout values with exit code 2, before connecting."""
    try:
        inputs.check_workflow_timeouts(execution, run)
    except inputs.InputError as exc:
        fail(str(exc), code=EXIT_USAGE)


def parse_input(value: str) -> list[JsonValue]:
    """Parse --input: a JSON array, `@FILE` or `-` (stdin); anything unusable exits with code 2.

    Args:
        value: The option's value.

    Returns:
        The positional arguments.
    """
    try:
        return inputs.load_input(value, stdin=typer.get_binary_stream("stdin"))
    except inputs.InputError as exc:
        fail(str(exc), code=EXIT_USAGE)
