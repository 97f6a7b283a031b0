"""Shared fixtures: real services only; BURROW_*/DW_* variables never leak into tests."""

from __future__ import annotations

import os
import uuid

import pytest

pytest_plugins = ["burrow.testing.pytest_plugin"]

_KEEP = {"BURROW_TEST_DATABASE_URL", "BURROW_TEST_AMQP_URL", "BURROW_TEST_USE_CONTAINERS"}


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in list(os.environ):
        if (key.startswith("BURROW_") or key.startswith("DW_")) and key not in _KEEP:
            monkeypatch.delenv(key, raising=False)
    # Each test gets RabbitMQ names of its own, so runs never wake each other's workers.
    monkeypatch.setenv("BURROW_AMQP_PREFIX", f"test-{uuid.uuid4().hex[:10]}")
    amqp = os.environ.get("BURROW_TEST_AMQP_URL")
    if amqp:
        monkeypatch.setenv("BURROW_AMQP_URL", amqp)
