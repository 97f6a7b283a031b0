"""Issue 31: the Fleet, Schedules and Metrics pages, and the schedule actions' forms."""

from __future__ import annotations

from urllib.parse import quote

from burrow.protocol.schedules import IntervalSpec, ScheduleAction, ScheduleSpec
from burrow.store.models import StickyCacheReport
from burrow.store.schedule_models import NewSchedule, ScheduleStatus
from burrow.ui.metrics_history import MetricsHistory
from tests.integration.ui.conftest import Browser

HOURLY = ScheduleSpec(intervals=[IntervalSpec(every="PT1H")])


async def schedule(browser: Browser, schedule_id: str) -> str:
    """A schedule that fires hourly (never during a test); returns its page's path."""
    await browser.state.store.create_schedule(
        NewSchedule(
            namespace="default",
            schedule_id=schedule_id,
            spec=HOURLY,
            action=ScheduleAction(workflow_type="Report", task_queue="sched-q"),
        )
    )
    return f"/ui/schedules/{quote(schedule_id, safe='')}"


async def test_the_fleet_page_shows_workers_queues_and_blocked_work(viewer: Browser) -> None:
    """Issue 31: a registered worker, a queue's ready count, work no live worker can take."""
    store = viewer.state.store
    await store.register_worker(
        worker_id="w-fleet-1",
        namespace="default",
        task_queue="fleet-q",
        workflow_types=["greeter"],
        activity_types=[],
        concurrency=4,
        build_id="build-7",
        capabilities=["gpu"],
        sticky_cache=StickyCacheReport(enabled=True, capacity=10, size=3),
    )
    for workflow_id, workflow_type in (("f-1", "greeter"), ("f-2", "stranger")):
        await store.start_workflow(
            namespace="default",
            workflow_id=workflow_id,
            workflow_type=workflow_type,
            task_queue="fleet-q",
            input={"args": []},
        )
    page = await viewer.get("/ui/fleet")
    assert page.status_code == 200, page.text
    text = page.text
    assert "w-fleet-1" in text and "build-7" in text and "gpu" in text and "3 / 10" in text
    assert '<td class="ready">2</td>' in text
    assert '<tr class="blocked">' in text and "1 blocked" in text
    assert "in_worker" in text or "dedicated" in text  # the matching role
    queue = await viewer.get("/ui/fleet/queues/fleet-q")
    assert queue.status_code == 200 and "build-7" in queue.text and "w-fleet-1" in queue.text


async def test_pause_resume_and_trigger_from_the_forms(operator: Browser) -> None:
    """Issue 31: the schedule pages list and describe; the forms pause, resume and trigger."""
    store = operator.state.store
    path = await schedule(operator, "nightly-report")
    listing = await operator.get("/ui/schedules")
    assert listing.status_code == 200 and "nightly-report" in listing.text
    assert "Report" in listing.text and "PT1H" in listing.text
    page = await operator.get(path)
    assert page.status_code == 200 and 'data-confirm="Pause schedule nightly-report?"' in page.text
    assert "needs the operator role" not in page.text

    paused = await operator.post(f"{path}/pause?namespace=default", {"note": "maintenance"})
    assert paused.status_code == 303 and "notice=paused" in paused.headers["location"]
    found = await store.describe_schedule(namespace="default", schedule_id="nightly-report")
    assert found.status is ScheduleStatus.PAUSED and found.note == "maintenance"
    shown = await operator.get(paused.headers["location"])
    assert "Schedule paused" in shown.text and "Resume" in shown.text

    resumed = await operator.post(f"{path}/resume?namespace=default")
    assert resumed.status_code == 303
    found = await store.describe_schedule(namespace="default", schedule_id="nightly-report")
    assert found.status is ScheduleStatus.ACTIVE

    triggered = await operator.post(f"{path}/trigger?namespace=default")
    assert triggered.status_code == 303 and "outcome=started" in triggered.headers["location"]
    found = await store.describe_schedule(namespace="default", schedule_id="nightly-report")
    assert found.fires_count == 1 and found.latest_workflow_id is not None
    detail = await operator.get(triggered.headers["location"])
    assert "ScheduleTriggered" in detail.text and found.latest_workflow_id in detail.text


async def test_a_viewer_or_a_wrong_csrf_cannot_act_on_a_schedule(
    viewer: Browser, operator: Browser
) -> None:
    """Issue 31: actions need the operator role and the session's CSRF token (403 otherwise)."""
    path = await schedule(viewer, "guarded")
    page = await viewer.get(path)
    assert "needs the operator role" in page.text and "disabled" in page.text
    for action in ("pause", "resume", "trigger"):
        refused = await viewer.post(f"{path}/{action}?namespace=default")
        assert refused.status_code == 403, action
    await operator.get(path)
    forged = await operator.post(f"{path}/pause?namespace=default", {"csrf": "forged"})
    assert forged.status_code == 403
    found = await operator.state.store.describe_schedule(namespace="default", schedule_id="guarded")
    assert found.status is ScheduleStatus.ACTIVE and found.fires_count == 0


async def test_a_hostile_schedule_id_renders_escaped_and_links_quoted(operator: Browser) -> None:
    """Issue 31: a schedule id is untrusted text: escaped in pages, quoted in URLs."""
    hostile = '<img src=x onerror=alert(1)>/../"q'
    path = await schedule(operator, hostile)
    listing = await operator.get("/ui/schedules")
    assert hostile not in listing.text
    assert "&lt;img src=x onerror=alert(1)&gt;/../&#34;q" in listing.text
    assert quote(hostile, safe="") in listing.text
    page = await operator.get(path)
    assert page.status_code == 200 and hostile not in page.text
    paused = await operator.post(f"{path}/pause?namespace=default")
    assert paused.status_code == 303
    found = await operator.state.store.describe_schedule(namespace="default", schedule_id=hostile)
    assert found.status is ScheduleStatus.PAUSED
    missing = await operator.get("/ui/schedules/no-such-schedule")
    assert missing.status_code == 404


async def test_the_metrics_page_draws_charts_after_two_samples(viewer: Browser) -> None:
    """Issue 31: charts say "collecting…" until two samples exist, then draw a line."""
    history = viewer.state.metrics_history
    # The server's sampler: its first sample is an interval (30 s) away; sampled on demand here.
    assert isinstance(history, MetricsHistory) and history.interval == 30
    first = await viewer.get("/ui/metrics")
    assert first.status_code == 200 and first.text.count("collecting…") == 3
    await history.sample_now()
    assert (await viewer.get("/ui/metrics")).text.count("collecting…") == 3
    await history.sample_now()
    page = await viewer.get("/ui/metrics")
    assert "collecting…" not in page.text and page.text.count("<polyline") == 3
    assert 'role="img"' in page.text
    assert "<title>Backlog (ready tasks): now 0 tasks</title>" in page.text
