"""Discovery, bearer tokens, roles, version headers and namespaces (PROTOCOL.md 2.2-2.4, 3;
SPEC M4b, M8). A refused request writes nothing.
"""

from __future__ import annotations

import sys

import pytest
from durable_workflow.worker import _validate_server_compatibility

from burrow.errors import ConfigurationError
from burrow.server import ServerSettings
from tests.integration.server.conftest import (
    ADMIN_TOKEN,
    CONTROL,
    OPERATOR_TOKEN,
    QUEUE,
    WORKER,
    WORKER_TOKEN,
    WORLD,
    Api,
    ApiFactory,
)
from tests.support import spawn

START = {"workflow_id": "wf-1", "workflow_type": "greeter", "task_queue": QUEUE, "input": WORLD}


async def test_cluster_info_passes_the_sdk_compatibility_check_m8(api: Api) -> None:
    """PROTOCOL 3.1, M8: the document the SDK validates, with the matching role and the
    capabilities the server implements (query tasks, sticky execution)."""
    response = await api.http.get(
        "/api/cluster/info", headers={"Authorization": f"Bearer {WORKER_TOKEN}"}
    )
    assert response.status_code == 200
    info = response.json()
    _validate_server_compatibility(info)  # raises on anything the SDK refuses
    assert info["worker_protocol"]["version"] == "1.20"
    capabilities = info["worker_protocol"]["server_capabilities"]
    assert capabilities["query_tasks"] is True
    assert capabilities["sticky_execution"]["supported"] is True
    role = info["topology"]["matching_role"]
    assert role["backpressure_model"] == "lease_ownership"
    assert set(role["partition_primitives"]) >= {"namespace", "queue"}


@pytest.mark.parametrize("token", [None, "wrong"])
async def test_missing_or_wrong_token_is_401_and_writes_nothing(
    api: Api, token: str | None
) -> None:
    """PROTOCOL 2.2/2.4: 401 `unauthorized`; no run is created."""
    headers = {"X-Durable-Workflow-Control-Plane-Version": "2"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    response = await api.http.post("/api/workflows", json=START, headers=headers)
    assert response.status_code == 401
    assert response.json()["reason"] == "unauthorized"
    assert await api.state.store.list_workflows(namespace="default") == []
    info = await api.http.get("/api/cluster/info", headers=headers)
    assert info.status_code == 401


async def test_roles_worker_token_cannot_start_and_operator_cannot_poll(api: Api) -> None:
    """PROTOCOL 2.2: worker routes need `worker`, control routes `operator` or `admin`."""
    as_worker = {**CONTROL, "Authorization": f"Bearer {WORKER_TOKEN}"}
    refused = await api.http.post("/api/workflows", json=START, headers=as_worker)
    assert refused.status_code == 401
    as_operator = {**WORKER, "Authorization": f"Bearer {OPERATOR_TOKEN}"}
    poll = {"worker_id": "w1", "task_queue": QUEUE, "timeout_seconds": 0}
    refused = await api.http.post("/api/worker/workflow-tasks/poll", json=poll, headers=as_operator)
    assert refused.status_code == 401
    as_admin = {**CONTROL, "Authorization": f"Bearer {ADMIN_TOKEN}"}
    started = await api.http.post("/api/workflows", json=START, headers=as_admin)
    assert started.status_code == 201


async def test_one_auth_token_grants_every_role(make_api: ApiFactory) -> None:
    """PROTOCOL 2.2: BURROW_AUTH_TOKEN is one token for all roles."""
    api = await make_api(worker_token=None, operator_token=None, admin_token=None, auth_token="t")
    auth = {"Authorization": "Bearer t"}
    started = await api.http.post(
        "/api/workflows",
        json=START,
        headers={**auth, "X-Durable-Workflow-Control-Plane-Version": "2"},
    )
    assert started.status_code == 201
    registered = await api.http.post(
        "/api/worker/register",
        json={"worker_id": "w1", "task_queue": QUEUE, "supported_workflow_types": ["greeter"]},
        headers={**auth, "X-Durable-Workflow-Protocol-Version": "1.20"},
    )
    assert registered.status_code == 201


async def test_unknown_namespace_is_404_namespace_not_found_and_writes_nothing(api: Api) -> None:
    """PROTOCOL 2.2: an unknown X-Namespace is 404 `namespace_not_found`."""
    response = await api.http.post(
        "/api/workflows", json=START, headers={**CONTROL, "X-Namespace": "nope"}
    )
    assert response.status_code == 404
    assert response.json()["reason"] == "namespace_not_found"
    assert await api.state.store.list_workflows(namespace="nope") == []
    assert await api.state.store.list_workflows(namespace="default") == []


async def test_bad_body_is_422_naming_the_field_and_writes_nothing(api: Api) -> None:
    """PROTOCOL 2.4: a bad body is 422 naming each bad field; nothing is written."""
    bad = {**START, "workflow_id": "has spaces!", "input": {"codec": "avro"}}
    response = await api.control("POST", "/api/workflows", json=bad)
    assert response.status_code == 422
    errors = response.json()["errors"]
    assert "workflow_id" in errors
    assert "input.blob" in errors
    assert await api.state.store.list_workflows(namespace="default") == []


@pytest.mark.parametrize(
    ("version", "reason"),
    [
        (None, "missing_protocol_version"),
        ("1.21", "unsupported_protocol_version"),
        ("2.0", "unsupported_protocol_version"),
        ("x", "unsupported_protocol_version"),
    ],
)
async def test_worker_protocol_version_negotiation(
    api: Api, version: str | None, reason: str
) -> None:
    """PROTOCOL 2.3: same major and minor <= 20, else 400 with the reason and envelope."""
    headers = {"Authorization": f"Bearer {WORKER_TOKEN}"}
    if version is not None:
        headers["X-Durable-Workflow-Protocol-Version"] = version
    response = await api.http.post(
        "/api/worker/register",
        json={"worker_id": "w1", "task_queue": QUEUE},
        headers=headers,
    )
    assert response.status_code == 400
    body = response.json()
    assert body["reason"] == reason
    assert body["protocol_version"] == "1.20"
    assert "server_capabilities" in body
    assert await api.state.store.worker_registration(worker_id="w1") is None


async def test_older_worker_protocol_minor_is_accepted(api: Api) -> None:
    """PROTOCOL 2.3: 1.19 (the SDK's minimum) is served."""
    response = await api.http.post(
        "/api/worker/register",
        json={"worker_id": "w1", "task_queue": QUEUE},
        headers={**WORKER, "X-Durable-Workflow-Protocol-Version": "1.19"},
    )
    assert response.status_code == 201
    assert response.headers["X-Durable-Workflow-Protocol-Version"] == "1.20"


@pytest.mark.parametrize(
    ("version", "reason"),
    [(None, "missing_control_plane_version"), ("1", "unsupported_control_plane_version")],
)
async def test_control_plane_version_is_required(
    api: Api, version: str | None, reason: str
) -> None:
    """PROTOCOL 2.3: the control plane speaks exactly version 2."""
    headers = {"Authorization": f"Bearer {OPERATOR_TOKEN}"}
    if version is not None:
        headers["X-Durable-Workflow-Control-Plane-Version"] = version
    response = await api.http.post("/api/workflows", json=START, headers=headers)
    assert response.status_code == 400
    assert response.json()["reason"] == reason
    assert await api.state.store.list_workflows(namespace="default") == []


def test_open_server_refuses_to_bind_beyond_loopback() -> None:
    """PROTOCOL 2.2: with no token set only loopback is bound."""
    ServerSettings(host="127.0.0.1").check_bind()
    ServerSettings(host="::1").check_bind()
    with pytest.raises(ConfigurationError, match="without authentication"):
        ServerSettings(host="0.0.0.0").check_bind()
    ServerSettings(host="0.0.0.0", auth_token="t").check_bind()


def test_settings_read_the_environment() -> None:
    """The server's variables: host, port, tokens, namespaces."""
    settings = ServerSettings.load(
        {
            "BURROW_SERVER_HOST": "0.0.0.0",
            "BURROW_SERVER_PORT": "9000",
            "BURROW_WORKER_TOKEN": "w",
            "BURROW_SERVER_NAMESPACES": "Team-A, team-b",
        }
    )
    assert (settings.host, settings.port, settings.worker_token) == ("0.0.0.0", 9000, "w")
    assert settings.namespaces == ("default", "team-a", "team-b")
    assert not settings.open
    with pytest.raises(ConfigurationError, match="port"):
        ServerSettings.load({"BURROW_SERVER_PORT": "many"})


async def test_health_and_operator_metrics_need_admin_m8(api: Api) -> None:
    """M8, PROTOCOL 15: health answers anyone; operator metrics need the admin role and carry
    the sticky execution figures and the matching role."""
    assert (await api.http.get("/api/health")).json()["status"] == "serving"
    refused = await api.control("GET", "/api/system/operator-metrics")
    assert refused.status_code == 401
    as_admin = {**CONTROL, "Authorization": f"Bearer {ADMIN_TOKEN}"}
    response = await api.http.get("/api/system/operator-metrics", headers=as_admin)
    assert response.status_code == 200
    body = response.json()
    assert body["namespace"] == "default"
    assert "sticky_execution" in body["operator_metrics"]
    assert body["operator_metrics"]["matching_role"]["backpressure_model"] == "lease_ownership"


def test_cli_refuses_an_open_server_beyond_loopback() -> None:
    """PROTOCOL 2.2: `burrow server --host 0.0.0.0` without a token exits 2 and says why."""
    done = spawn.run(
        [sys.executable, "-m", "burrow", "server", "--host", "0.0.0.0", "--port", "0"],
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "without authentication" in done.stderr


SCHEMA_DEFS = {
    "workerSessionRuntimeContract",
    "workerSessionOptions",
    "workerSessionCreateRequest",
    "workerSessionHeartbeatRequest",
    "workerSessionCloseRequest",
    "workerSessionOperationResult",
    "workerSessionVisibility",
    "workerSessionDetail",
    "workerSessionMetrics",
    "workerSessionTaskAffinity",
    "workerSessionSnapshot",
    "workerSessionHolder",
    "workerSessionStatus",
    "workerSessionFailureReason",
}


async def test_worker_sessions_runtime_schema_is_served_and_linked_w9(api: Api) -> None:
    """W9: discovery links the `worker-sessions-runtime` JSON Schema from
    `platform_protocol_specs`; the linked path serves it, its enums and defaults are the ones the
    served contract advertises, and a real session snapshot has exactly its required fields."""
    auth = {"Authorization": f"Bearer {WORKER_TOKEN}"}
    info = (await api.http.get("/api/cluster/info", headers=auth)).json()
    specs = info["platform_protocol_specs"]
    assert specs["schema"] == "durable-workflow.v2.platform-protocol-specs.catalog"
    entry = specs["specs"]["worker_sessions_runtime"]
    assert entry["format"] == "json_schema" and entry["status"] == "published"
    assert entry["spec_path"] == "/platform-protocol-specs/worker-sessions-runtime.schema.json"

    assert (await api.http.get(entry["spec_path"])).status_code == 401  # a token, as discovery
    response = await api.http.get(entry["spec_path"], headers=auth)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/schema+json")
    schema = response.json()
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["$id"] == entry["spec_id"] == "durable-workflow.v2.worker-sessions-runtime"
    defs = schema["$defs"]
    assert set(defs) >= SCHEMA_DEFS

    contract = info["worker_protocol"]["server_capabilities"]["worker_sessions"]
    assert set(defs["workerSessionStatus"]["enum"]) == set(contract["statuses"])
    assert set(defs["workerSessionFailureReason"]["enum"]) == set(contract["failure_reasons"])
    verbs = defs["workerSessionRuntimeContract"]["properties"]["verbs"]["items"]["enum"]
    assert verbs == info["worker_protocol"]["server_capabilities"]["worker_session_verbs"]
    defaults = defs["workerSessionRuntimeContract"]["properties"]["options"]["properties"]
    assert {name: rule["const"] for name, rule in defaults.items()} == contract["options"]
    assert set(defs["workerSessionRuntimeContract"]["required"]) <= set(contract)

    await api.register("w-session", capabilities=["gpu"])
    created = await api.worker(
        "POST",
        "/api/worker/sessions",
        json={"worker_id": "w-session", "session_id": "s-1", "requirements": ["gpu"]},
    )
    assert created.status_code == 201, created.text
    result = created.json()
    admitted = defs["workerSessionOperationResult"]["oneOf"][0]
    assert set(admitted["required"]) <= set(result)
    snapshot = defs["workerSessionSnapshot"]
    assert set(result["session"]) == set(snapshot["required"]) == set(snapshot["properties"])
