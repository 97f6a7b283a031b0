"""The package boundaries of ARCHITECTURE.md, and the locked public API (STYLE.md)."""

from __future__ import annotations

import ast
import subprocess
import sys
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
                # `from burrow.protocol import events` imports the module burrow.protocol.events
                names.update(f"{node.module}.{alias.name}" for alias in node.names)
        found[str(path.relative_to(ROOT))] = names
    return found


# The typed contract between replay and the store (ARCHITECTURE.md): the only replay modules
# the store may import; they import neither store nor broker themselves.
CONTRACT = {"burrow.protocol.events", "burrow.protocol.commands", "burrow.protocol.shapes"}


def test_store_knows_nothing_of_amqp_or_workflow_code() -> None:
    for path, names in _imports("store").items():
        names = {n for n in names if not any(n == c or n.startswith(f"{c}.") for c in CONTRACT)}
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
        "ActivityHandle",
        "ActivityTimedOut",
        "App",
        "ApplicationError",
        "BurrowError",
        "Client",
        "ConfigurationError",
        "IdReusePolicy",
        "IntervalSpec",
        "InvalidArgumentsError",
        "InvalidListQuery",
        "InvalidScheduleSpec",
        "InvalidSearchAttribute",
        "NondeterminismError",
        "OverlapPolicy",
        "PayloadError",
        "PayloadTooLarge",
        "QueryFailedError",
        "RetryPolicy",
        "ScheduleAlreadyExists",
        "ScheduleHandle",
        "ScheduleNotFound",
        "ScheduleSpec",
        "Settings",
        "UnknownActivityType",
        "UnknownWorkflowType",
        "UnstorableText",
        "UpdateFailedError",
        "Worker",
        "WorkerSettings",
        "WorkflowAlreadyStartedError",
        "WorkflowCancelled",
        "WorkflowCancelledError",
        "WorkflowFailureError",
        "WorkflowHandle",
        "WorkflowNotFoundError",
        "WorkflowNotRunningError",
        "WorkflowTerminatedError",
        "WorkflowTimedOutError",
        "activity",
        "workflow",
    ]
    for name in burrow.__all__:
        assert hasattr(burrow, name)


def test_authoring_imports_load_no_database_or_amqp_library() -> None:
    """PEP 562: the package root imports Client and Worker only when they are used."""
    heavy = ["sqlalchemy", "asyncpg", "aio_pika", "aiormq", "burrow.store", "burrow.broker"]
    code = (
        "import sys, burrow, burrow.workflow, burrow.activity\n"
        f"print(sorted(m for m in {heavy!r} if m in sys.modules))\n"
        "from burrow import Client, Worker\n"
        "print(Client.__module__, Worker.__module__)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    ).stdout.split("\n")
    assert out[:2] == ["[]", "burrow.client burrow.worker.worker"]


def test_public_errors_are_the_classes_the_store_raises() -> None:
    from burrow.store import errors as store_errors

    assert store_errors.WorkflowAlreadyStarted is burrow.WorkflowAlreadyStartedError
    assert store_errors.RunNotFound is burrow.WorkflowNotFoundError
    assert store_errors.RunNotRunning is burrow.WorkflowNotRunningError
    assert issubclass(burrow.WorkflowNotFoundError, store_errors.NotFound)
    assert issubclass(burrow.WorkflowNotRunningError, store_errors.Conflict)
    assert issubclass(store_errors.CredentialsRejected, burrow.ConfigurationError)
    assert not issubclass(store_errors.CredentialsRejected, store_errors.StoreUnavailable)


def test_replay_and_authoring_import_neither_store_nor_broker() -> None:
    """ARCHITECTURE.md: workflow code and the replay engine load no database or AMQP code."""
    pure = ("runtime/replay/", "runtime/workflow/", "runtime/codec/")
    leaves = {"runtime/activity.py", "runtime/failures.py", "runtime/payloads.py"}
    forbidden = ("burrow.store", "burrow.broker", "burrow.worker", "burrow.client")
    forbidden += ("sqlalchemy", "asyncpg", "aio_pika", "aiormq")
    checked = 0
    for path, names in _imports("runtime").items():
        if not (path.startswith(pure) or path in leaves):
            continue
        checked += 1
        bad = {n for n in names if n.startswith(forbidden)}
        assert not bad, f"{path} imports {bad}"
    assert checked >= 10


def test_protocol_imports_nothing_of_the_sides_that_share_it() -> None:
    """burrow.protocol is the leaf contract: replay, store, server, broker and worker import it."""
    engine = ("burrow.replay", "burrow.store", "burrow.server", "burrow.broker", "burrow.worker")
    checked = 0
    for path, names in _imports("runtime").items():
        if not path.startswith("runtime/protocol/"):
            continue
        checked += 1
        bad = {n for n in names if n.startswith(engine)}
        assert not bad, f"{path} imports {bad}"
    assert checked >= 5


def test_authoring_reaches_the_engine_only_through_the_runtime_protocol() -> None:
    """No module of burrow.workflow imports burrow.replay, not even inside a function."""
    checked = 0
    for path, names in _imports("runtime").items():
        if not path.startswith("runtime/workflow/"):
            continue
        checked += 1
        bad = {n for n in names if n == "burrow.replay" or n.startswith("burrow.replay.")}
        assert not bad, f"{path} imports {bad}"
    assert checked >= 5


def test_importing_the_authoring_api_loads_no_engine_database_or_amqp_module() -> None:
    heavy = (
        "sqlalchemy",
        "asyncpg",
        "aio_pika",
        "aiormq",
        "burrow.store",
        "burrow.broker",
        "burrow.replay",
    )
    code = (
        "import sys, burrow.workflow\n"
        f"heavy = {heavy!r}\n"
        "loaded = [m for m in sys.modules if any(m == h or m.startswith(h + '.') for h in heavy)]\n"
        "print(sorted(loaded))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    ).stdout.strip()
    assert out == "[]"


def test_store_passes_notices_explicitly() -> None:
    """Ready notices travel on the `Txn` a store function is given, never in a context variable:
    a function called outside a transaction cannot drop them silently."""
    for path in (ROOT / "store").rglob("*.py"):
        tree = ast.parse(path.read_text())
        names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
        names |= {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
        imported = {
            alias.name
            for node in ast.walk(tree)
            if isinstance(node, ast.Import | ast.ImportFrom)
            for alias in node.names
        }
        assert "ContextVar" not in names and "contextvars" not in imported, path


MAX_SOURCE_LINES = 600


def test_no_source_file_is_over_600_lines() -> None:
    """STYLE.md: modules are split past about 600 lines (migrations excepted)."""
    long: dict[str, int] = {}
    for folder in ("runtime", "store", "broker", "bench", "tests"):
        for path in (ROOT / folder).rglob("*.py"):
            relative = path.relative_to(ROOT)
            if relative.parts[:2] == ("store", "migrations"):
                continue
            count = len(path.read_text().splitlines())
            if count > MAX_SOURCE_LINES:
                long[str(relative)] = count
    assert not long, f"over {MAX_SOURCE_LINES} lines: {long}"
