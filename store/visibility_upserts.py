"""What a completion's memo and search attribute upserts write, in its transaction (issue 30).

The run is locked by the completion. A patch the store cannot take refuses the whole completion
(`InvalidVisibilityUpsert`, nothing written): a memo patch that is not a string-keyed map or
makes the memo too large, an attribute that is not registered or a value not of its type.
"""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncConnection

from burrow import codec
from burrow.codec import Payload
from burrow.errors import InvalidSearchAttribute, PayloadError
from burrow.protocol import commands as cmd
from burrow.protocol.shapes import JsonObject
from burrow.store import run_visibility
from burrow.store.completion.effects import Plan
from burrow.store.errors import InvalidVisibilityUpsert


async def upsert_memo(conn: AsyncConnection, plan: Plan, command: cmd.UpsertMemo) -> Payload:
    """Merge the patch into the run's memo: the memo after, encoded in the patch's codec."""
    run = plan.run
    try:
        patch = codec.decode(command.entries)
        if not isinstance(patch, dict) or not patch:
            raise PayloadError("a memo patch is a map of at least one entry", what="memo")
        merged = await run_visibility.upsert_memo(
            conn, namespace=run.namespace, run_id=run.run_id, patch=patch
        )
        return codec.encode(merged, codec=command.entries["codec"])
    except PayloadError as exc:
        raise InvalidVisibilityUpsert(task_id=plan.task_id, kind="memo", reason=str(exc)) from exc


async def upsert_search_attributes(
    conn: AsyncConnection, plan: Plan, command: cmd.UpsertSearchAttributes
) -> tuple[JsonObject, dict[str, str]]:
    """Set the run's named attributes: all it holds after, and the named ones' types."""
    run = plan.run
    try:
        return await run_visibility.upsert_attributes(
            conn, namespace=run.namespace, run_id=run.run_id, attributes=command.attributes
        )
    except InvalidSearchAttribute as exc:
        raise InvalidVisibilityUpsert(
            task_id=plan.task_id, kind="search_attributes", reason=str(exc)
        ) from exc
