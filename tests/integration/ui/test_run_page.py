"""Issue 31: the page of one run, its timeline, history, pending work and actions.

Runs are driven through the worker protocol by hand on the in-process app (as the server's
contract tests do), so each history is exactly what the test wrote.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from typing import Any

import pytest

from burrow import codec
from burrow.store.models import RunStatus
from burrow.ui import run_view
from tests.integration.ui.conftest import OPERATOR_TOKEN, WORKER_TOKEN, Browser

QUEUE = "ui-q"
WORKER = {"Authorization": f"Bearer {WORKER_TOKEN}", "X-Durable-Workflow-Protocol-Version": "1.20"}
CONTROL = {
    "Authorization": f"Bearer {OPERATOR_TOKEN}",
    "X-Durable-Workflow-Control-Plane-Version": "2",
}
HOSTILE = "<script>alert(1)</script>"


class Driver:
    """A hand-driven worker and client on the app, through a browser's httpx client."""

    def __init__(self, browser: Browser) -> None:
        self.http = browser.http

    async def worker(self, path: str, body: dict[str, Any]) -> Any:
        response = await self.http.post(path, headers=WORKER, json=body)
        assert response.status_code in (200, 201), response.text
        return response.json()

    async def start(self, workflow_id: str) -> str:
        await self.worker(
            "/api/worker/register",
            {
                "worker_id": "w1",
                "task_queue": QUEUE,
                "runtime": "python",
                "supported_workflow_types": ["greeter"],
                "supported_activity_types": ["greet"],
            },
        )
        response = await self.http.post(
            "/api/workflows",
            headers=CONTROL,
            json={
                "workflow_id": workflow_id,
                "workflow_type": "greeter",
                "task_queue": QUEUE,
                "input": dict(codec.encode(["ada"])),
            },
        )
        assert response.status_code == 201, response.text
        run_id: str = response.json()["run_id"]
        return run_id

    async def workflow_task(self, *commands: dict[str, Any]) -> None:
        polled = {"worker_id": "w1", "task_queue": QUEUE, "timeout_seconds": 5}
        task = (await self.worker("/api/worker/workflow-tasks/poll", polled))["task"]
        fence = {
            "lease_owner": task["lease_owner"],
            "workflow_task_attempt": task["workflow_task_attempt"],
            "commands": list(commands),
        }
        await self.worker(f"/api/worker/workflow-tasks/{task['task_id']}/complete", fence)

    async def activity(self, *, fail: str | None = None) -> None:
        polled = {"worker_id": "w1", "task_queue": QUEUE, "timeout_seconds": 5}
        task = (await self.worker("/api/worker/activity-tasks/poll", polled))["task"]
        own = {"activity_attempt_id": task["activity_attempt_id"], "lease_owner": "w1"}
        if fail is None:
            body = {**own, "result": dict(codec.encode("hello, ada"))}
            await self.worker(f"/api/worker/activity-tasks/{task['task_id']}/complete", body)
        else:
            body = {**own, "failure": {"message": fail, "type": "IOError"}}
            await self.worker(f"/api/worker/activity-tasks/{task['task_id']}/fail", body)


GREET = {
    "type": "schedule_activity",
    "activity_type": "greet",
    "queue": QUEUE,
    "arguments": dict(codec.encode(["ada"])),
    "retry_policy": {"backoff_seconds": [0.05], "max_attempts": 3},
}

TIMER = {"type": "start_timer", "delay_seconds": 3600}


async def _running(browser: Browser, workflow_id: str) -> str:
    """A run waiting on a timer (its first workflow task done)."""
    driver = Driver(browser)
    run_id = await driver.start(workflow_id)
    await driver.workflow_task(TIMER)
    return run_id


async def test_a_completed_run_with_a_retried_activity(
    operator: Browser, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 31: summary, decoded input and result, one timeline bar per activity attempt (the
    failed one, its backoff, the success), and the history table, paged, with its expanders."""
    driver = Driver(operator)
    run_id = await driver.start("ui-run-done")
    await driver.workflow_task(GREET)
    await driver.activity(fail=HOSTILE)
    pending = (await operator.get(f"/ui/runs/{run_id}")).text
    assert '<table class="pending">' in pending and HOSTILE not in pending
    assert "bar-open" in pending  # the backoff, or attempt 2 waiting for a worker
    await driver.activity()
    await driver.workflow_task({"type": "complete_workflow", "result": dict(codec.encode("hi"))})

    page = await operator.get(f"/ui/runs/{run_id}")
    assert page.status_code == 200, page.text
    text = page.text
    assert "ui-run-done" in text and "greeter" in text and QUEUE in text
    assert "completed" in text and "&#34;hi&#34;" in text and "&#34;ada&#34;" in text
    attempts = re.findall(r'data-kind="activity" data-attempt="(\d+)"', text)
    assert attempts == ["1", "2"]
    failed = re.search(r'<rect class="bar-queued bar-failed"[^>]*data-attempt="1"', text)
    assert failed is not None
    assert text.count('data-kind="backoff"') == 1 and 'data-kind="timer"' not in text
    assert HOSTILE not in text and "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    assert 'data-toggle="event-1" aria-expanded="false"' in text
    assert '<pre id="event-1" hidden>' in text and "WorkflowStarted" in text
    assert f'data-live="/ui/events?namespace=default&amp;run_id={run_id}"' in text
    assert 'hx-trigger="burrow:changed from:body"' in text and "style=" not in text

    monkeypatch.setattr(run_view, "HISTORY_PAGE", 4)
    first = await operator.get(f"/ui/runs/{run_id}")
    assert first.text.count('data-toggle="event-') == 4
    assert f"/ui/runs/{run_id}?namespace=default&amp;after_seq=4" in first.text
    second = await operator.get(f"/ui/runs/{run_id}?after_seq=4")
    assert 'id="event-5"' in second.text and 'id="event-4"' not in second.text
    live = await operator.get(f"/ui/runs/{run_id}/live")
    assert live.status_code == 200 and live.text.startswith('<div id="run-live"')
    moved = await operator.http.get("/ui/workflow?id=ui-run-done")
    assert moved.status_code == 303 and run_id in moved.headers["location"]


async def test_signal_cancel_and_terminate_from_the_forms(operator: Browser) -> None:
    """Issue 31: the action forms signal a run (hostile name escaped), refuse bad JSON without
    sending, cancel one run and terminate another; the store shows each."""
    store = operator.state.store
    run_id = await _running(operator, "ui-run-act")
    page = await operator.get(f"/ui/runs/{run_id}")
    assert 'data-kind="timer"' in page.text and "bar-timer bar-open" in page.text
    assert page.text.count('name="csrf"') == 5 and "data-confirm=" in page.text

    for action in ("signal", "query", "update"):
        form = {f"{action}_name": "go", "args": "[1,"}
        bad = await operator.post(f"/ui/runs/{run_id}/{action}", form)
        assert bad.status_code == 422 and "not valid JSON" in bad.text, action
    sent = await operator.post(
        f"/ui/runs/{run_id}/signal", {"signal_name": HOSTILE, "args": '["x"]'}
    )
    assert sent.status_code == 303 and "notice=signalled" in sent.headers["location"]
    await Driver(operator).workflow_task(TIMER)  # the worker takes the signal into history
    history = await store.read_history(run_id=run_id)
    signals = [e.event for e in history if e.event_type == "SignalReceived"]
    assert [s.signal_name for s in signals] == [HOSTILE]  # type: ignore[attr-defined]
    shown = await operator.get(sent.headers["location"])
    assert "Signal sent." in shown.text and HOSTILE not in shown.text
    assert 'data-kind="signal"' in shown.text

    cancelled = await operator.post(f"/ui/runs/{run_id}/cancel", {"reason": "done"})
    assert cancelled.status_code == 303
    run = await store.get_run(namespace="default", workflow_id="ui-run-act")
    assert run.status == RunStatus.CANCELLED

    other = await _running(operator, "ui-run-kill")
    killed = await operator.post(f"/ui/runs/{other}/terminate", {"reason": "stop"})
    assert killed.status_code == 303
    run = await store.get_run(namespace="default", workflow_id="ui-run-kill")
    assert run.status == RunStatus.TERMINATED


async def test_a_query_from_the_form_shows_its_answer(operator: Browser) -> None:
    """Issue 31: the query form asks the run's worker (with the JSON arguments typed) and the
    page shows the decoded answer, escaped."""
    run_id = await _running(operator, "ui-run-query")
    form = {"query_name": "status", "args": "[7]"}
    asking = asyncio.create_task(operator.post(f"/ui/runs/{run_id}/query", form))
    polled = {"worker_id": "w1", "task_queue": QUEUE, "timeout_seconds": 5}
    task = (await Driver(operator).worker("/api/worker/query-tasks/poll", polled))["task"]
    assert task["query_name"] == "status" and codec.decode(task["query_arguments"]) == [7]
    answer = {
        "lease_owner": task["lease_owner"],
        "query_task_attempt": task["query_task_attempt"],
        "result_envelope": dict(codec.encode({"state": HOSTILE})),
    }
    url = f"/api/worker/query-tasks/{task['query_task_id']}/complete"
    await Driver(operator).worker(url, answer)
    shown = await asking
    assert shown.status_code == 200 and "Query status" in shown.text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in shown.text and HOSTILE not in shown.text


async def test_viewers_and_forged_posts_are_refused(operator: Browser, viewer: Browser) -> None:
    """Issue 31: a viewer sees the page with disabled actions and is refused (403) on POST; a
    POST without or with a wrong CSRF token is refused (403); the run is untouched."""
    run_id = await _running(operator, "ui-run-guard")
    seen = await viewer.get(f"/ui/runs/{run_id}")
    assert seen.status_code == 200 and "needs the operator role" in seen.text
    assert "disabled" in seen.text
    refused = await viewer.post(f"/ui/runs/{run_id}/terminate", {"reason": "x"})
    assert refused.status_code == 403
    for token in ("", "wrong"):
        forged = await operator.post(f"/ui/runs/{run_id}/cancel", {"csrf": token})
        assert forged.status_code == 403
    run = await operator.state.store.get_run(namespace="default", workflow_id="ui-run-guard")
    assert run.status == RunStatus.RUNNING


async def test_unknown_runs_are_not_found(operator: Browser) -> None:
    """Issue 31: an unknown run id, a junk id, a missing workflow, a run of another namespace:
    the 404 page."""
    run_id = await Driver(operator).start("ui-run-elsewhere")
    await operator.state.store.ensure_namespaces(["other-ns"])
    assert (await operator.get(f"/ui/runs/{run_id}")).status_code == 200
    for path in (
        f"/ui/runs/{uuid.uuid4()}",
        "/ui/runs/not-a-uuid",
        "/ui/workflow?id=nope",
        f"/ui/runs/{run_id}?namespace=other-ns",
        "/ui/workflow?id=ui-run-elsewhere&namespace=other-ns",
    ):
        response = await operator.get(path)
        assert response.status_code == 404, path
        assert "not found" in response.text


async def test_a_failed_run_shows_its_failure_escaped(operator: Browser) -> None:
    """Issue 31: a failure's message, type and stack trace, escaped."""
    driver = Driver(operator)
    run_id = await driver.start("ui-run-failed")
    failure = {
        "type": "fail_workflow",
        "message": HOSTILE,
        "exception_type": "ValueError",
        "exception": {"stack": "Traceback: <b>here</b>"},
    }
    await driver.workflow_task(failure)
    page = await operator.get(f"/ui/runs/{run_id}")
    assert page.status_code == 200
    assert HOSTILE not in page.text and "&lt;script&gt;alert(1)&lt;/script&gt;" in page.text
    assert "ValueError" in page.text and "Traceback: &lt;b&gt;here&lt;/b&gt;" in page.text
