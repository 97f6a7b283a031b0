"""Where open runs stand and which runs a list shows, over HTTP (PROTOCOL.md 17; the Durable
Workflow server's `formatRun` `status` and `status_bucket`, and the package's `archived` filter).
"""

from __future__ import annotations

from typing import Any

from durable_workflow import Client

from burrow.client import Client as BurrowClient
from tests.integration.server.conftest import GREET, Api, fence
from tests.integration.server.test_workflow_control_routes import (
    _activity,
    _complete,
    client,
)

__all__ = ["client"]  # the SDK Client on the in-process app


async def test_open_runs_read_pending_then_waiting_then_running(api: Api, client: Client) -> None:
    """M8, PROTOCOL 17 (reference `formatRun` `status` and `status_bucket`): an open run is
    `pending` until a workflow task moves its history past its start (claimed or not; a repair
    recorded there does not), `waiting` while no workflow task is open (`wait_kind` says on
    what), `running` while one is open for it; all three are the `running` bucket. Describe, the
    list, the runs list and the list's `pending`/`waiting` filters agree at every stage."""
    await api.register()
    started = await api.start("st-1")

    async def seen() -> tuple[str, str, str | None, str, list[str]]:
        shown = (await api.control("GET", "/api/workflows/st-1")).json()
        [item] = (await api.control("GET", "/api/workflows", params={"query": "st-1"})).json()[
            "workflows"
        ]
        [listed_run] = (await client.list_workflow_runs("st-1")).runs
        assert item["status"] == listed_run.status == shown["status"]
        assert item["status_bucket"] == shown["status_bucket"]
        kept = [
            name
            for name in ("pending", "waiting", "running")
            if "st-1" in [w["workflow_id"] for w in await _listed(api, status=name)]
        ]
        return shown["status"], shown["status_bucket"], shown["wait_kind"], item["status"], kept

    assert await seen() == ("pending", "running", None, "pending", ["pending", "running"])
    await client.repair_workflow("st-1")  # RepairRequested is no step past its start
    assert await seen() == ("pending", "running", None, "pending", ["pending", "running"])
    await api.state.store.transactions.run(  # its first workflow task lost
        lambda txn: txn.conn.exec_driver_sql(
            f"DELETE FROM workflow_tasks WHERE run_id = '{started['run_id']}'"
        )
    )
    assert (await seen())[0] == "waiting"
    again = await client.repair_workflow("st-1")  # a repair after a repair still makes it
    assert again.raw is not None and again.raw["repair"]["task_created"] is True
    assert (await seen())[0] == "pending"
    task = await api.poll_workflow()  # leased: still not past its start
    assert (await seen())[0] == "pending"
    url = f"/api/worker/workflow-tasks/{task['task_id']}/complete"
    assert (await api.worker("POST", url, json=fence(task, commands=[GREET]))).status_code == 200
    assert await seen() == ("waiting", "running", "activity", "waiting", ["waiting", "running"])
    await _activity(api)  # its result readies a workflow task
    assert await seen() == ("running", "running", None, "running", ["running"])
    assert (await client.describe_workflow("st-1")).status == "running"
    await _complete(api, {"type": "start_timer", "delay_seconds": 600})
    assert await seen() == ("waiting", "running", "timer", "waiting", ["waiting", "running"])
    await api.control("POST", "/api/workflows/st-1/terminate", json={})
    assert await seen() == ("terminated", "failed", None, "terminated", [])
    assert (await client.describe_workflow_run("st-1", started["run_id"])).status == "terminated"


async def _listed(api: Api, **params: Any) -> list[dict[str, Any]]:
    response = await api.control("GET", "/api/workflows", params=params)
    assert response.status_code == 200, response.text
    listed: list[dict[str, Any]] = response.json()["workflows"]
    return listed


async def test_archived_runs_are_listed_unless_left_out(api: Api, client: Client) -> None:
    """PROTOCOL 17 (`list_workflows`): archived runs are listed with the others, marked
    `archived`, as the reference server lists them; `archived=true` keeps only them and
    `archived=false` leaves them out (the Durable Workflow package's visibility filter);
    Burrow's Client.list_workflows takes the same filter and lists the same runs; a bad
    `archived` is a typed 422."""
    for workflow_id in ("arc-1", "arc-2", "arc-3"):
        await api.start(workflow_id)
    for workflow_id in ("arc-1", "arc-2"):
        await api.control("POST", f"/api/workflows/{workflow_id}/terminate", json={})
    await client.archive_workflow("arc-1", reason="kept elsewhere")

    everything = await _listed(api)
    assert [(w["workflow_id"], w["archived"]) for w in everything] == [
        ("arc-3", False),
        ("arc-2", False),
        ("arc-1", True),
    ]
    assert everything[2]["archive_reason"] == "kept elsewhere"
    assert everything[2]["archived_at"] is not None
    assert [w["workflow_id"] for w in await _listed(api, archived="true")] == ["arc-1"]
    assert [w["workflow_id"] for w in await _listed(api, archived="false")] == ["arc-3", "arc-2"]
    kept = await _listed(api, archived="false", status="failed")
    assert [w["workflow_id"] for w in kept] == ["arc-2"]
    assert [e.workflow_id for e in (await client.list_workflows()).executions] == [
        "arc-3",
        "arc-2",
        "arc-1",
    ]
    runs_list = (await api.control("GET", "/api/workflows/arc-1/runs")).json()
    assert runs_list["runs"][0]["archived"] is True

    native = BurrowClient(api.state.store, settings=api.state.runtime)
    for archived, expected in ((None, ["arc-3", "arc-2", "arc-1"]), (True, ["arc-1"])):
        listed = await native.list_workflows(archived=archived)
        assert [r.workflow_id for r in listed] == expected
    assert [r.workflow_id for r in await native.list_workflows(archived=False)] == [
        w["workflow_id"] for w in await _listed(api, archived="false")
    ]

    bad = await api.control("GET", "/api/workflows", params={"archived": "sometimes"})
    assert (bad.status_code, bad.json()["reason"]) == (422, "validation_failed")
    assert "archived" in str(bad.json()["errors"])
