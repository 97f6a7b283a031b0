"""Namespaces as records over HTTP (issue 30), in the reference server's shapes.

`GET /api/namespaces` → `{namespaces: [...]}`; `POST /api/namespaces` `{name, description?,
retention_days?}` → 201 with the namespace (name stored lowercase), 409
`namespace_already_exists`; `GET|PUT /api/namespaces/{name}` → the namespace, 404
`namespace_not_found`; `DELETE /api/namespaces/{name}[?force=true]` → the namespace as it was
with `deleted` (rows per table), 409 `namespace_not_empty` while it holds runs or schedules and
`force` is not set. A namespace is `{name, description, retention_days, status,
external_payload_storage, created_at, updated_at}`. Bad bodies are 422 `validation_failed`.

Reads need the operator role, writes the admin role, like the reference's route group; the
caller's own `X-Namespace` must be served, as the reference's NamespaceResolver asks. A refusal
writes nothing.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from burrow.server.api_errors import ApiError
from burrow.server.deps import AdminCaller, OperatorCaller, State
from burrow.server.routing import ResponseBody
from burrow.store import namespaces
from burrow.store.namespace_errors import (
    InvalidNamespace,
    NamespaceAlreadyExists,
    NamespaceNotEmpty,
    NamespaceNotFoundError,
)

router = APIRouter(prefix="/api/namespaces")

Description = Annotated[
    str | None, Field(default=None, max_length=namespaces.MAX_DESCRIPTION_CHARS)
]
RetentionDays = Annotated[
    int | None,
    Field(
        default=None,
        ge=namespaces.MIN_RETENTION_DAYS,
        le=namespaces.MAX_RETENTION_DAYS,
        strict=True,
    ),
]


class NewNamespace(BaseModel):
    """`POST /api/namespaces`."""

    model_config = ConfigDict(extra="ignore")

    name: Annotated[
        str,
        Field(min_length=1, max_length=namespaces.MAX_NAME_CHARS, pattern=r"^[a-zA-Z0-9._-]+$"),
    ]
    description: Description = None
    retention_days: RetentionDays = None


class NamespaceChanges(BaseModel):
    """`PUT /api/namespaces/{name}`: only the fields given change."""

    model_config = ConfigDict(extra="ignore")

    description: Description = None
    retention_days: RetentionDays = None


def _not_found(exc: NamespaceNotFoundError) -> ApiError:
    return ApiError(
        404,
        "namespace_not_found",
        f"Namespace [{exc.namespace}] not found.",
        namespace=exc.namespace,
    )


def _invalid(exc: InvalidNamespace) -> ApiError:
    return ApiError(422, "validation_failed", str(exc), errors={exc.field: [exc.reason]})


@router.get("")
@router.get("/")
async def list_namespaces(state: State, caller: OperatorCaller) -> ResponseBody:
    """Every namespace of the store, by name."""
    records = await state.store.list_namespaces()
    return {"namespaces": [record.to_wire() for record in records]}


@router.post("")
@router.post("/")
async def create_namespace(body: NewNamespace, state: State, caller: AdminCaller) -> JSONResponse:
    """Create a namespace; the server serves it at once."""
    try:
        record = await state.store.create_namespace(
            name=body.name, description=body.description, retention_days=body.retention_days
        )
    except InvalidNamespace as exc:
        raise _invalid(exc) from exc
    except NamespaceAlreadyExists as exc:
        raise ApiError(
            409,
            "namespace_already_exists",
            "Namespace already exists.",
            namespace=exc.namespace,
        ) from exc
    state.known.add(record.name)
    return JSONResponse(record.to_wire(), status_code=201)


@router.get("/{name}")
async def describe_namespace(name: str, state: State, caller: OperatorCaller) -> ResponseBody:
    """One namespace (its name in any case)."""
    try:
        record = await state.store.describe_namespace(name=name)
    except NamespaceNotFoundError as exc:
        raise _not_found(exc) from exc
    return record.to_wire()


@router.put("/{name}")
async def update_namespace(
    name: str, body: NamespaceChanges, state: State, caller: AdminCaller
) -> ResponseBody:
    """Change the description and/or the retention window."""
    try:
        record = await state.store.update_namespace(
            name=name, description=body.description, retention_days=body.retention_days
        )
    except InvalidNamespace as exc:
        raise _invalid(exc) from exc
    except NamespaceNotFoundError as exc:
        raise _not_found(exc) from exc
    return record.to_wire()


@router.delete("/{name}")
async def delete_namespace(
    name: str,
    state: State,
    caller: AdminCaller,
    force: Annotated[bool, Query()] = False,
) -> ResponseBody:
    """Delete an empty namespace, or with `force` one and all its data."""
    try:
        record = await state.store.describe_namespace(name=name)
        deleted = await state.store.delete_namespace(name=name, force=force)
    except NamespaceNotFoundError as exc:
        raise _not_found(exc) from exc
    except NamespaceNotEmpty as exc:
        raise ApiError(
            409, "namespace_not_empty", str(exc), namespace=exc.namespace, holds=exc.holds
        ) from exc
    state.known.discard(record.name)
    return {**record.to_wire(), "status": "deleted", "deleted": deleted}
