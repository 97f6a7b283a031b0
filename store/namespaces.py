"""Namespaces as records (issue 30): create, list, describe, update and delete.

Names are the reference server's: letters, digits, `.`, `_` and `-`, at most 128, stored
lowercase (a name is found whatever its case). A description is at most 1,000 characters; a
retention window 1 to 365 days. A refusal raises before anything is written.

Deleting a namespace that holds runs or schedules is refused (NamespaceNotEmpty) unless forced;
forced, its runs go first in batches of their own transactions (retention.delete_runs), then
the namespace row with everything else of the namespace in one transaction. Its configuration
(search attribute definitions, worker registrations, sessions, rollouts, external payloads,
sticky reports, repair marks) always goes with it.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql as pg
from sqlalchemy.ext.asyncio import AsyncConnection

from burrow.store import retention
from burrow.store import schema as s
from burrow.store.namespace_errors import (
    InvalidNamespace,
    NamespaceAlreadyExists,
    NamespaceNotEmpty,
    NamespaceNotFoundError,
)
from burrow.store.namespace_schema import DEFAULT_RETENTION_DAYS, namespaces

NAME: Final = re.compile(r"[a-zA-Z0-9._-]+")
MAX_NAME_CHARS = 128
MAX_DESCRIPTION_CHARS = 1000
MIN_RETENTION_DAYS = 1
MAX_RETENTION_DAYS = 365
FORCE_BATCH = 500
"""Runs a forced delete removes per transaction."""

_n = namespaces.c

CONFIG_TABLES: tuple[sa.Table, ...] = (
    s.search_attribute_definitions,
    s.worker_registrations,
    s.worker_sessions,
    s.build_rollouts,
    s.external_payloads,
    s.sticky_reports,
    s.repair_failures,
)
"""Tables of namespace-wide rows that belong to no run: removed with the namespace."""


@dataclass(frozen=True)
class NamespaceRecord:
    """One namespace as stored."""

    name: str
    description: str | None
    retention_days: int | None
    """None: no window is set, and the namespace keeps its closed runs (an upgraded store's)."""
    status: str
    created_at: datetime
    updated_at: datetime

    def to_wire(self) -> dict[str, Any]:
        """The reference server's shape (NamespaceController), as the SDK reads it."""
        return {
            "name": self.name,
            "description": self.description,
            "retention_days": self.retention_days,
            "status": self.status,
            "external_payload_storage": None,
            "created_at": self.created_at.isoformat(),
            "updated_at": self.updated_at.isoformat(),
        }


def check_name(name: str) -> str:
    """The stored (lowercase) form of a well-formed name; InvalidNamespace otherwise."""
    if not isinstance(name, str) or not 0 < len(name) <= MAX_NAME_CHARS:
        raise InvalidNamespace(field="name", reason=f"1 to {MAX_NAME_CHARS} characters")
    if NAME.fullmatch(name) is None:
        raise InvalidNamespace(field="name", reason="only letters, digits, '.', '_' and '-'")
    return name.lower()


def check_description(description: str | None) -> str | None:
    """A description that fits, else InvalidNamespace."""
    if description is not None and (
        not isinstance(description, str) or len(description) > MAX_DESCRIPTION_CHARS
    ):
        raise InvalidNamespace(
            field="description", reason=f"at most {MAX_DESCRIPTION_CHARS} characters"
        )
    if description is not None and "\x00" in description:
        raise InvalidNamespace(field="description", reason="a NUL character cannot be stored")
    return description


def check_retention(days: int | None) -> int | None:
    """A retention window in range, else InvalidNamespace."""
    if days is None:
        return None
    if (
        isinstance(days, bool)
        or not isinstance(days, int)
        or not MIN_RETENTION_DAYS <= days <= MAX_RETENTION_DAYS
    ):
        raise InvalidNamespace(
            field="retention_days",
            reason=f"a whole number of days from {MIN_RETENTION_DAYS} to {MAX_RETENTION_DAYS}",
        )
    return days


def _record(row: sa.Row[Any]) -> NamespaceRecord:
    return NamespaceRecord(
        name=row.name,
        description=row.description,
        retention_days=None if row.retention_days is None else int(row.retention_days),
        status=row.status,
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


async def create(
    conn: AsyncConnection,
    *,
    name: str,
    description: str | None = None,
    retention_days: int | None = None,
) -> NamespaceRecord:
    """Create a namespace; NamespaceAlreadyExists if the name is taken."""
    stored = check_name(name)
    values = {
        "name": stored,
        "description": check_description(description),
        "retention_days": check_retention(retention_days) or DEFAULT_RETENTION_DAYS,
    }
    inserted = await conn.execute(
        pg.insert(namespaces)
        .values(**values)
        .on_conflict_do_nothing(index_elements=[_n.name])
        .returning(*namespaces.c)
    )
    row = inserted.first()
    if row is None:
        raise NamespaceAlreadyExists(namespace=stored)
    return _record(row)


async def ensure(conn: AsyncConnection, names: list[str]) -> list[str]:
    """Create the namespaces of `names` that are missing (the bootstrap); those it created."""
    stored = sorted({check_name(name) for name in names})
    if not stored:
        return []
    inserted = await conn.execute(
        pg.insert(namespaces)
        .values([{"name": name} for name in stored])
        .on_conflict_do_nothing(index_elements=[_n.name])
        .returning(_n.name)
    )
    return sorted(str(name) for (name,) in inserted)


async def list_all(conn: AsyncConnection) -> list[NamespaceRecord]:
    """Every namespace, by name."""
    rows = await conn.execute(sa.select(namespaces).order_by(_n.name))
    return [_record(row) for row in rows]


async def names(conn: AsyncConnection) -> frozenset[str]:
    """The names of every namespace."""
    return frozenset(str(name) for name in await conn.scalars(sa.select(_n.name)))


async def describe(conn: AsyncConnection, *, name: str) -> NamespaceRecord:
    """One namespace; NamespaceNotFoundError if there is none of that name."""
    stored = name.lower()
    row = (await conn.execute(sa.select(namespaces).where(_n.name == stored))).first()
    if row is None:
        raise NamespaceNotFoundError(namespace=stored)
    return _record(row)


async def update(
    conn: AsyncConnection,
    *,
    name: str,
    description: str | None = None,
    retention_days: int | None = None,
) -> NamespaceRecord:
    """Change the description and/or the retention window (None leaves a field as it is)."""
    stored = name.lower()
    changes: dict[str, Any] = {"updated_at": sa.func.now()}
    if check_description(description) is not None:
        changes["description"] = description
    if check_retention(retention_days) is not None:
        changes["retention_days"] = retention_days
    updated = await conn.execute(
        sa.update(namespaces).where(_n.name == stored).values(**changes).returning(*namespaces.c)
    )
    row = updated.first()
    if row is None:
        raise NamespaceNotFoundError(namespace=stored)
    return _record(row)


async def holdings(conn: AsyncConnection, *, name: str) -> dict[str, int]:
    """What keeps the namespace from being deleted without force: its runs and schedules."""
    found = {}
    for kind, table in (("runs", s.runs), ("schedules", s.schedules)):
        count = await conn.scalar(
            sa.select(sa.func.count()).select_from(table).where(table.c.namespace == name)
        )
        if count:
            found[kind] = int(count)
    return found


async def _lock(conn: AsyncConnection, name: str) -> None:
    found = await conn.scalar(sa.select(_n.name).where(_n.name == name).with_for_update())
    if found is None:
        raise NamespaceNotFoundError(namespace=name)


async def delete_run_batch(
    conn: AsyncConnection, *, name: str, limit: int = FORCE_BATCH
) -> Counter[str]:
    """A forced delete's step: up to `limit` runs of the namespace, open or closed, removed.

    Returns the rows deleted per table (none once the namespace holds no run).
    """
    await _lock(conn, name)
    ids = [
        str(run_id)
        for run_id in await conn.scalars(
            sa.select(s.runs.c.run_id)
            .where(s.runs.c.namespace == name)
            .limit(limit)
            .with_for_update(skip_locked=True)
        )
    ]
    return (await retention.delete_runs(conn, ids)).rows


async def delete(conn: AsyncConnection, *, name: str, force: bool = False) -> dict[str, int]:
    """Delete the namespace and its remaining rows; the rows deleted per table.

    Without `force` a namespace holding runs or schedules is refused (NamespaceNotEmpty).
    """
    stored = name.lower()
    await _lock(conn, stored)
    held = await holdings(conn, name=stored)
    if held and not force:
        raise NamespaceNotEmpty(namespace=stored, holds=held)
    deleted: Counter[str] = Counter()
    if held.get("runs"):
        ids = [
            str(run_id)
            for run_id in await conn.scalars(
                sa.select(s.runs.c.run_id).where(s.runs.c.namespace == stored)
            )
        ]
        deleted.update((await retention.delete_runs(conn, ids)).rows)
    for table in (s.schedule_fires, s.schedule_history, s.schedules, *CONFIG_TABLES):
        gone = await conn.execute(sa.delete(table).where(table.c.namespace == stored))
        deleted[table.name] += int(gone.rowcount)
    await conn.execute(sa.delete(namespaces).where(_n.name == stored))
    return {table: count for table, count in sorted(deleted.items()) if count}
