"""The machine-readable protocol specs this server publishes (SPEC W9, PROTOCOL.md 12, 19.2).

The worker-session runtime contract is served as a JSON Schema at the path the reference
publishes it under (`/platform-protocol-specs/worker-sessions-runtime.schema.json`), and
`GET /api/cluster/info` links it from `platform_protocol_specs`.
"""

from __future__ import annotations

import json
from functools import cache
from importlib.resources import files

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from burrow.server.deps import AnyCaller

router = APIRouter()

CATALOG_SCHEMA = "durable-workflow.v2.platform-protocol-specs.catalog"
WORKER_SESSIONS_RUNTIME_FILE = "worker-sessions-runtime.schema.json"
WORKER_SESSIONS_RUNTIME_PATH = f"/platform-protocol-specs/{WORKER_SESSIONS_RUNTIME_FILE}"


@cache
def worker_sessions_runtime_schema() -> dict[str, object]:
    """The packaged schema document (read once)."""
    text = files("burrow.server").joinpath(WORKER_SESSIONS_RUNTIME_FILE).read_text("utf-8")
    document: dict[str, object] = json.loads(text)
    return document


def catalog() -> dict[str, object]:
    """`platform_protocol_specs` of the discovery document: what this server publishes."""
    schema = worker_sessions_runtime_schema()
    return {
        "schema": CATALOG_SCHEMA,
        "specs": {
            "worker_sessions_runtime": {
                "format": "json_schema",
                "spec_id": schema["$id"],
                "surface_family": "worker_protocol",
                "discovery_endpoint": (
                    "GET /api/cluster/info -> worker_protocol.server_capabilities.worker_sessions"
                ),
                "status": "published",
                "spec_path": WORKER_SESSIONS_RUNTIME_PATH,
            }
        },
    }


@router.get(WORKER_SESSIONS_RUNTIME_PATH)
async def get_worker_sessions_runtime_schema(caller: AnyCaller) -> JSONResponse:
    """The worker-session runtime contract as a JSON Schema (W9); any role, like discovery."""
    return JSONResponse(worker_sessions_runtime_schema(), media_type="application/schema+json")
