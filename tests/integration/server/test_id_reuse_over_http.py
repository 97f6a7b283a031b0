"""Issue 33 item 2: `duplicate_policy` is the store's id-reuse policy, checked by the insert.

`POST /api/workflows` keeps the Durable Workflow server's default (`fail`: a workflow id is never
reused) and maps `use-existing` onto `IdReusePolicy.USE_EXISTING`. Two servers on one database
race each other the way two `burrow server` replicas would.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from tests.integration.server.conftest import QUEUE, WORLD, Api, ApiFactory

ROUNDS = 5


def _body(workflow_id: str, policy: str | None) -> dict[str, Any]:
    body = {"workflow_id": workflow_id, "workflow_type": "greeter", "task_queue": QUEUE}
    policy_field = {} if policy is None else {"duplicate_policy": policy}
    return {**body, "input": WORLD, **policy_field}


async def _start(api: Api, workflow_id: str, policy: str | None = None) -> httpx.Response:
    return await api.control("POST", "/api/workflows", json=_body(workflow_id, policy))


async def test_a_closed_workflow_id_is_refused_under_either_duplicate_policy(api: Api) -> None:
    """Issue 33 item 2: the HTTP default stays `fail`; `use-existing` returns only a running run."""
    first = (await _start(api, "closed-1")).json()
    terminated = await api.control("POST", "/api/workflows/closed-1/terminate", json={})
    assert terminated.status_code == 200

    for policy in (None, "fail", "use-existing"):
        refused = await _start(api, "closed-1", policy)
        assert (refused.status_code, refused.json()["reason"]) == (409, "instance_already_started")
        assert refused.json()["run_id"] == first["run_id"]
        assert "terminated" in refused.json()["message"]
    assert len(await api.state.store.list_workflows(namespace="default")) == 1


@pytest.mark.parametrize("policy", ["fail", "use-existing"])
async def test_concurrent_starts_of_one_id_on_two_servers_create_one_run(
    make_api: ApiFactory, policy: str
) -> None:
    """Issue 33 item 2: one 201; the other is 409 under `fail`, 200 with that run otherwise."""
    one, other = await make_api(), await make_api()
    for i in range(ROUNDS):
        workflow_id = f"race-{i}"
        answers = await asyncio.gather(
            _start(one, workflow_id, policy), _start(other, workflow_id, policy)
        )

        codes = sorted(a.status_code for a in answers)
        if policy == "fail":
            assert codes == [201, 409], [a.text for a in answers]
        else:
            assert codes == [200, 201], [a.text for a in answers]
            assert answers[0].json()["run_id"] == answers[1].json()["run_id"]
        runs = await one.state.store.list_workflows(namespace="default")
        assert [r.workflow_id for r in runs].count(workflow_id) == 1


async def test_concurrent_use_existing_starts_on_one_server_share_the_run(api: Api) -> None:
    """Issue 33 item 2: starts batched into one statement get one run, 201 then 200."""
    answers = await asyncio.gather(*(_start(api, "batched", "use-existing") for _ in range(3)))

    assert sorted(a.status_code for a in answers) == [200, 200, 201]
    assert len({a.json()["run_id"] for a in answers}) == 1
