"""`burrow namespace create|list|describe|update|delete`: namespaces as records (issue 30)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated, Any, TypeVar

import typer
from rich.markup import escape
from rich.table import Table

from burrow.cli import output
from burrow.cli.options import DatabaseUrlOption, JsonOption, build_settings
from burrow.store import Store, namespaces
from burrow.store.namespace_errors import InvalidNamespace
from burrow.store.namespaces import NamespaceRecord

app = typer.Typer(
    name="namespace",
    help="Namespaces: create, list, describe, update and delete, with their retention.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
)
T = TypeVar("T")


def _checked(check: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """A typer callback: a value the store would refuse is bad usage (exit 2), before connecting."""

    def callback(value: Any) -> Any:
        try:
            check(value)
        except InvalidNamespace as exc:
            raise typer.BadParameter(str(exc)) from exc
        return value

    return callback


NameArgument = Annotated[
    str, typer.Argument(help="The namespace's name.", callback=_checked(namespaces.check_name))
]
DescriptionOption = Annotated[
    str | None,
    typer.Option(
        "--description",
        help="What the namespace is for.",
        callback=_checked(namespaces.check_description),
    ),
]
RetentionOption = Annotated[
    int | None,
    typer.Option(
        "--retention-days",
        help="Days a closed run is kept before the repair pass deletes it (1-365).",
        callback=_checked(namespaces.check_retention),
    ),
]
ForceOption = Annotated[
    bool,
    typer.Option("--force", help="Delete its runs and schedules too, if it holds any."),
]


def _on_store(database_url: str | None, work: Callable[[Store], Awaitable[T]]) -> T:
    settings = build_settings(database_url=database_url)

    async def run() -> T:
        store = Store.connect(settings.database_url, pool_size=1)
        try:
            return await work(store)
        finally:
            await store.close()

    return output.run(run())


def _show(record: NamespaceRecord, as_json: bool, outcome: str | None = None) -> None:
    document = record.to_wire()
    if as_json:
        output.emit_json(document if outcome is None else {**document, "outcome": outcome})
        return
    if outcome is not None:
        output.echo(f"{outcome} namespace {record.name}")
    for key in ("name", "description", "retention_days", "status", "created_at", "updated_at"):
        output.echo(f"{key}: {document[key]}")


@app.command("create")
def create_command(
    name: NameArgument,
    description: DescriptionOption = None,
    retention_days: RetentionOption = None,
    as_json: JsonOption = False,
    database_url: DatabaseUrlOption = None,
) -> None:
    """Create a namespace (closed runs kept 30 days unless --retention-days says otherwise)."""
    record = _on_store(
        database_url,
        lambda store: store.create_namespace(
            name=name, description=description, retention_days=retention_days
        ),
    )
    _show(record, as_json, "created")


@app.command("list")
def list_command(as_json: JsonOption = False, database_url: DatabaseUrlOption = None) -> None:
    """Every namespace, with its retention."""
    records = _on_store(database_url, lambda store: store.list_namespaces())
    if as_json:
        output.emit_json({"namespaces": [record.to_wire() for record in records]})
        return
    table = Table("name", "retention days", "status", "description")
    for record in records:
        table.add_row(
            escape(record.name),
            "kept" if record.retention_days is None else str(record.retention_days),
            record.status,
            escape(record.description or ""),
        )
    output.stdout().print(table)


@app.command("describe")
def describe_command(
    name: NameArgument, as_json: JsonOption = False, database_url: DatabaseUrlOption = None
) -> None:
    """One namespace's description, retention and timestamps."""
    _show(_on_store(database_url, lambda store: store.describe_namespace(name=name)), as_json)


@app.command("update")
def update_command(
    name: NameArgument,
    description: DescriptionOption = None,
    retention_days: RetentionOption = None,
    as_json: JsonOption = False,
    database_url: DatabaseUrlOption = None,
) -> None:
    """Change a namespace's description and/or retention window."""
    record = _on_store(
        database_url,
        lambda store: store.update_namespace(
            name=name, description=description, retention_days=retention_days
        ),
    )
    _show(record, as_json, "updated")


@app.command("delete")
def delete_command(
    name: NameArgument,
    force: ForceOption = False,
    as_json: JsonOption = False,
    database_url: DatabaseUrlOption = None,
) -> None:
    """Delete a namespace; refused while it holds runs or schedules, unless --force."""
    deleted = _on_store(database_url, lambda store: store.delete_namespace(name=name, force=force))
    if as_json:
        output.emit_json({"name": name.lower(), "outcome": "deleted", "deleted": deleted})
        return
    rows = ", ".join(f"{count} {table}" for table, count in deleted.items()) or "no rows"
    output.echo(f"deleted namespace {name.lower()} ({rows})")
