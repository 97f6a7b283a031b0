"""Alembic migrations against a fresh, empty Postgres database (C2, C6)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import create_async_engine

from burrow.store import migrate
from burrow.store.engine import async_url
from burrow.store.schema import metadata


async def _admin(server_url: str, statement: str) -> None:
    engine = create_async_engine(async_url(server_url), isolation_level="AUTOCOMMIT")
    try:
        async with engine.connect() as conn:
            await conn.execute(sa.text(statement))
    finally:
        await engine.dispose()


@pytest.fixture
async def empty_database_url(postgres_server_url: str) -> AsyncIterator[str]:
    """A brand-new database with no tables at all (never the demo's `burrow`)."""
    name = f"burrow_migrations_{uuid.uuid4().hex[:12]}"
    await _admin(postgres_server_url, f'CREATE DATABASE "{name}"')
    url = async_url(postgres_server_url).set(database=name)
    try:
        yield url.render_as_string(hide_password=False).replace(
            "postgresql+asyncpg://", "postgresql://"
        )
    finally:
        await _admin(postgres_server_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _inspect(sync_conn: Connection) -> dict[str, Any]:
    context = MigrationContext.configure(
        sync_conn, opts={"compare_type": True, "compare_server_default": True}
    )
    return {
        "diff": compare_metadata(context, metadata),
        "revision": context.get_current_revision(),
        "tables": set(sa.inspect(sync_conn).get_table_names()),
    }


async def _state(database_url: str) -> dict[str, Any]:
    engine = create_async_engine(async_url(database_url))
    try:
        async with engine.connect() as conn:
            return await conn.run_sync(_inspect)
    finally:
        await engine.dispose()


def _head(database_url: str) -> str | None:
    return ScriptDirectory.from_config(migrate.alembic_config(database_url)).get_current_head()


async def test_upgrade_head_on_empty_database_matches_schema_metadata(
    empty_database_url: str,
) -> None:
    """C2, store invariants 3-4: `upgrade head` builds exactly `burrow.store.schema.metadata`."""
    before = await _state(empty_database_url)
    assert before["tables"] == set()
    assert before["revision"] is None

    await migrate.upgrade(empty_database_url, create_database=False)

    after = await _state(empty_database_url)
    assert after["diff"] == []
    assert after["revision"] == _head(empty_database_url)
    assert after["tables"] == set(metadata.tables) | {"alembic_version"}


async def test_downgrade_to_base_then_upgrade_head_round_trips(empty_database_url: str) -> None:
    """C2: downgrade to base removes every table, and upgrading again restores the schema."""
    await migrate.upgrade(empty_database_url, create_database=False)

    await asyncio.to_thread(migrate.downgrade, empty_database_url, revision="base")
    down = await _state(empty_database_url)
    assert down["revision"] is None
    assert down["tables"] <= {"alembic_version"}

    await migrate.upgrade(empty_database_url, create_database=False)
    up = await _state(empty_database_url)
    assert up["diff"] == []
    assert up["revision"] == _head(empty_database_url)
    assert up["tables"] == set(metadata.tables) | {"alembic_version"}


async def test_upgrade_head_is_idempotent_on_a_migrated_database(empty_database_url: str) -> None:
    """C2: running `upgrade head` twice is a no-op the second time (workers may all migrate)."""
    await migrate.upgrade(empty_database_url, create_database=False)
    await migrate.upgrade(empty_database_url, create_database=False)
    state = await _state(empty_database_url)
    assert state["diff"] == []
    assert state["revision"] == _head(empty_database_url)


async def test_an_upgraded_store_keeps_every_namespace_it_used_and_its_runs(
    empty_database_url: str,
) -> None:
    """Issue 30: migration 0024 makes a record of each namespace a store already held, with no
    retention window (an upgrade deletes nothing); only a new store's `default` gets 30 days."""
    await migrate.upgrade(empty_database_url, revision="0025", create_database=False)
    engine = create_async_engine(async_url(empty_database_url))
    try:
        async with engine.begin() as conn:
            await conn.execute(
                sa.text(
                    "INSERT INTO runs (run_id, namespace, workflow_id, workflow_type, task_queue,"
                    " input) VALUES (:run_id, 'orders', 'w', 't', 'q', '[]')"
                ),
                {"run_id": str(uuid.uuid4())},
            )
        await migrate.upgrade(empty_database_url, create_database=False)
        async with engine.connect() as conn:
            found = await conn.execute(sa.text("SELECT name, retention_days FROM namespaces"))
            assert sorted(found.all()) == [("default", 30), ("orders", None)]
    finally:
        await engine.dispose()
