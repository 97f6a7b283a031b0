"""A run's memo and search attribute values: written at its start and by upserts (issue 30).

Values are typed against the namespace's registry while a shared advisory lock on it is held,
the lock registering or removing an attribute takes exclusively (store/search_attributes.py):
no run gains a value of an attribute being removed. A run without a memo or attributes has no
rows, so a plain start writes nothing here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TypedDict

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql as pg
from sqlalchemy.ext.asyncio import AsyncConnection

from burrow.protocol import visibility_values as vv
from burrow.protocol.list_query_types import AttributeType
from burrow.protocol.shapes import JsonDict
from burrow.store import schema as s
from burrow.store import search_attributes

_a = s.run_search_attributes.c
_m = s.run_memos.c
_VALUE_COLUMNS = (
    "ordinal",
    "keyword_value",
    "int_value",
    "double_value",
    "bool_value",
    "datetime_value",
    "text_value",
)


async def registry(conn: AsyncConnection, namespace: str) -> dict[str, AttributeType]:
    """The namespace's registry, held (shared) until the transaction ends."""
    await search_attributes.lock_namespace(conn, namespace, shared=True)
    return await search_attributes.definitions(conn, namespace=namespace)


async def typed_start_values(
    conn: AsyncConnection, namespace: str, attributes: Mapping[str, object] | None
) -> list[vv.StoredValue]:
    """The rows a start's attributes become (removals dropped); InvalidSearchAttribute."""
    if not attributes:
        return []
    typed = vv.typed_attributes(attributes, await registry(conn, namespace))
    vv.check_attribute_count(name for name, rows in typed.items() if rows)
    return [row for rows in typed.values() for row in rows]


async def write_start(
    conn: AsyncConnection,
    *,
    namespace: str,
    run_id: str,
    memo: JsonDict | None,
    values: Sequence[vv.StoredValue],
) -> None:
    """Write a new run's memo and attribute rows (both already checked)."""
    if memo:
        await conn.execute(
            sa.insert(s.run_memos).values(run_id=run_id, namespace=namespace, memo=memo)
        )
    if values:
        await conn.execute(
            sa.insert(s.run_search_attributes),
            [value.row(run_id=run_id, namespace=namespace) for value in values],
        )


async def carry(conn: AsyncConnection, *, old_run_id: str, new_run_id: str) -> None:
    """Give a continued or retried run the memo and attributes its predecessor held."""
    await conn.execute(
        pg.insert(s.run_memos)
        .from_select(
            ["run_id", "namespace", "memo"],
            sa.select(sa.literal(new_run_id, pg.UUID(as_uuid=False)), _m.namespace, _m.memo).where(
                _m.run_id == old_run_id
            ),
        )
        .on_conflict_do_nothing()
    )
    columns = ["run_id", "namespace", "name", *_VALUE_COLUMNS]
    await conn.execute(
        pg.insert(s.run_search_attributes)
        .from_select(
            columns,
            sa.select(
                sa.literal(new_run_id, pg.UUID(as_uuid=False)),
                _a.namespace,
                _a.name,
                *(_a[c] for c in _VALUE_COLUMNS),
            ).where(_a.run_id == old_run_id),
        )
        .on_conflict_do_nothing()
    )


async def memo_of(conn: AsyncConnection, run_id: str) -> JsonDict:
    """The run's memo ({} when it has none)."""
    memo = await conn.scalar(sa.select(_m.memo).where(_m.run_id == run_id))
    return dict(memo) if memo else {}


async def memos_of(conn: AsyncConnection, run_ids: Sequence[str]) -> dict[str, JsonDict]:
    """The memos of several runs, by run id (runs without one absent)."""
    if not run_ids:
        return {}
    rows = await conn.execute(sa.select(_m.run_id, _m.memo).where(_m.run_id.in_(run_ids)))
    return {str(row.run_id): dict(row.memo) for row in rows}


async def attributes_of(
    conn: AsyncConnection,
    *,
    namespace: str,
    run_ids: Sequence[str],
    kinds: Mapping[str, AttributeType] | None = None,
) -> dict[str, JsonDict]:
    """The search attributes of several runs as a describe shows them, by run id.

    `kinds`: the namespace's registry when the caller has read it already.
    """
    if not run_ids:
        return {}
    rows = (
        await conn.execute(
            sa.select(_a.run_id, _a.name, *(_a[c] for c in _VALUE_COLUMNS)).where(
                _a.run_id.in_(run_ids)
            )
        )
    ).all()
    if not rows:
        return {}
    if kinds is None:
        kinds = await search_attributes.definitions(conn, namespace=namespace)
    by_run: dict[str, list[vv.StoredValue]] = {}
    for row in rows:
        value = vv.StoredValue(row.name, **{c: getattr(row, c) for c in _VALUE_COLUMNS})
        by_run.setdefault(str(row.run_id), []).append(value)
    return {run_id: vv.plain_attributes(values, kinds) for run_id, values in by_run.items()}


async def upsert_memo(
    conn: AsyncConnection, *, namespace: str, run_id: str, patch: Mapping[str, object]
) -> JsonDict:
    """Merge `patch` into the run's memo (the caller holds the run's lock); the merged memo.

    Raises:
        PayloadTooLarge: the merged memo is over the limit; nothing was written.
    """
    merged = vv.check_memo(vv.merge_memo(await memo_of(conn, run_id), patch))
    if merged:
        statement = pg.insert(s.run_memos).values(run_id=run_id, namespace=namespace, memo=merged)
        await conn.execute(
            statement.on_conflict_do_update(index_elements=[_m.run_id], set_={"memo": merged})
        )
    else:
        await conn.execute(sa.delete(s.run_memos).where(_m.run_id == run_id))
    return merged


async def upsert_attributes(
    conn: AsyncConnection, *, namespace: str, run_id: str, attributes: Mapping[str, object]
) -> tuple[JsonDict, dict[str, str]]:
    """Set (or remove) the run's named attributes; all it holds after, and the types named.

    The caller holds the run's lock. Raises InvalidSearchAttribute (nothing written) for an
    unregistered or built-in name, a value not of its type, or more attributes than a run holds.
    """
    kinds = await registry(conn, namespace)
    typed = vv.typed_attributes(attributes, kinds)
    held = await conn.execute(sa.select(_a.name).distinct().where(_a.run_id == run_id))
    names = {row.name for row in held} - set(typed) | {n for n, rows in typed.items() if rows}
    vv.check_attribute_count(names)
    await conn.execute(
        sa.delete(s.run_search_attributes).where(_a.run_id == run_id, _a.name.in_(list(typed)))
    )
    rows = [row.row(run_id=run_id, namespace=namespace) for r in typed.values() for row in r]
    if rows:
        await conn.execute(sa.insert(s.run_search_attributes), rows)
    merged = await attributes_of(conn, namespace=namespace, run_ids=[run_id], kinds=kinds)
    return merged.get(run_id, {}), {name: kinds[name].value for name in typed}


class ChainMetadata(TypedDict):
    """What a continued or retried run takes from the run before: its memo and attributes."""

    memo: JsonDict | None
    search_attributes: JsonDict | None


async def chain_metadata(conn: AsyncConnection, *, namespace: str, run_id: str) -> ChainMetadata:
    """The memo and search attributes `run_id` holds now, for the run that follows it."""
    memo = await memo_of(conn, run_id)
    held = await attributes_of(conn, namespace=namespace, run_ids=[run_id])
    return {"memo": memo or None, "search_attributes": held.get(run_id) or None}
