"""The client's namespace calls (issue 30), apart so client.py stays small."""

from __future__ import annotations

from burrow.store import Store
from burrow.store.namespace_errors import NamespaceNotFoundError
from burrow.store.namespaces import NamespaceRecord


class NamespaceMethods:
    """Namespaces as records: any namespace of the store, not only the client's own."""

    store: Store
    namespace: str
    _namespace_known: bool = False

    async def create_namespace(
        self, name: str, *, description: str | None = None, retention_days: int | None = None
    ) -> NamespaceRecord:
        """Create a namespace; closed runs are kept `retention_days` (default 30) (issue 30).

        Raises:
            InvalidNamespace: a malformed name, a long description or a window out of 1..365.
            NamespaceAlreadyExists: the name is taken.
        """
        return await self.store.create_namespace(
            name=name, description=description, retention_days=retention_days
        )

    async def list_namespaces(self) -> list[NamespaceRecord]:
        """Every namespace of the store, by name."""
        return await self.store.list_namespaces()

    async def describe_namespace(self, name: str | None = None) -> NamespaceRecord:
        """One namespace (this client's by default); NamespaceNotFoundError if there is none."""
        return await self.store.describe_namespace(name=name or self.namespace)

    async def update_namespace(
        self, name: str, *, description: str | None = None, retention_days: int | None = None
    ) -> NamespaceRecord:
        """Change a namespace's description and/or retention window (None: left as it is)."""
        return await self.store.update_namespace(
            name=name, description=description, retention_days=retention_days
        )

    async def delete_namespace(self, name: str, *, force: bool = False) -> dict[str, int]:
        """Delete a namespace; the rows deleted per table.

        Raises:
            NamespaceNotEmpty: it holds runs or schedules and `force` is not set (nothing was
                deleted); with `force` they are deleted too.
            NamespaceNotFoundError: there is no such namespace.
        """
        return await self.store.delete_namespace(name=name, force=force)

    async def _check_namespace(self) -> None:
        """Refuse to write into a namespace the store does not have (once known, not re-read)."""
        if self._namespace_known:
            return
        if self.namespace.lower() not in await self.store.namespace_names():
            raise NamespaceNotFoundError(namespace=self.namespace)
        self._namespace_known = True
