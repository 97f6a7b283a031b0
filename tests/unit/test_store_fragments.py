"""Each shared SQL rule is written once, in store/fragments.py, and composed where it applies."""

from __future__ import annotations

import ast
import re
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest

from burrow.store import (
    activities,
    activity_claims,
    fragments,
    queries,
    repair,
    runs,
    session_views,
    sessions,
    sql,
    tasks,
)
from burrow.store.completion import statements as completion
from burrow.store.models import ClaimFence, Lease

STORE = Path(__file__).resolve().parents[2] / "store"

# What writing a rule out by hand looks like, in SQL text or in SQLAlchemy Core.
HAND_WRITTEN = {
    "lease fence": r"lease_owner\s*=\s*:lease_owner",
    "return to ready": r"attempt\s*=\s*attempt\s*\+\s*1",
    "workflow task insert": r"INSERT\s+INTO\s+workflow_tasks\b",
    "one open workflow task": r"ON\s+CONFLICT\s*\(\s*run_id\s*\)",
    # Every pending timer of a run (a cancel of one timer names its step as well).
    "close open work": r"UPDATE\s+timers\s+SET\s+state\s*=\s*'cancelled'\s+"
    r"WHERE\s+run_id\s*=\s*(\S+)?\s*AND\s+state\s*=\s*'pending'",
    "session done": r"failure_reason\s*=\s*'ttl_expired'",
    "session holder gone": r"\.state\s*=\s*'stopped'",
}


def _strings(tree: ast.AST) -> list[str]:
    """Every string literal, f-string parts included."""
    return [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    ]


def _core_uses(tree: ast.AST) -> set[str]:
    """Core spellings: the fence (`c.lease_owner == ...`), a hand-back (`.values(attempt=...)`)."""
    found = set()
    for node in ast.walk(tree):
        match node:
            case ast.Compare(left=ast.Attribute(attr="lease_owner")):
                found.add("lease fence in Core")
            case ast.Call(func=ast.Attribute(attr="values"), keywords=keywords) if any(
                k.arg == "attempt" for k in keywords
            ):
                found.add("return to ready in Core")
    return found


def _store_modules() -> list[Path]:
    paths = sorted([*STORE.glob("*.py"), *STORE.glob("completion/*.py")])
    assert len(paths) > 10
    return [p for p in paths if p.name != "fragments.py"]


@pytest.mark.parametrize("path", _store_modules(), ids=lambda p: str(p.relative_to(STORE)))
def test_rules_are_written_only_in_the_fragments_module(path: Path) -> None:
    tree = ast.parse(path.read_text())
    text = "\n".join(_strings(tree))
    written = {rule for rule, pattern in HAND_WRITTEN.items() if re.search(pattern, text)}
    written |= _core_uses(tree)
    assert not written, f"{path.name} writes out {sorted(written)}: compose store/fragments.py"


def test_the_fragments_module_holds_every_rule() -> None:
    tree = ast.parse((STORE / "fragments.py").read_text())
    text = "\n".join(_strings(tree))
    assert all(re.search(pattern, text) for pattern in HAND_WRITTEN.values())


HOLE = "\x00"  # stands for the SQL a statement passes to a fragment function


def _composes(statement: sql.Statement, fragment: str) -> bool:
    """Whether the statement holds `fragment`, whatever it put in the fragment's holes."""
    pattern = ".*?".join(re.escape(part) for part in fragment.split(HOLE))
    return re.search(pattern, statement.text, re.DOTALL) is not None


FENCED = [
    completion.FENCE_AND_LOCK_RUN,
    tasks._FAIL_WORKFLOW_TASK,
    activities._COMPLETE_ACTIVITY,
    completion.COMPLETE_AT_POSITION,
    completion.COMPLETE_WITH_WORKFLOW_TASK,
    activities._SELECT_LEASED,
    activities._HEARTBEAT,
    queries._ANSWER_QUERY,
    tasks._HEARTBEAT_WORKFLOW_TASK,
    tasks._CHECK_WORKFLOW_TASK_LEASE,
]
# Fenced statements that say why they refused: all but the one-statement completions, whose
# refusal the transactional path reports (at_position.NotAtPosition).
REPORTING = [
    statement
    for statement in FENCED
    if statement not in {completion.COMPLETE_AT_POSITION, completion.COMPLETE_WITH_WORKFLOW_TASK}
]
RETURNED_TO_READY = [
    tasks._FAIL_WORKFLOW_TASK,
    repair._EXPIRE_WORKFLOW_LEASES,
    activities._RETRY_ATTEMPT,
]
INSERTING_TASKS = [
    runs._CREATE_RUNS,
    runs._ENSURE_WORKFLOW_TASK,
    completion.FINISH_COMPLETION,
    activities._COMPLETE_ACTIVITY,
]
COALESCING = INSERTING_TASKS[1:]  # a new run has no open task to coalesce with
CLOSING = [completion.FINISH_COMPLETION, runs._CLOSE_OPEN_WORK]
# W5: who may take a session's activities, decided by the same two rules everywhere.
HOLDER_CHECKED = [
    activity_claims._PICK_SESSION_TASKS,
    sessions._LOCK_SESSION,
    sessions._EXPIRE_SESSIONS,
    session_views._SNAPSHOT,
    session_views._LIST,
]
SESSION_ENDED = [
    activity_claims._PICK_SESSION_TASKS,
    repair._STRANDED_SESSION_ACTIVITIES,
    repair._STRANDED_ATTEMPT,
]


@pytest.mark.parametrize("statement", FENCED)
def test_completions_failures_and_heartbeats_carry_the_lease_fence(
    statement: sql.Statement,
) -> None:
    assert _composes(statement, fragments.LEASE_FENCE)


@pytest.mark.parametrize("statement", RETURNED_TO_READY)
def test_every_hand_back_sets_the_same_columns(statement: sql.Statement) -> None:
    assert _composes(statement, fragments.return_to_ready(HOLE, by_holder=HOLE))


@pytest.mark.parametrize("statement", INSERTING_TASKS)
def test_workflow_tasks_are_inserted_from_their_run(statement: sql.Statement) -> None:
    assert _composes(statement, fragments.insert_workflow_task(HOLE, HOLE))


@pytest.mark.parametrize("statement", COALESCING)
def test_a_second_open_workflow_task_coalesces(statement: sql.Statement) -> None:
    assert _composes(statement, fragments.ONE_OPEN_WORKFLOW_TASK)


@pytest.mark.parametrize("statement", CLOSING)
def test_closing_a_run_stops_all_its_work(statement: sql.Statement) -> None:
    assert _composes(statement, fragments.close_open_work(HOLE, HOLE))


@pytest.mark.parametrize("statement", HOLDER_CHECKED)
def test_w5_a_session_holder_is_gone_by_one_rule(statement: sql.Statement) -> None:
    assert _composes(statement, fragments.session_holder_gone(HOLE))


@pytest.mark.parametrize("statement", SESSION_ENDED)
def test_w5_a_session_ended_for_good_by_one_rule(statement: sql.Statement) -> None:
    assert _composes(statement, fragments.session_done(HOLE))


def test_fence_params_bind_exactly_what_the_fence_names() -> None:
    lease = Lease(
        task_id=str(uuid.uuid4()),
        run_id="r",
        lease_token="k",
        lease_owner="w",
        attempt=2,
        lease_expires_at=datetime(2026, 1, 1, tzinfo=UTC),
    )
    fence = fragments.LEASE_FENCE + fragments.ATTEMPT_ID_FENCE + fragments.fence_columns()
    named = set(re.findall(r":(\w+)", fence))
    assert set(fragments.fence_params(lease)) == named
    claim = ClaimFence(task_id=str(uuid.uuid4()), namespace="n", lease_owner="w", attempt=2)
    assert set(fragments.fence_params(claim)) == named


@pytest.mark.parametrize("statement", REPORTING)
def test_fenced_statements_report_their_refusal_from_the_probed_task_row(
    statement: sql.Statement,
) -> None:
    assert "probe AS (" in statement.text
    assert _composes(statement, fragments.fence_columns()) or _composes(
        statement, fragments.fence_columns(expiry_before_owner=True)
    )
