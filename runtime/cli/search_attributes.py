"""`burrow search-attribute create|list|delete`: a namespace's custom search attributes."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from burrow.cli import output
from burrow.cli.options import DatabaseUrlOption, JsonOption, NamespaceOption, build_settings
from burrow.config import Settings
from burrow.errors import InvalidSearchAttribute, SearchAttributeConflict
from burrow.protocol.list_query_types import BUILTIN_ATTRIBUTES, AttributeType
from burrow.store import Store, search_attributes

app = typer.Typer(
    name="search-attribute",
    help="Custom search attributes: typed names list queries filter on.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
)


def _checked_name(name: str) -> str:
    """A malformed or built-in name is bad usage (exit 2), refused before connecting."""
    try:
        search_attributes.check_definition(name, AttributeType.KEYWORD)
    except (InvalidSearchAttribute, SearchAttributeConflict) as exc:
        raise typer.BadParameter(str(exc)) from exc
    return name


NameArgument = Annotated[str, typer.Argument(help="The attribute's name.")]
NewNameArgument = Annotated[
    str, typer.Argument(help="A letter, then letters, digits or _.", callback=_checked_name)
]
TypeArgument = Annotated[AttributeType, typer.Argument(help="The attribute's type.")]


async def _create(settings: Settings, name: str, kind: AttributeType) -> None:
    store = Store.connect(settings.database_url, pool_size=1)
    try:
        await store.register_search_attribute(
            namespace=settings.namespace, name=name, type=kind.value
        )
    finally:
        await store.close()


async def _list(settings: Settings) -> dict[str, AttributeType]:
    store = Store.connect(settings.database_url, pool_size=1)
    try:
        return await store.search_attributes(namespace=settings.namespace)
    finally:
        await store.close()


async def _delete(settings: Settings, name: str) -> int:
    store = Store.connect(settings.database_url, pool_size=1)
    try:
        return await store.remove_search_attribute(namespace=settings.namespace, name=name)
    finally:
        await store.close()


@app.command("create")
def create_command(
    name: NewNameArgument,
    kind: TypeArgument,
    as_json: JsonOption = False,
    database_url: DatabaseUrlOption = None,
    namespace: NamespaceOption = None,
) -> None:
    """Register a custom search attribute in the namespace."""
    settings = build_settings(database_url=database_url, namespace=namespace)
    output.run(_create(settings, name, kind))
    document = {"name": name, "type": kind.value, "outcome": "created"}
    if as_json:
        output.emit_json(document)
    else:
        output.echo(f"created {name} ({kind.value}) in namespace {settings.namespace}")


@app.command("list")
def list_command(
    as_json: JsonOption = False,
    database_url: DatabaseUrlOption = None,
    namespace: NamespaceOption = None,
) -> None:
    """The built-in attributes and the namespace's custom ones, with their types."""
    settings = build_settings(database_url=database_url, namespace=namespace)
    custom = output.run(_list(settings))
    if as_json:
        output.emit_json(
            {
                "system_attributes": {n: t.value for n, t in BUILTIN_ATTRIBUTES.items()},
                "custom_attributes": {n: t.value for n, t in custom.items()},
            }
        )
        return
    table = Table("name", "type", "kind")
    for name, kind in BUILTIN_ATTRIBUTES.items():
        table.add_row(name, kind.value, "built-in")
    for name, kind in custom.items():
        table.add_row(escape(name), kind.value, "custom")
    output.stdout().print(table)


@app.command("delete")
def delete_command(
    name: NameArgument,
    as_json: JsonOption = False,
    database_url: DatabaseUrlOption = None,
    namespace: NamespaceOption = None,
) -> None:
    """Remove a custom search attribute and every run's value of it."""
    settings = build_settings(database_url=database_url, namespace=namespace)
    values = output.run(_delete(settings, name))
    if as_json:
        output.emit_json({"name": name, "outcome": "deleted", "values_removed": values})
    else:
        output.echo(f"deleted {name} and {values} run value(s) from namespace {settings.namespace}")
