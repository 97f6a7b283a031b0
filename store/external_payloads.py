"""Runtime external payloads: uploaded payload blobs, by reference (PROTOCOL.md 10).

A blob is kept once per namespace and content (codec, size, SHA-256): uploading the same bytes
again returns the reference already made. References are `ep_` and 26 Crockford base32 digits,
as the SDK checks them.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql as pg
from sqlalchemy.ext.asyncio import AsyncConnection

from burrow.store import schema as s

_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


@dataclass(frozen=True, slots=True)
class StoredPayload:
    """One uploaded blob's reference, and its bytes when read."""

    reference_id: str
    namespace: str
    codec: str
    size_bytes: int
    sha256: str
    data: bytes | None = None


def new_reference_id() -> str:
    """A fresh reference id: `ep_` and 26 base32 digits (128 random bits)."""
    bits = secrets.randbits(128)
    digits = [_CROCKFORD[(bits >> (5 * i)) & 31] for i in range(26)]
    return "ep_" + "".join(reversed(digits))


async def put(
    conn: AsyncConnection, *, namespace: str, codec: str, sha256: str, data: bytes
) -> StoredPayload:
    """Keep `data` (the caller checked its digest); the reference of the same content if any."""
    t = s.external_payloads.c
    inserted = (
        await conn.execute(
            pg.insert(s.external_payloads)
            .values(
                reference_id=new_reference_id(),
                namespace=namespace,
                codec=codec,
                size_bytes=len(data),
                sha256=sha256,
                data=data,
            )
            .on_conflict_do_nothing(index_elements=["namespace", "sha256", "size_bytes", "codec"])
            .returning(t.reference_id)
        )
    ).first()
    if inserted is not None:
        return StoredPayload(inserted.reference_id, namespace, codec, len(data), sha256)
    found = await conn.execute(
        sa.select(t.reference_id).where(
            t.namespace == namespace,
            t.sha256 == sha256,
            t.size_bytes == len(data),
            t.codec == codec,
        )
    )
    return StoredPayload(found.scalar_one(), namespace, codec, len(data), sha256)


async def get_many(
    conn: AsyncConnection, *, namespace: str, reference_ids: Sequence[str]
) -> dict[str, StoredPayload]:
    """The namespace's blobs of these references, by id; others are left out."""
    if not reference_ids:
        return {}
    t = s.external_payloads.c
    rows = await conn.execute(
        sa.select(s.external_payloads).where(
            t.namespace == namespace, t.reference_id.in_(list(reference_ids))
        )
    )
    return {
        row.reference_id: StoredPayload(
            row.reference_id, row.namespace, row.codec, row.size_bytes, row.sha256, row.data
        )
        for row in rows
    }
