"""The history export over HTTP: the run's bundle, with its parent and children in `links`.

`GET /api/workflows/{id}/runs/{runId}/history/export` is the SDK's `Client.export_history`
(PROTOCOL.md 17). The bundle is the one `burrow workflow history --export` writes;
`links.parents` names the run that started this one as its child and `links.children` the
children it started, in the link shape of the Durable Workflow package's
`HistoryExport::parentLinks` / `childLinks` (the keys Burrow has a value for are filled, the
others are null). The checksum is taken after the links are set, so the SDK's bundle verifier
accepts the file.
"""

from __future__ import annotations

from collections.abc import Sequence

from fastapi import APIRouter

from burrow.protocol import events as ev
from burrow.protocol.shapes import JsonDict
from burrow.replay import bundle as bundles
from burrow.replay_verify import bundle_of
from burrow.server import parallel_groups
from burrow.server.control_routes import named_run
from burrow.server.deps import OperatorCaller, State
from burrow.server.routing import ResponseBody
from burrow.store.models import ChildInfo, RunInfo

router = APIRouter(prefix="/api/workflows")
LINK_TYPE = "child_workflow"


def _link(
    *,
    parent: tuple[str, str],
    child: tuple[str, str | None],
    sequence: int | None,
    workflow_type: str | None,
    status: str | None,
) -> JsonDict:
    return {
        "id": f"{parent[1]}:{sequence}",
        "type": LINK_TYPE,
        "parent_workflow_instance_id": parent[0],
        "parent_workflow_run_id": parent[1],
        "child_workflow_instance_id": child[0],
        "child_workflow_run_id": child[1],
        "child_call_id": None,
        "sequence": sequence,
        "is_primary_parent": True,
        "run_number": None,
        "workflow_type": workflow_type,
        "class": None,
        "status": status,
        "status_bucket": None,
        "closed_reason": status if status != "running" else None,
        "created_at": None,
        "history_authority": "history",
        "diagnostic_only": False,
    }


def parent_links(run: RunInfo, history: Sequence[ev.HistoryEvent]) -> list[JsonDict]:
    """The run's parent, if a run started it as its child (step from its WorkflowStarted)."""
    if run.parent_workflow_id is None or run.parent_run_id is None:
        return []
    started = history[0].event if history else None
    step = started.parent_sequence if isinstance(started, ev.WorkflowStarted) else None
    link = _link(
        parent=(run.parent_workflow_id, run.parent_run_id),
        child=(run.workflow_id, run.run_id),
        sequence=step,
        workflow_type=None,
        status=None,
    )
    return [link]


def child_links(run: RunInfo, children: Sequence[ChildInfo]) -> list[JsonDict]:
    """The children the run started, in the order it started them."""
    return [
        _link(
            parent=(run.workflow_id, run.run_id),
            child=(child.workflow_id, child.first_run_id),
            sequence=child.step,
            workflow_type=child.workflow_type,
            status=child.closed_status or "running",
        )
        for child in children
    ]


@router.get("/{workflow_id}/runs/{run_id}/history/export")
async def export_history(
    workflow_id: str, run_id: str, state: State, caller: OperatorCaller
) -> ResponseBody:
    """One run's history export bundle, its parent and children linked."""
    run = await named_run(state, caller.namespace, workflow_id, run_id)
    history = await state.store.read_history(run_id=run.run_id)
    children = await state.store.run_children(run_ids=[run.run_id])
    bundle = bundle_of(run, history)
    groups = parallel_groups.groups_of(history)
    bundle["history_events"] = [
        parallel_groups.annotate(r, groups) for r in bundle["history_events"]
    ]
    bundle["links"] = {
        "projection_source": "history",
        "parents": parent_links(run, history),
        "children": child_links(run, children),
    }
    bundle["integrity"] = {**bundle["integrity"], "checksum": bundles.checksum(bundle)}
    return bundle
