"""`burrow migrate`: create the database if it is missing and upgrade its schema."""

from __future__ import annotations

from burrow.cli import output
from burrow.cli.options import DatabaseUrlOption, build_settings


def migrate_command(database_url: DatabaseUrlOption = None) -> None:
    """Create the database if it is missing and upgrade its schema to the latest revision."""
    from burrow.store import migrate
    from burrow.store.engine import create_database_if_missing

    settings = build_settings(database_url=database_url)

    async def go() -> bool:
        created = await create_database_if_missing(settings.database_url)
        await migrate.upgrade(settings.database_url, create_database=False)
        return created

    created = output.run(go())
    verb = "created and migrated" if created else "migrated"
    output.stdout().print(f"{verb} {output.redact_url(settings.database_url)} to head")
