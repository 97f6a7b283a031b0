"""The page of one run: summary, payloads, timeline, history, pending work, chain (issue 31).

GET /ui/runs/{run_id} is the whole page; /ui/runs/{run_id}/live the part a live refresh swaps
in; /ui/workflow?id= redirects to the workflow id's current run. Actions are in run_actions.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import RedirectResponse
from starlette.responses import HTMLResponse

from burrow.errors import WorkflowNotFoundError
from burrow.ui import run_view
from burrow.ui.access import Caller, UiCaller, UiRefused
from burrow.ui.templating import render

router = APIRouter(include_in_schema=False)
NOTICES = {
    "signalled": "Signal sent.",
    "cancelled": "The run was cancelled.",
    "terminated": "The run was terminated.",
}
"""What a 303 back from an action says (by key: no text from the URL is shown)."""


async def page(
    request: Request,
    caller: UiCaller,
    run_id: str,
    *,
    after_seq: int = 0,
    template: str = "run.html",
    notice: str | None = None,
    error: str | None = None,
    answer: tuple[str, object] | None = None,
    status_code: int = 200,
) -> HTMLResponse:
    """Render the run page (or its live part) with an action's notice, error or answer."""
    view = await run_view.load(caller, run_id, max(0, after_seq))
    return render(
        request,
        caller,
        template,
        {
            "view": view,
            "run": view.described.run,
            "timeline": view.timeline,
            "notice": notice,
            "error": error,
            "answer": answer,
        },
        status_code=status_code,
    )


@router.get("/ui/runs/{run_id}")
async def run_page(
    request: Request,
    run_id: str,
    caller: Caller,
    after_seq: Annotated[int, Query(ge=0)] = 0,
    notice: str | None = None,
) -> HTMLResponse:
    """The whole page."""
    return await page(
        request, caller, run_id, after_seq=after_seq, notice=NOTICES.get(notice or "")
    )


@router.get("/ui/runs/{run_id}/live")
async def run_live(
    request: Request,
    run_id: str,
    caller: Caller,
    after_seq: Annotated[int, Query(ge=0)] = 0,
) -> HTMLResponse:
    """The parts that change (summary, timeline, pending work, history page): a live refresh."""
    return await page(request, caller, run_id, after_seq=after_seq, template="run_live.html")


@router.get("/ui/workflow")
async def workflow(
    caller: Caller, id: Annotated[str, Query(min_length=1, max_length=1000)]
) -> RedirectResponse:
    """The workflow id's current run."""
    try:
        run = await caller.state.store.get_run(namespace=caller.namespace, workflow_id=id)
    except WorkflowNotFoundError:
        raise UiRefused(
            404, "Workflow not found", f"no workflow {id!r} in namespace {caller.namespace}"
        ) from None
    target = caller_link(caller, f"/ui/runs/{run.run_id}")
    return RedirectResponse(target, status_code=303)


def caller_link(caller: UiCaller, path: str, **params: object) -> str:
    """A UI URL in the caller's namespace."""
    from burrow.ui.templating import link

    return link(caller, path, None, **params)
