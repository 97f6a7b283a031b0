"""Coverage audit of the SDK 2.12.0 `durable_workflow.Client` against `burrow server` (SPEC M1-M8,
PROTOCOL 2-10; reference server routes/api.php).

One table maps every public method of the installed `Client` to the route it calls under `/api`
and the test file that drives that route, or to a deferral from a small fixed set. The checks are
static plus a few in-process requests on an app that is built but never started (no database,
broker or SDK network call):

- the table names exactly the Client's public methods, so a new SDK method fails here;
- every served route is registered in the ASGI app with its HTTP method (path params normalised,
  the server may name them differently from the SDK);
- every named test file exists and mentions the method name or its route;
- deferred visibility routes (external storage config)
  answer 404 today, and no deferred or missing route is registered, so the table stays honest when
  that work lands;
- "client-side only" methods make no request of their own, or call only other listed methods;
- "SDK keeps it off" holds in the SDK's own worker source.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import durable_workflow
import durable_workflow.worker
import httpx
import pytest
from durable_workflow import Client

from burrow.config import Settings
from burrow.server import ServerSettings, create_app
from tests.integration.server.conftest import ADMIN_TOKEN, CONTROL, OPERATOR_TOKEN, WORKER_TOKEN

TESTS = Path(__file__).resolve().parents[2]

NEXUS = "nexus"
BRIDGE = "bridge webhook"
VISIBILITY = "per-namespace external payload storage configuration: not served yet"
CLIENT_SIDE = "client-side only"
SDK_OFF = "SDK keeps it off"
DEFERRALS = {NEXUS, BRIDGE, VISIBILITY, CLIENT_SIDE, SDK_OFF}

Route = tuple[str, str]  # (HTTP method, template under /api with the SDK's param names)


@dataclass(frozen=True)
class Served:
    """Served by Burrow: the routes the SDK method calls and the test file that drives them."""

    test: str
    routes: tuple[Route, ...]


@dataclass(frozen=True)
class Deferred:
    """Not served on purpose; `routes` are what the SDK would call, `calls` the listed methods a
    client-side method delegates to."""

    reason: str
    routes: tuple[Route, ...] = ()
    calls: tuple[str, ...] = ()


@dataclass(frozen=True)
class Missing:
    """Called by the SDK, served by no route and not deferrable: a known gap."""

    routes: tuple[Route, ...]


def served(test: str, *routes: Route) -> Served:
    return Served(test, routes)


def deferred(reason: str, *routes: Route, calls: tuple[str, ...] = ()) -> Deferred:
    return Deferred(reason, routes, calls)


SRV = "integration/server/"
ACC = "acceptance/"
SA = SRV + "test_server_search_attributes.py"
NSP = SRV + "test_server_namespaces.py"
SC = SRV + "test_server_schedules.py"
WT = "/worker/workflow-tasks/{task_id}"
AT = "/worker/activity-tasks/{task_id}"
QT = "/worker/query-tasks/{query_task_id}"
UV = "/worker/update-validation-tasks/{update_validation_task_id}"
RUN = "/workflows/{workflow_id}/runs/{run_id}"
STREAM = RUN + "/streams/{stream_name}"
TQ = "/task-queues/{task_queue}"
NS = "/namespaces/{name}"
SCHED = "/schedules/{schedule_id}"

TABLE: dict[str, Served | Deferred | Missing] = {
    # discovery and system (SPEC M7, M8)
    "get_cluster_info": served(SRV + "test_discovery_and_auth.py", ("GET", "/cluster/info")),
    "health": served(SRV + "test_server_health.py", ("GET", "/health")),
    "repair_status": served(SRV + "test_fleet_routes.py", ("GET", "/system/repair")),
    "repair_pass": served(SRV + "test_fleet_routes.py", ("POST", "/system/repair/pass")),
    "retention_status": served(NSP, ("GET", "/system/retention")),
    "retention_pass": served(NSP, ("POST", "/system/retention/pass")),
    "activity_timeout_status": served(
        SRV + "test_fleet_routes.py", ("GET", "/system/activity-timeouts")
    ),
    "activity_timeout_pass": served(
        SRV + "test_fleet_routes.py", ("POST", "/system/activity-timeouts/pass")
    ),
    # task queues and workers (SPEC M7)
    "list_task_queues": served(SRV + "test_fleet_routes.py", ("GET", "/task-queues")),
    "describe_task_queue": served(SRV + "test_fleet_routes.py", ("GET", "/task-queues/{name}")),
    "list_task_queue_build_ids": served(SRV + "test_fleet_routes.py", ("GET", TQ + "/build-ids")),
    "drain_task_queue_build_id": served(
        SRV + "test_fleet_routes.py", ("POST", TQ + "/build-ids/drain")
    ),
    "promote_task_queue_build_id": served(
        SRV + "test_fleet_routes.py", ("POST", TQ + "/build-ids/promote")
    ),
    "resume_task_queue_build_id": served(
        SRV + "test_fleet_routes.py", ("POST", TQ + "/build-ids/resume")
    ),
    "list_workers": served(SRV + "test_fleet_routes.py", ("GET", "/workers")),
    "describe_worker": served(SRV + "test_fleet_routes.py", ("GET", "/workers/{worker_id}")),
    "deregister_worker": served(SRV + "test_fleet_routes.py", ("DELETE", "/workers/{worker_id}")),
    # workflows: control plane (SPEC M1-M6)
    "start_workflow": served(SRV + "test_control_plane.py", ("POST", "/workflows")),
    "describe_workflow": served(
        SRV + "test_workflow_control_routes.py", ("GET", "/workflows/{workflow_id}")
    ),
    "list_workflows": served(SRV + "test_workflow_control_routes.py", ("GET", "/workflows")),
    "get_history": served(SRV + "test_control_plane.py", ("GET", RUN + "/history")),
    "export_history": served(
        SRV + "test_workflow_control_routes.py", ("GET", RUN + "/history/export")
    ),
    "list_workflow_runs": served(
        SRV + "test_workflow_control_routes.py", ("GET", "/workflows/{workflow_id}/runs")
    ),
    "describe_workflow_run": served(SRV + "test_control_plane.py", ("GET", RUN)),
    "signal_workflow": served(
        SRV + "test_control_plane.py",
        ("POST", "/workflows/{workflow_id}/signal/{signal_name}"),
        ("POST", RUN + "/signal/{signal_name}"),
    ),
    "append_message_stream": served(
        SRV + "test_server_message_streams.py",
        ("POST", "/workflows/{workflow_id}/message-streams/{stream_name}/messages"),
    ),
    "query_workflow": served(
        SRV + "test_server_queries_updates.py",
        ("POST", "/workflows/{workflow_id}/query/{query_name}"),
    ),
    "update_workflow": served(
        SRV + "test_server_sdk_updates.py",
        ("POST", "/workflows/{workflow_id}/update/{update_name}"),
    ),
    "request_workflow_cancellation": served(
        SRV + "test_server_cooperative_cancellation.py",
        ("POST", "/workflows/{workflow_id}/request-cancellation"),
        ("POST", RUN + "/request-cancellation"),
    ),
    "cancel_workflow": served(
        SRV + "test_workflow_control_routes.py", ("POST", "/workflows/{workflow_id}/cancel")
    ),
    "terminate_workflow": served(
        SRV + "test_workflow_control_routes.py", ("POST", "/workflows/{workflow_id}/terminate")
    ),
    "repair_workflow": served(
        SRV + "test_workflow_control_routes.py", ("POST", "/workflows/{workflow_id}/repair")
    ),
    "redrive_workflow": served(
        SRV + "test_workflow_control_routes.py",
        ("POST", "/workflows/{workflow_id}/runs/{failed_run_id}/redrive"),
    ),
    "archive_workflow": served(
        SRV + "test_workflow_control_routes.py", ("POST", "/workflows/{workflow_id}/archive")
    ),
    # workflow streams (PROTOCOL workflow streams)
    "list_workflow_streams": served(
        SRV + "test_server_workflow_streams.py", ("GET", RUN + "/streams")
    ),
    "describe_workflow_stream": served(SRV + "test_server_workflow_streams.py", ("GET", STREAM)),
    "subscribe_workflow_stream": served(
        SRV + "test_server_workflow_streams.py", ("GET", STREAM + "/items")
    ),
    "append_workflow_stream": served(
        SRV + "test_server_workflow_streams.py", ("POST", STREAM + "/items")
    ),
    "close_workflow_stream": served(
        SRV + "test_server_workflow_streams.py", ("POST", STREAM + "/close")
    ),
    # standalone activities
    "start_activity": served(SRV + "test_server_standalone_activities.py", ("POST", "/activities")),
    "describe_activity": served(
        SRV + "test_server_standalone_activities.py", ("GET", "/activities/{activity_id}")
    ),
    "list_activities": served(SRV + "test_server_standalone_activities.py", ("GET", "/activities")),
    # worker plane: registration and sessions (PROTOCOL 2-4)
    "register_worker": served(SRV + "test_server_worker_runtime.py", ("POST", "/worker/register")),
    "heartbeat_worker": served(SRV + "test_worker_plane.py", ("POST", "/worker/heartbeat")),
    "deregister_worker_registration": served(
        SRV + "test_worker_plane.py", ("DELETE", "/worker/registrations/{worker_id}")
    ),
    "create_worker_session": served(
        SRV + "test_server_worker_sessions.py", ("POST", "/worker/sessions")
    ),
    "renew_worker_session": served(
        SRV + "test_server_worker_sessions.py", ("POST", "/worker/sessions/{session_id}/heartbeat")
    ),
    "close_worker_session": served(
        SRV + "test_server_worker_sessions.py", ("DELETE", "/worker/sessions/{session_id}")
    ),
    # worker plane: workflow tasks (PROTOCOL 5-7)
    "poll_workflow_task_response": served(
        SRV + "test_worker_plane.py", ("POST", "/worker/workflow-tasks/poll")
    ),
    "complete_workflow_task": served(SRV + "test_worker_plane.py", ("POST", WT + "/complete")),
    "fail_workflow_task": served(SRV + "test_worker_plane.py", ("POST", WT + "/fail")),
    "heartbeat_workflow_task": served(SRV + "test_worker_plane.py", ("POST", WT + "/heartbeat")),
    "workflow_task_history": served(SRV + "test_worker_plane.py", ("POST", WT + "/history")),
    "deliver_workflow_cancellation": served(
        SRV + "test_server_cooperative_cancellation.py", ("POST", WT + "/deliver-cancellation")
    ),
    # worker plane: query and update-validation tasks
    "poll_query_task": served(
        SRV + "test_server_queries_updates.py", ("POST", "/worker/query-tasks/poll")
    ),
    "complete_query_task": served(SRV + "test_server_broker_wakes.py", ("POST", QT + "/complete")),
    "fail_query_task": served(SRV + "test_server_queries_updates.py", ("POST", QT + "/fail")),
    "query_task_status": served(SRV + "test_server_query_task_status.py", ("GET", QT + "/status")),
    "poll_update_validation_task": served(
        SRV + "test_server_update_validation.py", ("POST", "/worker/update-validation-tasks/poll")
    ),
    "approve_update_validation_task": served(
        SRV + "test_server_update_validation.py", ("POST", UV + "/approve")
    ),
    "reject_update_validation_task": served(
        SRV + "test_server_update_validation.py", ("POST", UV + "/reject")
    ),
    # worker plane: activity tasks (PROTOCOL 8-9)
    "poll_activity_task": served(
        SRV + "test_worker_plane.py", ("POST", "/worker/activity-tasks/poll")
    ),
    "complete_activity_task": served(SRV + "test_server_selections.py", ("POST", AT + "/complete")),
    "fail_activity_task": served(SRV + "test_worker_plane.py", ("POST", AT + "/fail")),
    "heartbeat_activity_task": served(
        SRV + "test_server_activity_lease_renewal.py", ("POST", AT + "/heartbeat")
    ),
    "renew_activity_task_lease": served(
        SRV + "test_server_activity_lease_renewal.py", ("POST", AT + "/renew-lease")
    ),
    "activity_task_status": served(
        SRV + "test_server_cooperative_cancellation.py", ("POST", AT + "/status")
    ),
    "acknowledge_activity_cancellation": served(
        SRV + "test_server_cooperative_cancellation.py", ("POST", AT + "/acknowledge-cancellation")
    ),
    # deferred
    "execute_nexus_operation": deferred(
        NEXUS,
        (
            "POST",
            "/service-endpoints/{endpoint_name}/services/{service_name}"
            "/operations/{operation_name}/execute",
        ),
    ),
    "send_webhook_bridge_event": deferred(BRIDGE, ("POST", "/bridge-adapters/webhook/{adapter}")),
    "list_namespaces": served(NSP, ("GET", "/namespaces")),
    "create_namespace": served(NSP, ("POST", "/namespaces")),
    "describe_namespace": served(NSP, ("GET", NS)),
    "update_namespace": served(NSP, ("PUT", NS)),
    "delete_namespace": served(NSP, ("DELETE", NS)),
    "set_namespace_external_storage": deferred(VISIBILITY, ("PUT", NS + "/external-storage")),
    "test_external_storage": deferred(VISIBILITY, ("POST", "/storage/test")),
    "list_search_attributes": served(SA, ("GET", "/search-attributes")),
    "create_search_attribute": served(SA, ("POST", "/search-attributes")),
    "delete_search_attribute": served(SA, ("DELETE", "/search-attributes/{name}")),
    "list_schedules": served(SC, ("GET", "/schedules")),
    "create_schedule": served(SC, ("POST", "/schedules")),
    "describe_schedule": served(SC, ("GET", SCHED)),
    "update_schedule": served(SC, ("PUT", SCHED)),
    "delete_schedule": served(SC, ("DELETE", SCHED)),
    "pause_schedule": served(SC, ("POST", SCHED + "/pause")),
    "resume_schedule": served(SC, ("POST", SCHED + "/resume")),
    "trigger_schedule": served(SC, ("POST", SCHED + "/trigger")),
    "backfill_schedule": served(SC, ("POST", SCHED + "/backfill")),
    "get_schedule_history": served(SC, ("GET", SCHED + "/history")),
    "open_cancellation_scope_on_claim": deferred(
        SDK_OFF, ("POST", WT + "/cancellation-scopes/open")
    ),
    "cancellation_scope_boundary_on_claim": deferred(
        SDK_OFF, ("POST", WT + "/cancellation-scopes/{phase}")
    ),
    "tls_context": deferred(CLIENT_SIDE),
    "aclose": deferred(CLIENT_SIDE),
    "get_workflow_handle": deferred(CLIENT_SIDE),
    "get_activity_handle": deferred(CLIENT_SIDE),
    "get_schedule_handle": deferred(CLIENT_SIDE),
    "poll_workflow_task": deferred(CLIENT_SIDE, calls=("poll_workflow_task_response",)),
    "get_result": deferred(CLIENT_SIDE, calls=("describe_workflow", "get_history")),
    "get_activity_result": deferred(CLIENT_SIDE, calls=("describe_activity",)),
    "iter_workflow_stream": deferred(CLIENT_SIDE, calls=("subscribe_workflow_stream",)),
    "iter_schedule_history": deferred(CLIENT_SIDE, calls=("get_schedule_history",)),
    # protocol 1.20 prepared local activities: each operation is its own route; the SDK worker
    # runs them end to end in acceptance/test_sdk_parallel_groups.py
    "prepared_local_activity_operation": served(
        SRV + "test_server_prepared_local_activities.py",
        ("POST", WT + "/local-activities/{operation}"),
        ("POST", WT + "/local-activities/{activity_attempt_id}/{operation}"),
    ),
}

# Second forms of served methods that Burrow does not serve (fenced deregistration is used only
# when `worker_deregistration_fencing` is advertised in cluster info, which Burrow does not).
MISSING_VARIANTS: dict[str, tuple[Route, ...]] = {
    "deregister_worker_registration": (("POST", "/worker/registrations/{worker_id}/deregister"),),
}


def public_methods() -> set[str]:
    return {name for name, _ in inspect.getmembers(Client) if not name.startswith("_")}


def normalise(path: str) -> str:
    """A route template with every path param named alike (`{x}`, `{x:path}` -> `{}`)."""
    return re.sub(r"\{[^}]+\}", "{}", path)


def flatten(routes: Iterable[Any]) -> Iterator[Any]:
    """The app's routes, including those of included routers (FastAPI keeps them nested)."""
    for route in routes:
        nested = getattr(route, "effective_route_contexts", None)
        if nested is not None:
            yield from flatten(nested())
        else:
            yield route


def build_app() -> Any:
    """The app as tests/integration/server/conftest.py builds it, never started: no connection is
    opened, and routes that are not registered answer without reaching the store."""
    server = ServerSettings(
        worker_token=WORKER_TOKEN,
        operator_token=OPERATOR_TOKEN,
        admin_token=ADMIN_TOKEN,
        sweep_interval_seconds=60.0,
    )
    return create_app(server, Settings.load(database_url="postgresql://127.0.0.1:1/unused"))


@pytest.fixture(scope="module")
def registered() -> set[tuple[str, str]]:
    """(HTTP method, normalised path) of every registered route."""
    pairs: set[tuple[str, str]] = set()
    for route in flatten(build_app().routes):
        for method in getattr(route, "methods", None) or ():
            pairs.add((method, normalise(route.path)))
    return pairs


def served_route(route: Route) -> tuple[str, str]:
    method, template = route
    return method, normalise("/api" + template)


def route_pattern(template: str) -> re.Pattern[str]:
    """The template as it shows in a test: each param literal or interpolated."""
    parts = re.split(r"\{[^}]+\}", template)
    return re.compile(r"[^/\s]+".join(re.escape(part) for part in parts) + r"(?![\w-])")


def mentions(text: str, name: str, route: Route) -> bool:
    """The test names the SDK method, or the route: literally, or as its static head (often a
    module constant) plus its static tail, or the HTTP method when the route ends in a param."""
    verb, template = route
    if re.search(rf"\b{name}\b", text) or route_pattern(template).search(text):
        return True
    if "{" in template:
        head, tail = template.split("/{", 1)[0], re.split(r"\{[^}]+\}", template)[-1]
    else:
        head, _, last = template.rpartition("/")
        tail = "/" + last
    return bool(head) and head in text and (tail in text if tail else f'"{verb}"' in text)


def test_table_names_exactly_the_client_public_methods() -> None:
    """The SDK 2.12.0 Client surface: a method added or removed by the SDK fails here."""
    methods = public_methods()
    assert sorted(methods - TABLE.keys()) == [], "Client methods missing from the table"
    assert sorted(TABLE.keys() - methods) == [], "table rows that are not Client methods"
    assert durable_workflow.__version__ == "2.12.0"
    assert {e.reason for e in TABLE.values() if isinstance(e, Deferred)} <= DEFERRALS


def test_served_routes_are_registered(registered: set[tuple[str, str]]) -> None:
    """Every route the table says Burrow serves is in the ASGI app with its HTTP method."""
    absent = [
        (name, route)
        for name, entry in TABLE.items()
        if isinstance(entry, Served)
        for route in entry.routes
        if served_route(route) not in registered
    ]
    assert absent == []


def test_deferred_and_missing_routes_are_not_registered(registered: set[tuple[str, str]]) -> None:
    """A deferred or missing route that lands must move to the served rows."""
    rows = [(n, e.routes) for n, e in TABLE.items() if isinstance(e, Deferred | Missing)]
    rows += list(MISSING_VARIANTS.items())
    landed = [(n, r) for n, routes in rows for r in routes if served_route(r) in registered]
    assert landed == []


def test_named_test_files_exist_and_mention_the_method_or_route() -> None:
    """Each served row points at a test file that drives it."""
    unmentioned = []
    for name, entry in TABLE.items():
        if not isinstance(entry, Served):
            continue
        path = TESTS / entry.test
        assert path.is_file(), entry.test
        text = path.read_text()
        if not any(mentions(text, name, route) for route in entry.routes):
            unmentioned.append((name, entry.test))
    assert unmentioned == []


async def test_deferred_visibility_routes_answer_404_today() -> None:
    """External storage config is not served yet:
    each SDK call gets 404 with the operator's credentials."""
    transport = httpx.ASGITransport(app=build_app(), raise_app_exceptions=False)
    answers = {}
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
        for name, entry in TABLE.items():
            if not (isinstance(entry, Deferred) and entry.reason == VISIBILITY):
                continue
            for method, template in entry.routes:
                path = "/api" + re.sub(r"\{[^}]+\}", "x1", template)
                response = await http.request(method, path, headers=CONTROL, json={})
                answers[(name, method, path)] = response.status_code
    assert answers and set(answers.values()) == {404}, answers


def test_client_side_methods_request_nothing_themselves() -> None:
    """A client-side method sends no request, or only through other methods of the table."""
    for name, entry in TABLE.items():
        if not (isinstance(entry, Deferred) and entry.reason == CLIENT_SIDE):
            continue
        member = inspect.getattr_static(Client, name)
        function = member.fget if isinstance(member, property) else member
        assert function is not None, name
        source = inspect.getsource(function)
        assert "_request(" not in source, name
        for callee in entry.calls:
            assert f"self.{callee}(" in source, (name, callee)
            assert callee in TABLE and not isinstance(TABLE[callee], Missing), (name, callee)


def test_sdk_keeps_cancellation_scopes_off() -> None:
    """SDK 2.12.0's worker sets its cancellation scope switches to False and never turns them on,
    so the scope routes are never called against any server."""
    source = inspect.getsource(durable_workflow.worker)
    for switch in ("_allow_cancellation_scope_authoring", "_allow_cancellation_scope_delivery"):
        assignments = re.findall(rf"self\.{switch}\s*=\s*([^\n]+)", source)
        assert assignments == ["False"], (switch, assignments)
    for name, entry in TABLE.items():
        if isinstance(entry, Deferred) and entry.reason == SDK_OFF:
            assert f"self.client.{name}(" in source, name
