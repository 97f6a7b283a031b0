"""What the namespace calls refuse (issue 30); each refusal writes nothing.

They derive from the structural classes of burrow.errors (NotFound, Conflict), so the HTTP
server and the CLI map them like any other store refusal.
"""

from __future__ import annotations

from collections.abc import Mapping

from burrow.errors import BurrowError, Conflict, NotFound

__all__ = [
    "InvalidNamespace",
    "NamespaceAlreadyExists",
    "NamespaceNotEmpty",
    "NamespaceNotFoundError",
]


class InvalidNamespace(BurrowError):
    """A namespace name, description or retention that cannot be stored; nothing was written.

    `field` names the part refused (`name`, `description`, `retention_days`).
    """

    field: str
    reason: str

    def __init__(self, *, field: str, reason: str) -> None:
        super().__init__(f"namespace {field}: {reason}", field=field, reason=reason)


class NamespaceNotFoundError(NotFound):
    """No namespace of that name in the store."""

    namespace: str

    def __init__(self, *, namespace: str) -> None:
        super().__init__(
            f"namespace {namespace!r} not found; create it first (burrow namespace create)",
            namespace=namespace,
        )


class NamespaceAlreadyExists(Conflict):
    """A namespace of that name exists already."""

    namespace: str

    def __init__(self, *, namespace: str) -> None:
        super().__init__(f"namespace {namespace!r} already exists", namespace=namespace)


class NamespaceNotEmpty(Conflict):
    """The namespace still holds runs or schedules; delete with force to remove them too.

    `holds` counts what it holds, by kind (`runs`, `schedules`).
    """

    namespace: str
    holds: dict[str, int]

    def __init__(self, *, namespace: str, holds: Mapping[str, int]) -> None:
        counted = ", ".join(f"{count} {kind}" for kind, count in holds.items())
        super().__init__(
            f"namespace {namespace!r} is not empty ({counted}); delete it with force to remove"
            " its data too",
            namespace=namespace,
            holds=dict(holds),
        )
