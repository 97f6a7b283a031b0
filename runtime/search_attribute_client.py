"""The client's search attribute calls (issue 30), apart so client.py stays small."""

from __future__ import annotations

from burrow.protocol.list_query_types import AttributeType
from burrow.store import Store


class SearchAttributeMethods:
    """Custom search attributes of the client's namespace."""

    store: Store
    namespace: str

    async def register_search_attribute(self, name: str, type: AttributeType | str) -> None:
        """Register a custom search attribute of `type` in this namespace (issue 30).

        Raises:
            InvalidSearchAttribute: a malformed name or an unknown type; nothing was written.
            SearchAttributeConflict: a built-in's name or one already registered.
            SearchAttributeLimitReached: the namespace holds its maximum.
        """
        await self.store.register_search_attribute(
            namespace=self.namespace, name=name, type=str(type)
        )

    async def search_attributes(self) -> dict[str, AttributeType]:
        """This namespace's custom search attributes by name.

        The built-ins are `burrow.protocol.list_query_types.BUILTIN_ATTRIBUTES`.
        """
        return await self.store.search_attributes(namespace=self.namespace)

    async def remove_search_attribute(self, name: str) -> None:
        """Remove a custom search attribute and every run's value of it.

        Raises:
            SearchAttributeNotFoundError: no such custom attribute in this namespace.
            SearchAttributeConflict: `name` is a built-in.
        """
        await self.store.remove_search_attribute(namespace=self.namespace, name=name)
