"""Planners of the memo and search attribute upserts (issue 30): entries of `plan.RULES`.

Both need the transaction: the merge reads what the run holds, under the run's lock.
"""

from __future__ import annotations

from burrow.protocol import commands as cmd
from burrow.protocol import events
from burrow.store.completion.effects import InTransaction, Plan


async def upsert_memo(plan: Plan, command: cmd.UpsertMemo, step: int, db: InTransaction) -> None:
    """Merge the patch into the run's memo; `MemoUpserted` keeps the patch and the memo after."""
    plan.last_step = step
    merged = await db.upsert_memo(plan, command)
    upserted = events.MemoUpserted(sequence=step, entries=command.entries, merged=merged)
    plan.record(upserted, f"step:{step}:memo")


async def upsert_search_attributes(
    plan: Plan, command: cmd.UpsertSearchAttributes, step: int, db: InTransaction
) -> None:
    """Set the run's named attributes; the event keeps the patch, all after it and their types."""
    plan.last_step = step
    merged, types = await db.upsert_search_attributes(plan, command)
    upserted = events.SearchAttributesUpserted(
        sequence=step, attributes=command.attributes, merged=merged, attribute_types=types
    )
    plan.record(upserted, f"step:{step}:search-attributes")
