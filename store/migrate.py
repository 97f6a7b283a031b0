"""Run Alembic migrations programmatically (`burrow migrate`)."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config

from burrow.store.engine import async_url, create_database_if_missing

MIGRATIONS = Path(__file__).resolve().with_name("migrations")


def alembic_config(database_url: str) -> Config:
    """An Alembic config pointing at the store's migrations and this database."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.set_main_option(
        "sqlalchemy.url",
        async_url(database_url).render_as_string(hide_password=False).replace("%", "%%"),
    )
    return config


async def upgrade(
    database_url: str, *, revision: str = "head", create_database: bool = True
) -> None:
    """Create the database if asked and missing, then upgrade it to `revision`."""
    if create_database:
        await create_database_if_missing(database_url)
    import asyncio

    await asyncio.to_thread(command.upgrade, alembic_config(database_url), revision)


def downgrade(database_url: str, *, revision: str) -> None:
    """Downgrade the database to `revision` (blocking)."""
    command.downgrade(alembic_config(database_url), revision)
