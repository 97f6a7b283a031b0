"""Which connection a task goes to, and which one a worker serves (M7, W4)."""

from __future__ import annotations

from typing import Any

import pytest
from typer.testing import CliRunner

from burrow import logging as burrow_logging
from burrow.cli import app as cli
from burrow.cli import worker as worker_cli
from burrow.config import Settings, WorkerSettings
from burrow.protocol import commands as cmd
from burrow.protocol.shapes import SessionSpec, activity_connection
from burrow.workflow import WorkerSessionOptions

ARGS = {"codec": "avro", "blob": "AA=="}


def _schedule(**fields: Any) -> cmd.ScheduleActivity:
    return cmd.ScheduleActivity(activity_type="greet", queue="q", arguments=ARGS, **fields)


def test_call_option_wins_over_session_and_run_m7_w4() -> None:
    """M7, W4: a call's `connection`, else its session's, else the run's."""
    session = SessionSpec(session_id="s", connection="session-conn")
    assert activity_connection(_schedule(), "run-conn") == "run-conn"
    assert activity_connection(_schedule(worker_session=session), "run-conn") == "session-conn"
    both = _schedule(connection="call-conn", worker_session=session)
    assert activity_connection(both, "run-conn") == "call-conn"
    no_session_conn = _schedule(worker_session=SessionSpec(session_id="s"))
    assert activity_connection(no_session_conn, "run-conn") == "run-conn"


def test_schedule_activity_carries_the_top_level_connection_m7() -> None:
    """M7 (PROTOCOL.md 16): `connection` on `schedule_activity` is accepted and recorded; a
    command without it records no key, so histories written before are unchanged."""
    parsed = cmd.ScheduleActivity.model_validate(
        {
            "type": "schedule_activity",
            "activity_type": "greet",
            "queue": "q",
            "arguments": ARGS,
            "connection": "gpu",
        }
    )
    assert parsed.connection == "gpu"
    assert "connection" not in _schedule().model_dump()


def test_session_options_carry_their_connection_w4() -> None:
    """W4: `WorkerSessionOptions(connection=)` is in the snapshot its activities carry."""
    snapshot = WorkerSessionOptions(connection="gpu").snapshot("s1")
    assert snapshot.connection == "gpu"


def test_worker_connection_from_environment_m7() -> None:
    """M7: BURROW_CONNECTION names the connection a worker serves; "default" without it."""
    assert Settings.from_env({}).worker.connection == "default"
    assert Settings.from_env({"BURROW_CONNECTION": "gpu"}).worker.connection == "gpu"


def test_burrow_worker_connection_flag_m7(monkeypatch: pytest.MonkeyPatch) -> None:
    """M7: `burrow worker --connection gpu` serves "gpu" with every poller."""
    seen: list[Settings] = []

    async def serve(app: object, settings: Settings, **_: object) -> None:
        seen.append(settings)

    monkeypatch.setattr(worker_cli, "serve", serve)
    # Logging set up on CliRunner's stream would outlive it and break later tests' logs.
    monkeypatch.setattr(burrow_logging, "configure_logging", lambda **_: None)
    done = CliRunner().invoke(
        cli, ["worker", "tests.apps.connection_flows:app", "--connection", "gpu"]
    )
    assert done.exit_code == 0, done.output
    assert [s.worker.connection for s in seen] == ["gpu"]


async def test_every_poller_of_a_worker_serves_its_connection_m7() -> None:
    """M7: `Worker(connection=)` (else BURROW_CONNECTION's setting) filters the workflow,
    activity and eager claims and the local pokes alike."""
    from burrow.worker.worker import Worker
    from tests.apps import connection_flows

    settings = Settings(worker=WorkerSettings(connection="from-settings"))
    explicit = Worker(connection_flows.app, settings=settings, connection="gpu")
    configured = Worker(connection_flows.app, settings=settings)
    try:
        assert explicit.workflow_filter.connection == "gpu"
        assert explicit.eager_claim(["where"]).flt.connection == "gpu"
        assert explicit.router.connection == "gpu"
        assert configured.workflow_filter.connection == "from-settings"
        assert configured.eager_claim(["where"]).flt.connection == "from-settings"
    finally:
        for worker in (explicit, configured):
            worker.executor.shutdown()
            await worker.store.close()
