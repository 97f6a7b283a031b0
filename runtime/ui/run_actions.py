"""The run page's actions: signal, query, update, cancel, terminate (issue 31).

Each is a POST form checked by `Actor` (CSRF and the operator role) and goes through the same
calls and payload encoding as the HTTP control plane (control_routes, query_update_routes), so
the UI can do nothing the API would refuse. Arguments are JSON typed into the form: JSON that
does not parse is an error on the page and nothing is sent. Signal, cancel and terminate answer
303 back to the page with a notice; a query or an update shows its answer on the page.
"""

from __future__ import annotations

import json
from typing import Annotated

from fastapi import APIRouter, Form, Request
from fastapi.responses import JSONResponse, RedirectResponse, Response

from burrow import codec
from burrow.errors import BurrowError
from burrow.server import control_routes, query_update_routes
from burrow.server.api_errors import ApiError
from burrow.server.control_models import QueryWorkflow, Reason, SignalWorkflow, UpdateWorkflow
from burrow.server.worker_models import Envelope
from burrow.ui import run_view
from burrow.ui.access import Actor, UiCaller
from burrow.ui.run_page import NOTICES, caller_link, page
from burrow.ui.templating import render

router = APIRouter(prefix="/ui/runs/{run_id}", include_in_schema=False)
QUERY_SECONDS = 5.0
UPDATE_SECONDS = 10.0
NAME_CHARS = 255
Text = Annotated[str, Form()]


class BadForm(ValueError):
    """What the form holds cannot be sent (bad JSON, no name); shown on the page."""


def arguments(text: str) -> Envelope:
    """The form's JSON as the call's arguments.

    A JSON array is the argument list, any other value one argument, nothing no arguments.

    Raises:
        BadForm: the text is not JSON.
    """
    if not text.strip():
        values: list[object] = []
    else:
        try:
            parsed = json.loads(text)
        except ValueError as exc:
            raise BadForm(f"the arguments are not valid JSON: {exc}") from None
        values = parsed if isinstance(parsed, list) else [parsed]
    return Envelope.model_validate(dict(codec.encode(values)))


def _name(text: str, what: str) -> str:
    name = text.strip()
    if not name or len(name) > NAME_CHARS:
        raise BadForm(f"a {what} name is needed (at most {NAME_CHARS} characters)")
    return name


def _refused(exc: Exception) -> str:
    if isinstance(exc, ApiError):
        return f"{exc.message} ({exc.reason})"
    return str(exc) or type(exc).__name__


async def _target(caller: UiCaller, run_id: str) -> tuple[str, str]:
    """The run's workflow id (the run must be in the caller's namespace: else 404)."""
    run = (await run_view.load(caller, run_id)).described.run
    return run.workflow_id, run.run_id


def _in_place(request: Request) -> bool:
    """An htmx form post: the outcome replaces the form's outcome area; the page stays."""
    return request.headers.get("hx-request") == "true"


def _outcome(request: Request, caller: UiCaller, **shown: object) -> Response:
    context = {"notice": None, "error": None, "answer": None, **shown}
    return render(request, caller, "run_action_outcome.html", context)


async def _failed(request: Request, caller: UiCaller, run_id: str, message: str) -> Response:
    if _in_place(request):
        return _outcome(request, caller, error=message)  # htmx swaps 200s only
    return await page(request, caller, run_id, error=message, status_code=422)


def _back(request: Request, caller: UiCaller, run_id: str, notice: str) -> Response:
    if _in_place(request):
        return _outcome(request, caller, notice=NOTICES.get(notice, notice))
    return RedirectResponse(caller_link(caller, f"/ui/runs/{run_id}", notice=notice), 303)


async def _answered(
    request: Request, caller: UiCaller, run_id: str, answer: tuple[str, object]
) -> Response:
    if _in_place(request):
        return _outcome(request, caller, answer=answer)
    return await page(request, caller, run_id, answer=answer)


@router.post("/signal")
async def signal(
    request: Request, run_id: str, caller: Actor, signal_name: Text = "", args: Text = ""
) -> Response:
    """Send a signal to the run."""
    workflow_id, run = await _target(caller, run_id)
    try:
        body = SignalWorkflow(input=arguments(args))
        name = _name(signal_name, "signal")
        await control_routes._signal(caller.state, caller.namespace, workflow_id, run, name, body)
    except (BadForm, ApiError, BurrowError) as exc:
        return await _failed(request, caller, run_id, f"Signal not sent: {_refused(exc)}")
    return _back(request, caller, run_id, "signalled")


@router.post("/query")
async def query(
    request: Request, run_id: str, caller: Actor, query_name: Text = "", args: Text = ""
) -> Response:
    """Ask the run's worker a query; the answer is shown on the page."""
    workflow_id, run = await _target(caller, run_id)
    try:
        body = QueryWorkflow(input=arguments(args), timeout_seconds=QUERY_SECONDS)
        name = _name(query_name, "query")
        answer = await query_update_routes._query(
            caller.state, caller.namespace, workflow_id, run, name, body
        )
    except (BadForm, ApiError, BurrowError) as exc:
        return await _failed(request, caller, run_id, f"Query failed: {_refused(exc)}")
    envelope = answer.get("result_envelope")
    value = control_routes.decoded(envelope if isinstance(envelope, dict) else None)
    return await _answered(request, caller, run_id, (f"Query {name}", value))


@router.post("/update")
async def update(
    request: Request, run_id: str, caller: Actor, update_name: Text = "", args: Text = ""
) -> Response:
    """Send an update and wait (briefly) for its result; shown on the page."""
    workflow_id, run = await _target(caller, run_id)
    try:
        body = UpdateWorkflow(
            input=arguments(args), wait_for="completed", wait_timeout_seconds=UPDATE_SECONDS
        )
        name = _name(update_name, "update")
        sent = await query_update_routes._update(
            caller.state, caller.namespace, workflow_id, run, name, body
        )
    except (BadForm, ApiError, BurrowError) as exc:
        return await _failed(request, caller, run_id, f"Update failed: {_refused(exc)}")
    receipt = json.loads(bytes(sent.body)) if isinstance(sent, JSONResponse) else {}
    envelope = receipt.get("result_envelope")
    value = {
        "update_status": receipt.get("update_status"),
        "result": control_routes.decoded(envelope if isinstance(envelope, dict) else None),
    }
    return await _answered(request, caller, run_id, (f"Update {name}", value))


async def _close(
    request: Request, run_id: str, caller: UiCaller, reason: str, *, terminate: bool
) -> Response:
    workflow_id, run = await _target(caller, run_id)
    close = control_routes._terminate if terminate else control_routes._cancel
    try:
        await close(caller.state, caller.namespace, workflow_id, run, Reason(reason=reason or None))
    except (ApiError, BurrowError) as exc:
        failed = "Not terminated" if terminate else "Not cancelled"
        return await _failed(request, caller, run_id, f"{failed}: {_refused(exc)}")
    return _back(request, caller, run_id, "terminated" if terminate else "cancelled")


@router.post("/cancel")
async def cancel(request: Request, run_id: str, caller: Actor, reason: Text = "") -> Response:
    """Cancel the run now (closed as cancelled; no workflow code runs)."""
    return await _close(request, run_id, caller, reason[:10_000], terminate=False)


@router.post("/terminate")
async def terminate(request: Request, run_id: str, caller: Actor, reason: Text = "") -> Response:
    """Close the run now without running workflow code."""
    return await _close(request, run_id, caller, reason[:10_000], terminate=True)
