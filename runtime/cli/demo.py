"""`burrow demo`: the sample order workflow end to end, with an in-process worker."""

from __future__ import annotations

from rich.pretty import Pretty

from burrow.cli import output
from burrow.cli.options import (
    DatabaseUrlOption,
    JsonOption,
    LogJsonOption,
    LogLevel,
    LogLevelOption,
    NamespaceOption,
    WorkerAmqpUrlOption,
    build_settings,
)


def demo_command(
    as_json: JsonOption = False,
    log_level: LogLevelOption = LogLevel.WARNING,
    log_json: LogJsonOption = None,
    database_url: DatabaseUrlOption = None,
    namespace: NamespaceOption = None,
    amqp_url: WorkerAmqpUrlOption = None,
) -> None:
    """Run the sample order workflow end to end with an in-process worker."""
    from burrow.demo import run_demo
    from burrow.logging import configure_logging

    settings = build_settings(database_url=database_url, namespace=namespace, amqp_url=amqp_url)
    configure_logging(json=log_json, level=log_level.value)
    result, events = output.run(run_demo(settings))
    if as_json:
        output.emit_json({"result": result, "history": [event.to_json() for event in events]})
        return
    out = output.stdout()
    out.print("[bold]result[/]")
    out.print(Pretty(result))
    out.print(output.history_table(events))
