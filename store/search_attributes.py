"""Custom search attributes registered per namespace: typed names the list query may filter on.

The built-ins (list_query_types.BUILTIN_ATTRIBUTES) are always there and cannot be registered
or removed. Registrations of one namespace are serialised by a transaction-scoped advisory lock,
so the limit holds under concurrent calls. Removing an attribute removes its values from every
run of the namespace too: registered again, perhaps with another type, it starts empty.
"""

from __future__ import annotations

import re
from typing import Final

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql as pg
from sqlalchemy.ext.asyncio import AsyncConnection

from burrow.errors import (
    InvalidSearchAttribute,
    SearchAttributeConflict,
    SearchAttributeLimitReached,
    SearchAttributeNotFoundError,
)
from burrow.protocol.list_query_types import BUILTIN_ATTRIBUTES, AttributeType
from burrow.store import schema as s

NAME: Final = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
MAX_NAME_CHARS = 128
DEFAULT_LIMIT = 100
"""PROTOCOL.md `limits.max_search_attributes`."""

_d = s.search_attribute_definitions.c


def check_definition(name: str, type: str) -> AttributeType:
    """The type of a well-formed registration; refuses a bad name or type, or a built-in."""
    if len(name) > MAX_NAME_CHARS or NAME.fullmatch(name) is None:
        raise InvalidSearchAttribute(
            name=name,
            reason=f"a name is a letter then letters, digits or _, at most {MAX_NAME_CHARS}",
        )
    try:
        kind = AttributeType(type)
    except ValueError:
        kinds = ", ".join(t.value for t in AttributeType)
        reason = f"type {type!r} is not one of {kinds}"
        raise InvalidSearchAttribute(name=name, reason=reason) from None
    if name in BUILTIN_ATTRIBUTES:
        raise SearchAttributeConflict(
            name=name,
            reason="name_reserved",
            message=f"the name {name!r} is reserved as a system search attribute",
        )
    return kind


async def lock_namespace(conn: AsyncConnection, namespace: str, *, shared: bool = False) -> None:
    """Hold the namespace's registry until the transaction ends: shared to write run values."""
    key = sa.func.hashtextextended(sa.literal(f"search-attributes:{namespace}"), 0)
    lock = sa.func.pg_advisory_xact_lock_shared if shared else sa.func.pg_advisory_xact_lock
    await conn.execute(sa.select(lock(key)))


async def register(
    conn: AsyncConnection, *, namespace: str, name: str, type: str, limit: int = DEFAULT_LIMIT
) -> AttributeType:
    """Register `name` as a custom attribute of `type` in the namespace.

    Raises:
        InvalidSearchAttribute: a malformed name or an unknown type.
        SearchAttributeConflict: a built-in's name, or a name the namespace already has.
        SearchAttributeLimitReached: the namespace holds `limit` custom attributes.
    """
    kind = check_definition(name, type)
    await lock_namespace(conn, namespace)
    existing = await conn.scalar(
        sa.select(_d.type).where(_d.namespace == namespace, _d.name == name)
    )
    if existing is not None:
        raise SearchAttributeConflict(
            name=name,
            reason="attribute_already_exists",
            type=existing,
            message=f"a custom search attribute {name!r} already exists in namespace"
            f" {namespace!r} (type {existing})",
        )
    count = await conn.scalar(
        sa.select(sa.func.count())
        .select_from(s.search_attribute_definitions)
        .where(_d.namespace == namespace)
    )
    if (count or 0) >= limit:
        raise SearchAttributeLimitReached(namespace=namespace, limit=limit)
    await conn.execute(
        pg.insert(s.search_attribute_definitions).values(
            namespace=namespace, name=name, type=kind.value
        )
    )
    return kind


async def definitions(conn: AsyncConnection, *, namespace: str) -> dict[str, AttributeType]:
    """The namespace's custom attributes by name, in name order."""
    rows = await conn.execute(
        sa.select(_d.name, _d.type).where(_d.namespace == namespace).order_by(_d.name)
    )
    return {row.name: AttributeType(row.type) for row in rows}


async def remove(conn: AsyncConnection, *, namespace: str, name: str) -> int:
    """Remove a custom attribute and its values; how many run values went with it.

    Raises:
        SearchAttributeConflict: `name` is a built-in (`system_attribute`).
        SearchAttributeNotFoundError: the namespace has no custom attribute `name`.
    """
    if name in BUILTIN_ATTRIBUTES:
        raise SearchAttributeConflict(
            name=name,
            reason="system_attribute",
            message=f"the system search attribute {name!r} cannot be removed",
        )
    await lock_namespace(conn, namespace)
    gone = await conn.execute(
        sa.delete(s.search_attribute_definitions)
        .where(_d.namespace == namespace, _d.name == name)
        .returning(_d.name)
    )
    if gone.first() is None:
        raise SearchAttributeNotFoundError(name=name, namespace=namespace)
    a = s.run_search_attributes.c
    values = await conn.execute(
        sa.delete(s.run_search_attributes).where(a.namespace == namespace, a.name == name)
    )
    return int(values.rowcount)
