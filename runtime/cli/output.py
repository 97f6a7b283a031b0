"""What the `burrow` commands print and how they exit: consoles, JSON, tables, errors."""

from __future__ import annotations

import dataclasses
import enum
import io
import json
import os
import select
import sys
import urllib.parse
from collections.abc import Coroutine, Mapping
from datetime import date, datetime
from typing import IO, NoReturn, TypeVar, cast

import typer
import uvloop
from rich.console import Console
from rich.markup import escape
from rich.pretty import Pretty
from rich.table import Table

from burrow.errors import BurrowError
from burrow.store.models import HistoryEvent

T = TypeVar("T")

EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
SUMMARY_WIDTH = 80
SUMMARY_KEYS = (
    "workflow_type",
    "activity_type",
    "execution_mode",  # local activities (A3) read as such in `burrow workflow history`
    "signal_name",
    "update_name",
    "query_name",
    "attempt_number",
    "delay_seconds",
    "change_id",
    "version",
    "exception_type",
    "message",
    "reason",
)


class WholeStdout:
    """The commands' stdout: every write lands whole, whatever the descriptor does.

    Python run unbuffered (PYTHONUNBUFFERED, usual in containers and CI) hands each write
    straight to the descriptor and drops what a short write left over. After the event loop has
    run, a write to a pipe whose reader lags comes back short (64 KiB): a long `--json` document
    was cut and the command still exited 0. This writes until everything is out.
    """

    def __init__(self) -> None:
        self.encoding = sys.stdout.encoding or "utf-8"

    def fileno(self) -> int:
        """Stdout's descriptor (consoles read a terminal's size from it)."""
        return sys.stdout.fileno()

    def flush(self) -> None:
        """Nothing is held back here; stdout's own buffer is flushed."""
        sys.stdout.flush()

    def isatty(self) -> bool:
        """Whether stdout is a terminal (consoles colour only then)."""
        return sys.stdout.isatty()

    def write(self, text: str) -> int:
        """Write all of `text`; returns its length."""
        try:
            fd = sys.stdout.fileno()
        except (AttributeError, ValueError, io.UnsupportedOperation):
            return sys.stdout.write(text)  # no descriptor (a captured stdout): its own rules
        sys.stdout.flush()  # what went through sys.stdout first stays first
        data = memoryview(text.encode(self.encoding, errors="replace"))
        while data:
            try:
                written = os.write(fd, data)
            except BlockingIOError:  # a non-blocking descriptor: wait until it takes more
                select.select([], [fd], [])
                continue
            data = data[written:]
        return len(text)


def stdout() -> Console:
    """A console on stdout (created per call: consoles read the environment)."""
    return Console(file=cast(IO[str], WholeStdout()), soft_wrap=True)


def echo(text: str) -> None:
    """Write `text` to stdout whole, as is."""
    WholeStdout().write(text)


def fail(message: str, *, code: int = EXIT_ERROR) -> NoReturn:
    """Print `error: message` in red on stderr and exit with `code`.

    Args:
        message: What went wrong.
        code: The exit code (1 for failed operations, 2 for bad usage).

    Raises:
        typer.Exit: Always.
    """
    Console(stderr=True, soft_wrap=True).print(f"[bold red]error:[/] {escape(message)}")
    raise typer.Exit(code)


def run(coro: Coroutine[object, object, T]) -> T:
    """Run a coroutine; Burrow errors, timeouts and database errors exit 1 without a traceback.

    Args:
        coro: The command's async work.

    Returns:
        The coroutine's result.
    """
    try:
        # uvloop's event loop cuts the driver's I/O overhead; workflow code never sees it (it
        # runs on the deterministic loop).
        return uvloop.run(coro)
    except BurrowError as exc:
        fail(str(exc))
    except TimeoutError as exc:
        fail(str(exc) or "timed out")
    except KeyboardInterrupt:
        fail("interrupted", code=EXIT_INTERRUPTED)
    except Exception as exc:
        if not _is_database_error(exc):
            raise
        fail(_database_error_message(exc))


def _is_database_error(exc: BaseException) -> bool:
    """A driver or SQL toolkit error the store let through untranslated."""
    return any(
        cls.__module__.split(".")[0] in ("sqlalchemy", "asyncpg") for cls in type(exc).__mro__
    )


def _database_error_message(exc: BaseException) -> str:
    detail = str(getattr(exc, "orig", None) or exc).splitlines()[0]
    message = f"database error: {detail}"
    if "does not exist" in detail:
        message += " (is the database created and migrated? run `burrow migrate`)"
    return message


def redact_url(url: str) -> str:
    """The URL with any password replaced by `***`, fit for printing.

    Args:
        url: A database or broker URL.

    Returns:
        The redacted URL.
    """
    parts = urllib.parse.urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))


def json_default(value: object) -> object:
    """What `json.dumps` writes for values it has no rule for (datetimes, enums, dataclasses)."""
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, enum.Enum):
        return value.value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, bytes):
        return value.hex()
    return str(value)


def emit_json(document: object) -> None:
    """Print one JSON document on stdout (datetimes as ISO strings).

    Args:
        document: Anything JSON-like; dataclasses, enums and datetimes are converted.
    """
    echo(json.dumps(document, default=json_default, indent=2) + "\n")


def print_result(result: object) -> None:
    """Print a workflow result prettily on stdout.

    Args:
        result: The decoded result.
    """
    stdout().print(Pretty(result))


def summarize(payload: Mapping[str, object]) -> str:
    """A short, human summary of an event payload (its most telling scalar fields).

    Args:
        payload: The event's payload.

    Returns:
        `key=value` pairs, cut to SUMMARY_WIDTH characters.
    """
    parts = [
        f"{key}={payload[key]}"
        for key in SUMMARY_KEYS
        if isinstance(payload.get(key), str | int | float | bool)
    ]
    text = ", ".join(parts)
    return text if len(text) <= SUMMARY_WIDTH else text[: SUMMARY_WIDTH - 1] + "…"


def history_table(events: list[HistoryEvent]) -> Table:
    """A rich table of history events.

    Args:
        events: The events, in sequence order.

    Returns:
        The table (sequence, event type, recorded at, summary).
    """
    table = Table("seq", "event_type", "recorded_at", "summary")
    for event in events:
        table.add_row(
            str(event.sequence),
            event.event_type,
            event.recorded_at.strftime("%H:%M:%S.%f")[:-3],
            escape(summarize(event.payload)),
        )
    return table
