"""Schedules over HTTP (issue 30: "every schedule route the SDK's `Client` calls, with the
reference's shapes"; reference ScheduleController, tests/Feature/ScheduleTest.php,
ScheduleBackfillTest.php, ScheduleHistoryTest.php): the SDK Client's create_schedule,
list_schedules, describe_schedule, update_schedule, pause_schedule, resume_schedule,
trigger_schedule, backfill_schedule, delete_schedule, get_schedule_history and
iter_schedule_history against the app on a real database, namespace scoping, and every refusal
typed with nothing written."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import sqlalchemy as sa
from durable_workflow import Client, ScheduleAction, ScheduleSpec
from durable_workflow.errors import (
    InvalidArgument,
    ScheduleAlreadyExists,
    ScheduleListError,
    ScheduleNotFound,
)

from burrow.store import schema as s
from tests.integration.server.conftest import CONTROL, WORKER_TOKEN, Api

ROUTE = "/api/schedules"
HOURLY = ScheduleSpec(cron_expressions=["0 * * * *"], timezone="UTC")
ACTION = ScheduleAction(workflow_type="greeter", task_queue="q1", input=["world"])


async def rows(api: Api) -> dict[str, Any]:
    """What the schedule tables hold: schedules, fires, history events, runs."""
    async with api.state.store.engine.connect() as conn:
        schedules = (await conn.execute(sa.select(s.schedules))).all()
        fires = (await conn.execute(sa.select(s.schedule_fires))).all()
        events = (await conn.execute(sa.select(s.schedule_history))).all()
        runs = (await conn.execute(sa.select(sa.func.count()).select_from(s.runs))).scalar()
    return {
        "schedules": sorted((r.namespace, r.schedule_id, r.updated_at) for r in schedules),
        "fires": len(fires),
        "events": len(events),
        "runs": runs,
    }


async def test_the_sdk_client_creates_describes_lists_updates_and_deletes(
    client: Client,
) -> None:
    """Issue 30: create (201 `created`), describe with the reference's `state`/`info` and the
    SDK's fields, list, update (merging the action), delete (404 after)."""
    handle = await client.create_schedule(
        schedule_id="nightly",
        spec=HOURLY,
        action=ACTION,
        overlap_policy="buffer_one",
        jitter_seconds=30,
        max_runs=10,
        memo={"owner": "ops"},
        search_attributes={"Team": "ops"},
        note="hourly greeting",
    )
    assert handle.schedule_id == "nightly"

    described = await client.describe_schedule("nightly")
    assert described.status == "active"
    assert described.spec == {"cron_expressions": ["0 * * * *"], "intervals": [], "timezone": "UTC"}
    assert described.action is not None and described.action["workflow_type"] == "greeter"
    assert described.action["task_queue"] == "q1"
    assert described.action["input"]["codec"] == "avro"
    assert (described.overlap_policy, described.jitter_seconds) == ("buffer_one", 30)
    assert (described.max_runs, described.remaining_actions) == (10, 10)
    assert described.memo == {"owner": "ops"}
    assert described.search_attributes == {"Team": "ops"}
    assert described.note == "hourly greeting"
    assert described.next_fire_at is not None and described.next_fire_at.endswith(":00:00Z")
    assert described.info is not None and described.info["fires_count"] == 0
    assert len(described.info["next_fire_times"]) == 5

    listed = await client.list_schedules()
    assert [item.schedule_id for item in listed.schedules] == ["nightly"]
    assert listed.next_page_token is None
    assert listed.schedules[0].status == "active"

    await client.update_schedule(
        "nightly",
        action=ScheduleAction(workflow_type="greeter2"),
        overlap_policy="skip",
        jitter_seconds=0,
        note="changed",
    )
    changed = await client.describe_schedule("nightly")
    assert changed.action is not None and changed.action["workflow_type"] == "greeter2"
    assert changed.action["task_queue"] == "q1"  # merged over the current action
    assert (changed.overlap_policy, changed.jitter_seconds, changed.note) == ("skip", 0, "changed")

    await client.delete_schedule("nightly")
    with pytest.raises(ScheduleNotFound):
        await client.describe_schedule("nightly")
    assert (await client.list_schedules()).schedules == []


async def test_pause_resume_trigger_backfill_and_history(api: Api, client: Client) -> None:
    """Issue 30: pause with a note, resume, trigger now (one run, `<id>-<fire time>`), trigger
    again while it runs (skipped), backfill a range, and the audit stream in sequence order,
    paged, kept after a delete."""
    handle = await client.create_schedule(schedule_id="s1", spec=HOURLY, action=ACTION)
    await handle.pause(note="maintenance")
    paused = await client.describe_schedule("s1")
    assert (paused.status, paused.note) == ("paused", "maintenance")
    assert paused.paused_at is not None and paused.info is not None
    assert paused.info["next_fire_times"] == []
    await client.resume_schedule("s1", note="back")
    assert (await client.describe_schedule("s1")).status == "active"

    fired = await client.trigger_schedule("s1")
    assert fired.outcome == "triggered"
    assert fired.workflow_id is not None and fired.workflow_id.startswith("s1-")
    run = await client.describe_workflow(fired.workflow_id)
    assert (run.run_id, run.workflow_type) == (fired.run_id, "greeter")
    again = await client.trigger_schedule("s1", overlap_policy="skip")
    assert again.outcome == "skipped" and again.reason

    backfilled = await client.backfill_schedule(
        "s1",
        start_time="2026-01-01T00:00:00Z",
        end_time="2026-01-01T03:00:00Z",
        overlap_policy="allow_all",
    )
    assert backfilled.outcome == "backfill_started"
    assert backfilled.fires_attempted == 3  # 00:00, 01:00, 02:00; the end is excluded
    assert backfilled.results is not None
    assert [r["fire_time"] for r in backfilled.results] == [
        "2026-01-01T00:00:00Z",
        "2026-01-01T01:00:00Z",
        "2026-01-01T02:00:00Z",
    ]
    assert {r["outcome"] for r in backfilled.results} == {"started"}
    described = await client.describe_schedule("s1")
    assert described.fires_count == 4
    assert described.latest_workflow_instance_id is not None

    page = await client.get_schedule_history("s1", limit=3)
    assert (page.schedule_id, page.namespace, page.has_more) == ("s1", "default", True)
    assert [e.sequence for e in page.events] == [1, 2, 3]
    assert page.next_cursor == 3
    assert [e.event_type for e in page.events] == [
        "ScheduleCreated",
        "SchedulePaused",
        "ScheduleResumed",
    ]
    assert page.events[1].payload == {"note": "maintenance"}
    events = [e async for e in client.iter_schedule_history("s1", limit=2)]
    assert [e.sequence for e in events] == list(range(1, len(events) + 1))
    # The second trigger is skipped by the overlap policy, or, in the same second, as that
    # second's fire taken already (which records nothing: nothing happened).
    started = [e for e in events if e.event_type == "ScheduleTriggered"]
    skipped = [e for e in events if e.event_type == "ScheduleTriggerSkipped"]
    assert len(started) == 4 and len(skipped) in (0, 1)
    assert len(events) == 7 + len(skipped)
    assert started[0].workflow_instance_id == fired.workflow_id
    assert started[0].workflow_run_id == fired.run_id
    assert started[0].payload is not None and started[0].payload["kind"] == "trigger"
    assert [e.payload["kind"] for e in started[1:] if e.payload] == ["backfill"] * 3
    last = events[-1].sequence

    await client.delete_schedule("s1")
    after = await client.get_schedule_history("s1", after_sequence=last)
    assert [e.event_type for e in after.events] == ["ScheduleDeleted"]
    assert (after.has_more, after.next_cursor) == (False, None)


async def test_a_trigger_while_the_run_is_open_follows_the_overlap_policy(client: Client) -> None:
    """Issue 30 (reference ScheduleTest buffer tests): under `buffer_one` a second trigger while
    the first run is open is `buffered` with `buffer_depth`; its audit event says so."""
    await client.create_schedule(
        schedule_id="buf", spec=HOURLY, action=ACTION, overlap_policy="buffer_one"
    )
    first = await client.trigger_schedule("buf")
    assert first.outcome == "triggered"
    await asyncio.sleep(1.05)  # a trigger fires the current second; the next second is a new fire
    second = await client.trigger_schedule("buf")
    assert (second.outcome, second.buffer_depth) == ("buffered", 1)
    skipped = await client.trigger_schedule("buf", overlap_policy="skip")
    assert skipped.outcome == "skipped" and skipped.reason
    history = (await client.get_schedule_history("buf")).events
    buffered = [e for e in history if e.payload and e.payload.get("outcome") == "buffered"]
    assert [e.event_type for e in buffered] == ["ScheduleTriggerSkipped"]
    await asyncio.sleep(1.05)
    full = await client.trigger_schedule("buf")
    assert (full.outcome, full.reason) == (
        "buffer_full",
        "Previous workflow is still running and buffer is at capacity.",
    )


async def test_a_trigger_past_max_runs_is_skipped_as_exhausted(client: Client) -> None:
    """Reference ScheduleTest: past `max_runs` a trigger is `skipped`,
    `remaining_actions_exhausted`."""
    await client.create_schedule(schedule_id="once", spec=HOURLY, action=ACTION, max_runs=1)
    assert (await client.trigger_schedule("once")).outcome == "triggered"
    await asyncio.sleep(1.05)
    exhausted = await client.trigger_schedule("once")
    assert (exhausted.outcome, exhausted.reason) == ("skipped", "remaining_actions_exhausted")
    described = await client.describe_schedule("once")
    assert described.remaining_actions == 0
    assert described.info is not None and described.info["next_fire_times"] == []


async def test_a_schedule_without_an_id_gets_one(client: Client) -> None:
    """Reference ScheduleTest: a create without `schedule_id` is given a new id."""
    handle = await client.create_schedule(spec=HOURLY, action=ACTION, paused=True)
    assert handle.schedule_id
    described = await client.describe_schedule(handle.schedule_id)
    assert described.status == "paused"
    history = await client.get_schedule_history(handle.schedule_id)
    assert [e.event_type for e in history.events] == ["ScheduleCreated", "SchedulePaused"]


async def test_schedules_are_scoped_to_their_namespace(make_api: Any) -> None:
    """Issue 30: a schedule of one namespace is unseen, and its id free, in another."""
    api = await make_api(namespaces=("default", "other"))
    other = {**CONTROL, "X-Namespace": "other"}
    body = {
        "schedule_id": "same",
        "spec": {"intervals": [{"every": "PT1H"}]},
        "action": {"workflow_type": "greeter"},
    }
    made = await api.control("POST", ROUTE, json=body)
    assert made.status_code == 201, made.text
    assert made.json() == {"schedule_id": "same", "outcome": "created"}
    listed = await api.http.get(ROUTE, headers=other)
    assert listed.json() == {"schedules": [], "next_page_token": None}
    gone = await api.http.get(f"{ROUTE}/same", headers=other)
    assert gone.status_code == 404 and gone.json()["reason"] == "schedule_not_found"
    again = await api.http.post(ROUTE, json=body, headers=other)
    assert again.status_code == 201, again.text


async def test_list_pages_and_filters(api: Api, client: Client) -> None:
    """Issue 30: page_size and an opaque next_page_token walk every schedule once; status and
    workflow_type filter; a token the list did not hand out is refused."""
    for n in range(5):
        await client.create_schedule(schedule_id=f"p{n}", spec=HOURLY, action=ACTION, paused=n == 4)
    seen: list[str] = []
    token = None
    while True:
        page = await client.list_schedules(page_size=2, next_page_token=token)
        seen += [item.schedule_id for item in page.schedules]
        token = page.next_page_token
        if token is None:
            break
    assert seen == ["p0", "p1", "p2", "p3", "p4"]
    paused = await client.list_schedules(status="paused")
    assert [i.schedule_id for i in paused.schedules] == ["p4"]
    assert (await client.list_schedules(workflow_type="other")).schedules == []
    with pytest.raises(ScheduleListError) as bad:
        await client.list_schedules(next_page_token="not-a-token")
    assert bad.value.status == 400


async def test_sdk_refusals_are_typed(client: Client) -> None:
    """Issue 30: a taken id is ScheduleAlreadyExists, an unknown id ScheduleNotFound on every
    route, a spec that cannot work InvalidArgument (422)."""
    await client.create_schedule(schedule_id="taken", spec=HOURLY, action=ACTION)
    with pytest.raises(ScheduleAlreadyExists):
        await client.create_schedule(schedule_id="taken", spec=HOURLY, action=ACTION)
    with pytest.raises(InvalidArgument):
        await client.create_schedule(
            schedule_id="bad", spec=ScheduleSpec(cron_expressions=["61 * * * *"]), action=ACTION
        )
    calls = [
        client.describe_schedule("nope"),
        client.update_schedule("nope", note="x"),
        client.pause_schedule("nope"),
        client.resume_schedule("nope"),
        client.trigger_schedule("nope"),
        client.backfill_schedule(
            "nope", start_time="2026-01-01T00:00:00Z", end_time="2026-01-02T00:00:00Z"
        ),
        client.delete_schedule("nope"),
        client.get_schedule_history("nope"),
    ]
    for call in calls:
        with pytest.raises(ScheduleNotFound):
            await call


GOOD = {"spec": {"cron_expressions": ["0 * * * *"]}, "action": {"workflow_type": "greeter"}}


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "reason", "field"),
    [
        ("POST", "", {}, 422, "validation_failed", "spec"),
        ("POST", "", {"spec": GOOD["spec"]}, 422, "validation_failed", "action"),
        (
            "POST",
            "",
            {**GOOD, "overlap_policy": "nope"},
            422,
            "validation_failed",
            "overlap_policy",
        ),
        ("POST", "", {**GOOD, "jitter_seconds": 3601}, 422, "validation_failed", "jitter_seconds"),
        ("POST", "", {**GOOD, "max_runs": 0}, 422, "validation_failed", "max_runs"),
        ("POST", "", {**GOOD, "note": "n" * 1001}, 422, "validation_failed", "note"),
        (
            "POST",
            "",
            {**GOOD, "spec": {"cron_expressions": ["0 * * *"]}},
            422,
            "validation_failed",
            "spec.cron_expressions[0]",
        ),
        (
            "POST",
            "",
            {**GOOD, "spec": {"cron_expressions": ["0 * * * *"], "timezone": "Mars/Base"}},
            422,
            "validation_failed",
            "spec.timezone",
        ),
        (
            "POST",
            "",
            {**GOOD, "spec": {"intervals": [{"every": "P1M"}]}},
            422,
            "validation_failed",
            "spec.intervals.every",
        ),
        ("POST", "", {**GOOD, "spec": {}}, 422, "validation_failed", "spec"),
        ("POST", "", {**GOOD, "memo": {"m": "x" * 262_144}}, 422, "memo_too_large", None),
        ("POST", "", {**GOOD, "schedule_id": "taken"}, 409, "schedule_already_exists", None),
        ("PUT", "/taken", {"spec": {"cron_expressions": ["bad"]}}, 422, "validation_failed", None),
        ("PUT", "/taken", {"jitter_seconds": -1}, 422, "validation_failed", "jitter_seconds"),
        ("PUT", "/nope", {"note": "x"}, 404, "schedule_not_found", None),
        ("PUT", "/nope", {"memo": {"m": "x" * 262_144}}, 404, "schedule_not_found", None),
        ("PUT", "/taken", {"memo": {"m": "x" * 262_144}}, 422, "memo_too_large", None),
        ("POST", "/taken/trigger", {"overlap_policy": "x"}, 422, "validation_failed", None),
        (
            "POST",
            "/taken/backfill",
            {"start_time": "2026-01-02T00:00:00Z", "end_time": "2026-01-01T00:00:00Z"},
            422,
            "invalid_time_range",
            None,
        ),
        (
            "POST",
            "/taken/backfill",
            {"start_time": "yesterday", "end_time": "2026-01-01T00:00:00Z"},
            422,
            "validation_failed",
            "start_time",
        ),
        ("POST", "/taken/backfill", {}, 422, "validation_failed", "start_time"),
        (
            "POST",
            "/taken/backfill",
            {"start_time": "2000-01-01T00:00:00Z", "end_time": "2026-01-01T00:00:00Z"},
            422,
            "validation_failed",
            "backfill",
        ),
        ("GET", "/taken/history?after_sequence=-1", None, 422, "invalid_after_sequence", None),
        ("GET", "/taken/history?after_sequence=x", None, 422, "invalid_after_sequence", None),
        ("GET", "?status=deleted", None, 422, "validation_failed", None),
        ("GET", "?query=x", None, 422, "validation_failed", "query"),
        ("GET", "?page_size=0", None, 422, "validation_failed", None),
        ("GET", "?next_page_token=%25", None, 400, "invalid_page_token", None),
    ],
)
async def test_refusals_are_typed_and_write_nothing(
    api: Api,
    method: str,
    path: str,
    body: dict[str, Any] | None,
    status: int,
    reason: str,
    field: str | None,
) -> None:
    """Issue 30: each refusal has the reference's status and reason (and names the field)."""
    made = await api.control("POST", ROUTE, json={**GOOD, "schedule_id": "taken"})
    assert made.status_code == 201, made.text
    before = await rows(api)

    refused = await api.control(method, ROUTE + path, json=body)

    assert refused.status_code == status, refused.text
    answer = refused.json()
    assert answer["reason"] == reason
    if field is not None:
        assert field in answer["errors"], answer
    assert await rows(api) == before


async def test_discovery_advertises_schedules(api: Api) -> None:
    """PROTOCOL.md discovery `capabilities.schedules`: true now that the routes are served."""
    info = await api.control("GET", "/api/cluster/info")
    assert info.json()["capabilities"]["schedules"] is True


async def test_the_routes_need_the_operator_role(api: Api) -> None:
    """Like the reference's route group: a worker token is refused."""
    worker = {**CONTROL, "Authorization": f"Bearer {WORKER_TOKEN}"}
    refused = await api.http.get(ROUTE, headers=worker)
    assert refused.status_code in (401, 403), refused.text
