"""Broker URLs the worker cannot use are refused at settings load (issue 25 item 10)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from burrow import Settings
from burrow.cli import app
from burrow.errors import ConfigurationError

WIDE = {"COLUMNS": "250", "NO_COLOR": "1"}
# Points at a closed port: a test that reached the database by mistake would fail, not hang.
UNREACHABLE = "postgresql://postgres@127.0.0.1:1/never_used"


@pytest.mark.parametrize(
    "url",
    [
        "amqp://127.0.0.1:99999/",
        "amqp://127.0.0.1:65536/",
        "amqp://127.0.0.1:0/",
        "amqp://127.0.0.1:-1/",
        "amqp://127.0.0.1:port/",
        "amqp://[::1/",
        "amqp:///vhost",
        "http://127.0.0.1:5672/",
    ],
)
def test_an_unusable_amqp_url_is_a_configuration_error_naming_the_setting(url: str) -> None:
    """Issue 25 item 10: a port outside 1-65535, no host or another scheme fail at load."""
    with pytest.raises(ConfigurationError, match=r"amqp_url:.*BURROW_AMQP_URL or --amqp-url"):
        Settings.load({"BURROW_AMQP_URL": url})


@pytest.mark.parametrize(
    "url",
    [
        "amqp://guest:guest@127.0.0.1:5672/",
        "amqps://user:p%40ss@broker.example:65535/vhost",
        "amqp://127.0.0.1:1",
        "amqp://[::1]:5672/",
        "amqp://rabbit/",
    ],
)
def test_a_usable_amqp_url_is_taken_as_given(url: str) -> None:
    assert Settings.load({"BURROW_AMQP_URL": url}).amqp_url == url


def test_the_worker_refuses_an_amqp_port_out_of_range_with_exit_2() -> None:
    """Issue 25 item 10: refused before `worker_started`, not a crash after it (exit 1)."""
    result = CliRunner().invoke(
        app,
        ["worker", "burrow.demo:app", "--database-url", UNREACHABLE],
        env={**WIDE, "BURROW_AMQP_URL": "amqp://127.0.0.1:99999/"},
    )
    assert result.exit_code == 2, result.output
    assert "amqp_url" in result.stderr
    assert "worker_started" not in result.output


def test_the_server_refuses_an_amqp_port_out_of_range_with_exit_2() -> None:
    """Issue 25 item 10: `burrow server` exits 2 instead of "Application startup failed"."""
    result = CliRunner().invoke(
        app,
        ["server", "--database-url", UNREACHABLE],
        env={**WIDE, "BURROW_AMQP_URL": "amqp://127.0.0.1:99999/"},
    )
    assert result.exit_code == 2, result.output
    assert "amqp_url" in result.stderr
