"""Workflow code's memo and search attributes (issue 30): read them, and upsert them as steps.

    @workflow.run
    async def run(self, order: Order) -> None:
        workflow.upsert_search_attributes({"CustomerId": order.customer, "Stage": "paying"})
        await workflow.execute_activity(charge, order)
        workflow.upsert_memo({"charged_at": workflow.now().isoformat()})

Each upsert is a workflow step recorded in history, so replay repeats it at the same point.
Search attributes must be registered in the namespace (`burrow search-attribute create`) and
their values of the registered type, or the workflow task is refused and retried; a memo is any
JSON object of at most 256 KiB. `None` deletes a memo key or removes an attribute.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from burrow.workflow import context

SearchAttributeValue = str | int | float | bool | datetime | list[str] | None
"""What a search attribute takes: its registered type decides which."""


def memo() -> dict[str, object]:
    """The run's memo as of this point: its start's, with the code's upserts applied."""
    return context.current().memo


def search_attributes() -> dict[str, object]:
    """The run's custom search attributes as of this point (datetimes as RFC 3339 text)."""
    return context.current().search_attributes


def upsert_memo(entries: Mapping[str, object]) -> None:
    """Merge `entries` into the run's memo; a key set to None is deleted.

    Raises:
        PayloadError: not a JSON object; PayloadTooLarge: the memo would exceed 256 KiB.
    """
    context.current().upsert_memo(entries)


def upsert_search_attributes(attributes: Mapping[str, SearchAttributeValue]) -> None:
    """Set the named search attributes of the run; an attribute set to None is removed."""
    context.current().upsert_search_attributes(attributes)
