"""`--query` on `burrow workflow list|count` (issue 30): a bad query exits 2, pointing at it."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Annotated, TypeVar

import typer

from burrow.cli import output
from burrow.errors import InvalidListQuery

T = TypeVar("T")

QueryOption = Annotated[
    str | None,
    typer.Option(
        "--query",
        "-q",
        help="A list query: WorkflowType = 'Checkout' AND StartTime > '2026-12-01T00:00:00Z'"
        " ORDER BY StartTime DESC.",
        show_default=False,
    ),
]


def pointed(query: str, error: InvalidListQuery) -> str:
    """The error, the query's line holding the problem, and a caret under its character."""
    line_start = query.rfind("\n", 0, error.offset) + 1
    line_end = query.find("\n", error.offset)
    line = query[line_start : None if line_end < 0 else line_end]
    return f"{error}\n  {line}\n  {' ' * (error.offset - line_start)}^"


async def refusing_bad_queries(query: str | None, work: Awaitable[T]) -> T:
    """`work`'s result; a bad `query` exits 2 (bad usage), before or after connecting."""
    try:
        return await work
    except InvalidListQuery as exc:
        output.fail(pointed(query or "", exc), code=output.EXIT_USAGE)
