"""Search attributes of the caller's namespace (issue 30), in the reference server's shapes.

`GET /api/search-attributes` → `{system_attributes: {name: type}, custom_attributes: {...}}`;
`POST /api/search-attributes` `{name, type}` → 201 `{name, type, outcome: "created"}`, or 409
`name_reserved` / `attribute_already_exists`, 422 `search_attribute_limit_reached` or
`validation_failed`; `DELETE /api/search-attributes/{name}` → `{name, outcome: "deleted"}`, or
409 `system_attribute`, 404 `attribute_not_found`. Operator role, control-plane header and
`X-Namespace`, like the reference's route group. A refusal writes nothing.
"""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from burrow.errors import (
    SearchAttributeConflict,
    SearchAttributeLimitReached,
    SearchAttributeNotFoundError,
)
from burrow.protocol.list_query_types import BUILTIN_ATTRIBUTES
from burrow.server.api_errors import ApiError
from burrow.server.deps import OperatorCaller, State
from burrow.server.routing import ResponseBody
from burrow.store import search_attributes

router = APIRouter(prefix="/api/search-attributes")

TypeName = Literal["keyword", "text", "int", "double", "bool", "datetime", "keyword_list"]


class NewSearchAttribute(BaseModel):
    """`POST /api/search-attributes`."""

    model_config = ConfigDict(extra="ignore")

    name: Annotated[
        str,
        Field(
            min_length=1,
            max_length=search_attributes.MAX_NAME_CHARS,
            pattern=r"^[a-zA-Z][a-zA-Z0-9_]*$",
        ),
    ]
    type: TypeName


def _conflict(exc: SearchAttributeConflict) -> ApiError:
    extra = {} if exc.type is None else {"name": exc.name, "type": exc.type}
    return ApiError(409, exc.reason, str(exc), **extra)


@router.get("")
@router.get("/")
async def list_search_attributes(state: State, caller: OperatorCaller) -> ResponseBody:
    """The built-ins and the namespace's custom attributes, each by name with its type."""
    custom = await state.store.search_attributes(namespace=caller.namespace)
    return {
        "system_attributes": {name: kind.value for name, kind in BUILTIN_ATTRIBUTES.items()},
        "custom_attributes": {name: kind.value for name, kind in custom.items()},
    }


@router.post("")
@router.post("/")
async def create_search_attribute(
    body: NewSearchAttribute, state: State, caller: OperatorCaller
) -> JSONResponse:
    """Register a custom attribute in the caller's namespace."""
    try:
        kind = await state.store.register_search_attribute(
            namespace=caller.namespace, name=body.name, type=body.type
        )
    except SearchAttributeConflict as exc:
        raise _conflict(exc) from exc
    except SearchAttributeLimitReached as exc:
        raise ApiError(422, "search_attribute_limit_reached", str(exc), limit=exc.limit) from exc
    return JSONResponse(
        {"name": body.name, "type": kind.value, "outcome": "created"}, status_code=201
    )


@router.delete("/{name}")
async def delete_search_attribute(name: str, state: State, caller: OperatorCaller) -> ResponseBody:
    """Remove a custom attribute, and its values on the namespace's runs."""
    try:
        await state.store.remove_search_attribute(namespace=caller.namespace, name=name)
    except SearchAttributeConflict as exc:
        raise _conflict(exc) from exc
    except SearchAttributeNotFoundError as exc:
        raise ApiError(404, "attribute_not_found", str(exc)) from exc
    return {"name": name, "outcome": "deleted"}
