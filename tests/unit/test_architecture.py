"""The package boundaries of ARCHITECTURE.md, and the locked public API (STYLE.md)."""

from __future__ import annotations

import ast
from pathlib import Path

import burrow

ROOT = Path(__file__).resolve().parents[2]


def _imports(folder: str) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for path in (ROOT / folder).rglob("*.py"):
        names: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module:
                names.add(node.module)
                # `from burrow.replay import events` imports the module burrow.replay.events
                names.update(f"{node.module}.{alias.name}" for alias in node.names)
        found[str(path.relative_to(ROOT))] = names
    return found


# The typed contract between replay and the store (ARCHITECTURE.md): the only replay modules
# the store may import; they import neither store nor broker themselves.
CONTRACT = {"burrow.replay.events", "burrow.replay.commands", "burrow.replay.shapes"}


def test_store_knows_nothing_of_amqp_or_workflow_code() -> None:
    for path, names in _imports("store").items():
        names = {
            n
            for n in names
            if n != "burrow.replay" and not any(n == c or n.startswith(f"{c}.") for c in CONTRACT)
        }
        bad = {
            n
            for n in names
            if n.startswith(
                (
                    "aio_pika",
                    "aiormq",
                    "burrow.worker",
                    "burrow.replay",
                    "burrow.workflow",
                    "burrow.broker",
                )
            )
        }
        assert not bad, f"{path} imports {bad}"


def test_broker_never_touches_sql_or_workflow_code() -> None:
    for path, names in _imports("broker").items():
        bad = {
            n
            for n in names
            if n.startswith(
                ("sqlalchemy", "asyncpg", "burrow.worker", "burrow.replay", "burrow.store")
            )
        }
        assert not bad, f"{path} imports {bad}"


def test_runtime_issues_no_sql_directly() -> None:
    allowed = {"runtime/testing/pytest_plugin.py"}  # creates per-test databases
    for path, names in _imports("runtime").items():
        if path in allowed:
            continue
        bad = {n for n in names if n.startswith(("sqlalchemy", "asyncpg"))}
        assert not bad, f"{path} imports {bad}"


def test_errors_module_is_a_leaf() -> None:
    names = _imports("runtime")["runtime/errors.py"]
    assert not {n for n in names if n.startswith("burrow")}


def test_public_api_is_locked() -> None:
    assert sorted(burrow.__all__) == [
        "ActivityError",
        "ActivityTimedOut",
        "App",
        "ApplicationError",
        "BurrowError",
        "Client",
        "NondeterminismError",
        "PayloadError",
        "PayloadTooLarge",
        "RetryPolicy",
        "Settings",
        "UnknownActivityType",
        "UnknownWorkflowType",
        "Worker",
        "WorkerSettings",
        "WorkflowCancelled",
        "WorkflowFailureError",
        "WorkflowHandle",
        "activity",
        "workflow",
    ]
    for name in burrow.__all__:
        assert hasattr(burrow, name)
