"""The `burrow` command line (typer + rich): worker, server, matching, workflow, replay, etc.

One module per command; the flags they share, each mirroring an environment variable, live in
`burrow.cli.options`, and what they print in `burrow.cli.output`.
"""

from __future__ import annotations

from typing import Annotated

import typer

from burrow.cli import (
    demo,
    matching,
    migrate,
    namespaces,
    queues,
    replay,
    schedules,
    search_attributes,
    server,
    sessions,
    system,
    worker,
    workflow,
)

app = typer.Typer(
    name="burrow",
    help="Burrow: durable workflows on Postgres.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,
)


def _print_version(value: bool) -> None:
    if value:
        import burrow

        typer.echo(f"burrow {burrow.__version__}")
        raise typer.Exit()


@app.callback()
def show_version(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            callback=_print_version,
            is_eager=True,
            help="Print the installed version and exit.",
        ),
    ] = False,
) -> None:
    """Burrow: durable workflows on Postgres."""


app.add_typer(workflow.app, name="workflow")
app.add_typer(system.app, name="system")
app.add_typer(sessions.app, name="sessions")
app.add_typer(replay.app, name="replay")
app.add_typer(search_attributes.app, name="search-attribute")
app.add_typer(namespaces.app, name="namespace")
app.add_typer(schedules.app, name="schedule")
app.command("queues")(queues.queues_command)
app.command("migrate")(migrate.migrate_command)
app.command("demo")(demo.demo_command)
app.command("worker")(worker.worker_command)
app.command("server")(server.server_command)
app.command("matching")(matching.matching_command)


def main() -> None:
    """Entry point of the `burrow` script and `python -m burrow`."""
    from burrow.logging import configure_logging

    # Logs go to stderr (stdout carries --json output); `worker` and `demo` reconfigure.
    configure_logging(level="WARNING")
    app(prog_name="burrow")
