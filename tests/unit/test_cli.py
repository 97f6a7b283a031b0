"""The `burrow` command line without a database: help, argument checks, settings."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from burrow.cli import app
from burrow.cli.options import build_settings, parse_input
from burrow.cli.output import redact_url, summarize
from burrow.cli.worker import TargetError, load_app

WIDE = {"COLUMNS": "250", "NO_COLOR": "1"}
# Points at a closed port: a test that reached the database by mistake would fail, not hang.
UNREACHABLE = "postgresql://postgres@127.0.0.1:1/never_used"

CONNECTION = ["--database-url", "--namespace", "--amqp-url"]
HELP_OPTIONS = {
    (): ["migrate", "demo", "worker", "workflow", "system", "sessions"],
    ("migrate",): ["--database-url"],
    ("demo",): ["--json", "--log-level", "--log-json", *CONNECTION],
    ("worker",): [
        "--worker-id",
        "--concurrency",
        "--workflow-concurrency",
        "--task-queue",
        "--lease-seconds",
        "--poll-interval",
        "--repair-interval",
        "--no-repair",
        "--build-id",
        "--log-json",
        "--log-console",
        "--log-level",
        "--drain-seconds",
        "--capability",
        "--max-concurrent-worker-sessions",
        "--database-pool-size",
        *CONNECTION,
        "BURROW_WORKER_ID",
        "BURROW_CONCURRENCY",
        "BURROW_WORKFLOW_CONCURRENCY",
        "BURROW_TASK_QUEUE",
        "BURROW_LEASE_SECONDS",
        "BURROW_POLL_INTERVAL_SECONDS",
        "BURROW_REPAIR_INTERVAL_SECONDS",
        "BURROW_DATABASE_URL",
        "BURROW_NAMESPACE",
        "BURROW_AMQP_URL",
    ],
    ("workflow",): ["start", "describe", "history", "signal", "cancel", "terminate", "list"],
    ("workflow", "start"): ["--id", "--task-queue", "--input", "--wait", "--json", *CONNECTION],
    ("workflow", "describe"): ["--run-id", "--json", *CONNECTION],
    ("workflow", "history"): ["--run-id", "--json", *CONNECTION],
    ("workflow", "signal"): ["--input", "--signal-id", "--json", *CONNECTION],
    ("workflow", "cancel"): ["--reason", "--json", *CONNECTION],
    ("workflow", "terminate"): ["--reason", "--json", *CONNECTION],
    ("workflow", "list"): ["--status", "--limit", "--json", *CONNECTION],
    ("workflow", "result"): ["--timeout", "--json", *CONNECTION],
    ("system",): ["operator-metrics"],
    ("sessions",): ["list", "show"],
    ("sessions", "list"): ["--state", "--limit", "--json", "--database-url", "--namespace"],
    ("sessions", "show"): ["--json", "--database-url", "--namespace"],
    ("system", "operator-metrics"): ["--json", "--database-url", "--namespace"],
}


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


@pytest.mark.parametrize("command", list(HELP_OPTIONS), ids=lambda c: " ".join(c) or "burrow")
def test_help_lists_options(runner: CliRunner, command: tuple[str, ...]) -> None:
    result = runner.invoke(app, [*command, "--help"], env=WIDE)
    assert result.exit_code == 0, result.output
    for option in HELP_OPTIONS[command]:
        assert option in result.stdout, f"{option} missing from `{' '.join(command)} --help`"


def test_no_arguments_shows_help(runner: CliRunner) -> None:
    result = runner.invoke(app, [], env=WIDE)
    assert "Usage" in result.output
    assert "workflow" in result.output


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("no_colon_here", "must look like MODULE:ATTR"),
        ("burrow_no_such_module_xyz:app", "cannot import module 'burrow_no_such_module_xyz'"),
        ("burrow.demo:no_such_app", "has no attribute 'no_such_app'"),
        ("burrow.demo:OrderWorkflow", "not a burrow.App"),
        ("burrow.demo:TASK_QUEUE", "is a str, not a burrow.App"),
    ],
)
def test_worker_bad_target_exits_2(runner: CliRunner, target: str, message: str) -> None:
    result = runner.invoke(app, ["worker", target, "--database-url", UNREACHABLE], env=WIDE)
    assert result.exit_code == 2, result.output
    assert "error:" in result.stderr
    assert message in result.stderr
    assert "Traceback" not in result.output


def test_load_app_finds_the_demo_app() -> None:
    from burrow import demo

    assert load_app("burrow.demo:app") is demo.app
    with pytest.raises(TargetError):
        load_app(":app")


@pytest.mark.parametrize(
    ("command", "message"),
    [
        (["workflow", "start", "OrderWorkflow", "--task-queue", "q", "--input", "{nope"], "JSON"),
        (["workflow", "start", "OrderWorkflow", "--task-queue", "q", "--input", "[1,"], "JSON"),
        (
            ["workflow", "start", "OrderWorkflow", "--task-queue", "q", "--input", '{"a": 1}'],
            "array",
        ),
        (["workflow", "signal", "wf-1", "approve", "--input", "not json"], "JSON"),
        (["workflow", "signal", "wf-1", "approve", "--input", '"solo"'], "array"),
    ],
)
def test_bad_input_exits_2(runner: CliRunner, command: list[str], message: str) -> None:
    result = runner.invoke(app, [*command, "--database-url", UNREACHABLE], env=WIDE)
    assert result.exit_code == 2, result.output
    assert "error: --input" in result.stderr
    assert message in result.stderr
    assert "Traceback" not in result.output


def test_invalid_worker_setting_exits_2(runner: CliRunner) -> None:
    result = runner.invoke(
        app,
        ["worker", "burrow.demo:app", "--database-url", UNREACHABLE],
        env={**WIDE, "BURROW_CONCURRENCY": "0"},
    )
    assert result.exit_code == 2, result.output
    assert "invalid settings: concurrency" in result.stderr


def test_invalid_database_url_exits_2(runner: CliRunner) -> None:
    result = runner.invoke(app, ["workflow", "list", "--database-url", "not a url"], env=WIDE)
    assert result.exit_code == 2, result.output
    assert "invalid database URL" in result.stderr


def test_unknown_log_level_is_a_usage_error(runner: CliRunner) -> None:
    result = runner.invoke(app, ["worker", "burrow.demo:app", "--log-level", "loud"], env=WIDE)
    assert result.exit_code == 2


def test_settings_come_from_env_then_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BURROW_DATABASE_URL", "postgresql://env@127.0.0.1/envdb")
    monkeypatch.setenv("BURROW_NAMESPACE", "env-ns")
    monkeypatch.setenv("BURROW_CONCURRENCY", "3")
    monkeypatch.setenv("BURROW_LEASE_SECONDS", "7")
    settings = build_settings(
        namespace="flag-ns", amqp_url="amqp://flag/", worker={"lease_seconds": 9.0, "repair": None}
    )
    assert settings.database_url == "postgresql://env@127.0.0.1/envdb"
    assert settings.namespace == "flag-ns"
    assert settings.amqp_url == "amqp://flag/"
    assert settings.worker.concurrency == 3
    assert settings.worker.lease_seconds == 9.0
    assert settings.worker.repair is True


def test_parse_input() -> None:
    assert parse_input("[]") == []
    assert parse_input('[{"order_id": "o1"}, 2]') == [{"order_id": "o1"}, 2]


def test_summarize_keeps_telling_fields_short() -> None:
    assert summarize({"activity_type": "ship", "attempt_number": 2, "result": "blob"}) == (
        "activity_type=ship, attempt_number=2"
    )
    long = summarize({"message": "x" * 500})
    assert len(long) == 80
    assert long.endswith("…")


def test_redact_url_hides_only_the_password() -> None:
    assert redact_url("postgresql://u:s3cret@db:5432/x") == "postgresql://u:***@db:5432/x"
    assert redact_url("postgresql://postgres@127.0.0.1/burrow") == (
        "postgresql://postgres@127.0.0.1/burrow"
    )


def test_summarize_names_a_local_activity_as_local() -> None:
    """A3: history output tells a local activity's events from a queued one's."""
    payload = {"activity_type": "ship", "execution_mode": "local", "attempt_number": 1}
    assert summarize(payload) == "activity_type=ship, execution_mode=local, attempt_number=1"


def test_w3_capabilities_come_from_repeated_flags_or_a_comma_separated_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("BURROW_CAPABILITIES", "gpu:nvidia-l4, zone:us-east-1a")
    monkeypatch.setenv("BURROW_MAX_CONCURRENT_WORKER_SESSIONS", "3")
    from_env = build_settings()
    assert from_env.worker.capabilities == ("gpu:nvidia-l4", "zone:us-east-1a")
    assert from_env.worker.max_concurrent_worker_sessions == 3
    flags = build_settings(
        worker={"capabilities": ["fs:/mnt/models", "gpu:a100"], "max_concurrent_worker_sessions": 0}
    )
    assert flags.worker.capabilities == ("fs:/mnt/models", "gpu:a100")
    assert flags.worker.max_concurrent_worker_sessions == 0


def test_w3_an_empty_capability_is_a_usage_error(runner: CliRunner) -> None:
    result = runner.invoke(
        app,
        ["worker", "burrow.demo:app", "--capability", " ", "--database-url", UNREACHABLE],
        env=WIDE,
    )
    assert result.exit_code == 2, result.output
    assert "capabilities" in result.stderr


def test_w9_sessions_state_must_be_a_session_state(runner: CliRunner) -> None:
    result = runner.invoke(
        app, ["sessions", "list", "--state", "sleepy", "--database-url", UNREACHABLE], env=WIDE
    )
    assert result.exit_code == 2
