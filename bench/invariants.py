"""Invariants a Burrow store must hold after any mix of crashes and outages, read back with SQL.

`check(database_url, expected)` reads the store (nothing is written) and returns an
`InvariantReport`: counts and every violation found. `expected` maps each workflow id the
caller started to what it must have come to (`Expected`: result, number of runs, signals).

What is checked, precisely:

Workflows (against `expected`)
  - lost:        a started workflow id whose last run (following continue-as-new) is not
                 `completed`, or that has no run at all. Split into `missing` (no run),
                 `unfinished` (still running) and `failed` (closed any other way).
  - wrong_result: the last run completed with a result other than the expected one.
  - duplicate:   more than one chain of runs for one id (a second start), a run continued into
                 by two runs, or a chain with another number of runs than expected; also a
                 run with more `SignalReceived` events than signals were sent (a signal
                 delivered twice).
  - unexpected:  runs of workflow ids nobody started.

Histories (every run)
  - sequence:    events are numbered 1..n without gaps, n = runs.last_event_seq, and event 1 is
                 `WorkflowStarted`.
  - terminal:    a closed run has exactly one terminal event (WorkflowCompleted, -Failed,
                 -Cancelled, -Terminated, -ContinuedAsNew), it is its last event and it matches
                 runs.status; a running run has none.
  - command:     at most one `ActivityScheduled` / `TimerScheduled` per step sequence of a run
                 (a workflow task completed twice would record its commands twice).
  - activity:    at most one terminal activity event (ActivityCompleted, -Failed, -TimedOut,
                 -Cancelled) per activity execution.
  - task_events: the events recorded with a workflow task's id (the ones its claim moved in and
                 the ones its completion wrote) belong to a task of the same run and are one
                 contiguous range of sequences.

Stale leases. The store does not keep lease tokens in history, so this checks what the history
does record about each activity attempt (ActivityStarted is written when an attempt is leased,
and every outcome names its attempt number and attempt id). Events still in the inbox (not yet
moved into history) count too. A completion accepted from a stale lease shows as one of:
  - an outcome a worker reported (ActivityCompleted, ActivityFailed, or ActivityRetryScheduled
    with retry_reason `failure`) naming an attempt (number and id) that was never leased;
  - an attempt with two outcomes (for example, timed out by the repair pass after its lease
    expired, and completed as well by the worker that had held it);
  - a terminal activity event naming an earlier attempt than the last one leased (the result
    of an attempt whose lease had already been expired and re-issued).
For workflow tasks the fence shows through the `command` and `terminal` checks above: a second
completion of the same task (the attempt whose lease expired) would repeat commands.

Ready work
  - stale_ready: workflow or activity tasks `ready` since before now() minus the re-poll
    interval (a task that can run but nobody claims), `leased` with a lease that expired
    that long ago (nobody repairs it), pending timers due that long ago, and events waiting in
    the inbox of a running run that long without an open workflow task to observe them. Work
    that is merely scheduled for later (a retry backoff) is not ready and does not count.
    Right after a soak, with every run closed, any open task at all is reported.

Sampled while a soak runs. `sample_ready_work` runs the ready-work check alone while the
workers run, with a longer threshold (`stale_after`) that leaves room for a backlog the
workers are still working through; the soak (bench/chaos.py) skips samples that fall within a
fault or soon after it, when work is expected to wait.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, create_async_engine
from sqlalchemy.pool import NullPool

from burrow import payloads
from burrow.store.engine import async_url

TERMINAL_BY_STATUS = {
    "completed": "WorkflowCompleted",
    "failed": "WorkflowFailed",
    "cancelled": "WorkflowCancelled",
    "terminated": "WorkflowTerminated",
    "continued_as_new": "WorkflowContinuedAsNew",
}
ACTIVITY_TERMINALS = (
    "ActivityCompleted",
    "ActivityFailed",
    "ActivityTimedOut",
    "ActivityCancelled",
)
COMMANDS = ("ActivityScheduled", "TimerScheduled")
MAX_EXAMPLES = 20  # violations kept per kind (all are counted)


@dataclass(frozen=True)
class Expected:
    """What a started workflow id must come to."""

    result: Any
    runs: int = 1
    signals: int = 0


@dataclass(frozen=True)
class Violation:
    """One broken invariant: its kind, where, and what was seen."""

    kind: str
    where: str
    detail: str


@dataclass
class InvariantReport:
    """Counts read from the store and the invariant violations found."""

    workflows: int = 0
    completed_as_expected: int = 0
    runs: int = 0
    closed_runs: int = 0
    events: int = 0
    activity_executions: int = 0
    workflow_tasks: int = 0
    activity_retries: int = 0  # attempts given up (a lease expired, mostly) and retried
    workflow_task_retries: int = 0  # workflow tasks leased more than once
    lost: int = 0
    duplicates: int = 0
    violation_counts: Counter[str] = field(default_factory=Counter)
    examples: list[Violation] = field(default_factory=list)

    @property
    def violations(self) -> int:
        """Invariant violations other than lost and duplicate workflows."""
        return sum(
            n
            for kind, n in self.violation_counts.items()
            if kind not in ("missing", "unfinished", "failed", "duplicate")
        )

    @property
    def ok(self) -> bool:
        """Nothing lost, nothing duplicated, no invariant broken."""
        return not self.violation_counts

    def add(self, kind: str, where: str, detail: str) -> None:
        self.violation_counts[kind] += 1
        if sum(1 for v in self.examples if v.kind == kind) < MAX_EXAMPLES:
            self.examples.append(Violation(kind, where, detail))

    def lines(self) -> list[str]:
        """The report as `name: value` lines, then one `# violation` line per example."""
        out = [
            f"workflows: {self.workflows}",
            f"completed_as_expected: {self.completed_as_expected}",
            f"lost: {self.lost}",
            f"duplicates: {self.duplicates}",
            f"invariant_violations: {self.violations}",
            f"runs: {self.runs}",
            f"closed_runs: {self.closed_runs}",
            f"history_events: {self.events}",
            f"activity_executions: {self.activity_executions}",
            f"workflow_tasks: {self.workflow_tasks}",
            f"activity_retries: {self.activity_retries}",
            f"workflow_task_retries: {self.workflow_task_retries}",
        ]
        out += [f"violations_{kind}: {n}" for kind, n in sorted(self.violation_counts.items())]
        out += [f"# violation {v.kind} {v.where}: {v.detail}" for v in self.examples]
        return out


# -- the queries ----------------------------------------------------------------------------------

RUNS = text(
    "SELECT run_id, workflow_id, status, result, continued_from_run_id, last_event_seq"
    " FROM runs WHERE namespace = :namespace"
)
COUNTS = text(
    """
    SELECT (SELECT count(*) FROM history_events) AS events,
           (SELECT count(*) FROM activity_tasks) AS activity_executions,
           (SELECT count(*) FROM workflow_tasks) AS workflow_tasks,
           (SELECT count(*) FROM history_events WHERE event_type = 'ActivityRetryScheduled')
               AS activity_retries,
           (SELECT count(*) FROM workflow_tasks WHERE attempt > 1) AS workflow_task_retries
    """
)
SIGNALS = text(
    "SELECT run_id, count(*) AS n FROM history_events WHERE event_type = 'SignalReceived'"
    " GROUP BY run_id"
)
SEQUENCES = text(
    """
    SELECT r.run_id, r.last_event_seq, count(h.sequence) AS n, min(h.sequence) AS first,
           max(h.sequence) AS last,
           bool_or(h.sequence = 1 AND h.event_type = 'WorkflowStarted') AS started
    FROM runs r LEFT JOIN history_events h USING (run_id)
    GROUP BY r.run_id, r.last_event_seq
    HAVING count(h.sequence) <> coalesce(max(h.sequence), -1) OR min(h.sequence) <> 1
        OR max(h.sequence) <> r.last_event_seq
        OR NOT coalesce(bool_or(h.sequence = 1 AND h.event_type = 'WorkflowStarted'), false)
    """
)
TERMINALS = text(
    """
    SELECT r.run_id, r.status, r.last_event_seq,
           array_remove(array_agg(h.event_type ORDER BY h.sequence), NULL) AS types,
           max(h.sequence) AS at
    FROM runs r
    LEFT JOIN history_events h ON h.run_id = r.run_id AND h.event_type = ANY(:terminals)
    GROUP BY r.run_id, r.status, r.last_event_seq
    """
)
DUPLICATE_COMMANDS = text(
    """
    SELECT run_id, event_type, payload->>'sequence' AS step, count(*) AS n
    FROM history_events WHERE event_type = ANY(:commands)
    GROUP BY run_id, event_type, payload->>'sequence' HAVING count(*) > 1
    """
)
DUPLICATE_ACTIVITY_OUTCOMES = text(
    """
    SELECT run_id, payload->>'activity_execution_id' AS execution,
           array_agg(event_type ORDER BY sequence) AS types
    FROM history_events WHERE event_type = ANY(:terminals)
    GROUP BY run_id, payload->>'activity_execution_id' HAVING count(*) > 1
    """
)
TASK_EVENTS = text(
    """
    SELECT h.run_id, h.workflow_task_id, count(*) AS n, min(h.sequence) AS first,
           max(h.sequence) AS last, bool_and(t.run_id IS NOT DISTINCT FROM h.run_id) AS same_run
    FROM history_events h LEFT JOIN workflow_tasks t ON t.task_id = h.workflow_task_id
    WHERE h.workflow_task_id IS NOT NULL
    GROUP BY h.run_id, h.workflow_task_id
    HAVING max(h.sequence) - min(h.sequence) + 1 <> count(*)
        OR NOT bool_and(t.run_id IS NOT DISTINCT FROM h.run_id)
    """
)
# Every activity attempt event, recorded in history or still waiting in the inbox.
_ATTEMPT_EVENTS = """
    WITH ev AS (
        SELECT run_id, event_type, payload FROM history_events
        WHERE event_type LIKE 'Activity%' AND event_type <> 'ActivityScheduled'
        UNION ALL
        SELECT run_id, event_type, payload FROM inbox_events
        WHERE NOT applied AND event_type LIKE 'Activity%'
    ), attempt AS (
        SELECT run_id, event_type, payload->>'activity_execution_id' AS execution,
               (payload->>'attempt_number')::int AS number, payload->>'activity_attempt_id' AS id,
               payload->>'retry_reason' AS retry_reason
        FROM ev
    )
"""
UNLEASED_OUTCOMES = text(
    _ATTEMPT_EVENTS
    + """
    SELECT o.run_id, o.execution, o.number, o.id, o.event_type FROM attempt o
    WHERE (o.event_type IN ('ActivityCompleted', 'ActivityFailed')
           OR (o.event_type = 'ActivityRetryScheduled' AND o.retry_reason = 'failure'))
      AND NOT EXISTS (
          SELECT 1 FROM attempt s
          WHERE s.event_type = 'ActivityStarted' AND s.run_id = o.run_id
            AND s.execution = o.execution AND s.number = o.number AND s.id = o.id)
    """
)
ATTEMPTS_WITH_TWO_OUTCOMES = text(
    _ATTEMPT_EVENTS
    + """
    SELECT run_id, execution, number, array_agg(event_type) AS types FROM attempt
    WHERE event_type <> 'ActivityStarted'
    GROUP BY run_id, execution, number HAVING count(*) > 1
    """
)
OUTCOMES_OF_SUPERSEDED_ATTEMPTS = text(
    _ATTEMPT_EVENTS
    + """
    SELECT o.run_id, o.execution, o.number, o.event_type, max(s.number) AS last_leased
    FROM attempt o JOIN attempt s ON s.run_id = o.run_id AND s.execution = o.execution
        AND s.event_type = 'ActivityStarted'
    WHERE o.event_type = ANY(:terminals)
    GROUP BY o.run_id, o.execution, o.number, o.event_type
    HAVING max(s.number) > o.number
    """
)
STALE_READY = text(
    """
    SELECT 'workflow task ready' AS what, task_id::text AS id, run_id FROM workflow_tasks
    WHERE state = 'ready' AND available_at < now() - make_interval(secs => :repoll)
    UNION ALL
    SELECT 'activity task ready', task_id::text, run_id FROM activity_tasks
    WHERE state = 'ready' AND available_at < now() - make_interval(secs => :repoll)
    UNION ALL
    SELECT 'workflow task lease expired', task_id::text, run_id FROM workflow_tasks
    WHERE state = 'leased' AND lease_expires_at < now() - make_interval(secs => :repoll)
    UNION ALL
    SELECT 'activity task lease expired', task_id::text, run_id FROM activity_tasks
    WHERE state = 'leased' AND lease_expires_at < now() - make_interval(secs => :repoll)
    UNION ALL
    SELECT 'timer overdue', step_seq::text, run_id FROM timers
    WHERE state = 'pending' AND fire_at < now() - make_interval(secs => :repoll)
    UNION ALL
    SELECT 'inbox event without a task', i.id::text, i.run_id FROM inbox_events i
    JOIN runs r ON r.run_id = i.run_id AND r.status = 'running'
    WHERE NOT i.applied AND i.wakes_workflow
      AND i.created_at < now() - make_interval(secs => :repoll)
      AND NOT EXISTS (SELECT 1 FROM workflow_tasks w
                      WHERE w.run_id = i.run_id AND w.state IN ('ready', 'leased'))
    """
)
OPEN_WORK_OF_CLOSED_RUNS = text(
    """
    SELECT 'workflow task' AS what, t.task_id::text AS id, t.run_id FROM workflow_tasks t
    JOIN runs r USING (run_id)
    WHERE r.status <> 'running' AND t.state IN ('ready', 'leased')
    UNION ALL
    SELECT 'activity task', t.task_id::text, t.run_id FROM activity_tasks t
    JOIN runs r USING (run_id)
    WHERE r.status <> 'running' AND t.state IN ('ready', 'leased')
    """
)


# -- the checks -----------------------------------------------------------------------------------


def _check_workflows(
    report: InvariantReport, rows: Sequence[Any], expected: Mapping[str, Expected]
) -> dict[str, int]:
    """Lost, wrong and duplicated workflows; returns the signals each run may have received."""
    by_id: dict[str, list[Any]] = {}
    for row in rows:
        by_id.setdefault(row.workflow_id, []).append(row)
    signals_allowed: dict[str, int] = {}
    for workflow_id, want in expected.items():
        runs = by_id.get(workflow_id, [])
        if not runs:
            report.add("missing", workflow_id, "no run at all")
            continue
        heads = [r for r in runs if r.continued_from_run_id is None]
        successors: dict[str, list[Any]] = {}
        for r in runs:
            if r.continued_from_run_id is not None:
                successors.setdefault(r.continued_from_run_id, []).append(r)
        for r in runs:
            signals_allowed[r.run_id] = want.signals
        forks = {k: v for k, v in successors.items() if len(v) > 1}
        if len(heads) != 1 or forks or len(runs) != want.runs:
            report.add(
                "duplicate",
                workflow_id,
                f"{len(runs)} runs (expected {want.runs}), {len(heads)} started,"
                f" {len(forks)} forks",
            )
        if len(heads) < 1:
            report.add("missing", workflow_id, "no run started without a predecessor")
            continue
        last = heads[0]
        while successors.get(last.run_id):
            last = successors[last.run_id][0]
        if last.status == "running":
            report.add("unfinished", workflow_id, f"run {last.run_id} still running")
        elif last.status != "completed":
            report.add("failed", workflow_id, f"run {last.run_id} ended {last.status}")
        else:
            got = payloads.decode_value(last.result)
            if got != want.result:
                report.add(
                    "wrong_result", workflow_id, f"run {last.run_id}: {got!r} != {want.result!r}"
                )
            else:
                report.completed_as_expected += 1
    for workflow_id in sorted(set(by_id) - set(expected)):
        report.add("unexpected", workflow_id, f"{len(by_id[workflow_id])} runs nobody started")
    return signals_allowed


async def _check_histories(report: InvariantReport, conn: AsyncConnection) -> None:
    for row in await conn.execute(SEQUENCES):
        report.add(
            "sequence",
            row.run_id,
            f"{row.n} events numbered {row.first}..{row.last}, last_event_seq"
            f" {row.last_event_seq}, starts with WorkflowStarted: {bool(row.started)}",
        )
    terminals = list(TERMINAL_BY_STATUS.values())
    for row in await conn.execute(TERMINALS, {"terminals": terminals}):
        types = list(row.types)
        if row.status == "running":
            if types:
                report.add("terminal", row.run_id, f"running run has {types}")
            continue
        want = TERMINAL_BY_STATUS.get(row.status)
        if types != [want] or row.at != row.last_event_seq:
            report.add(
                "terminal",
                row.run_id,
                f"status {row.status}: terminal events {types} (last at {row.at},"
                f" history ends at {row.last_event_seq})",
            )
    for row in await conn.execute(DUPLICATE_COMMANDS, {"commands": list(COMMANDS)}):
        report.add("command", row.run_id, f"{row.n}x {row.event_type} for step {row.step}")
    for row in await conn.execute(
        DUPLICATE_ACTIVITY_OUTCOMES, {"terminals": list(ACTIVITY_TERMINALS)}
    ):
        report.add("activity", row.run_id, f"execution {row.execution}: {list(row.types)}")
    for row in await conn.execute(TASK_EVENTS):
        report.add(
            "task_events",
            row.run_id,
            f"task {row.workflow_task_id}: {row.n} events over {row.first}..{row.last},"
            f" task of this run: {bool(row.same_run)}",
        )


async def _check_leases(report: InvariantReport, conn: AsyncConnection) -> None:
    for row in await conn.execute(UNLEASED_OUTCOMES):
        report.add(
            "stale_lease",
            row.run_id,
            f"{row.event_type} of execution {row.execution} attempt {row.number} ({row.id}),"
            " which was never leased",
        )
    for row in await conn.execute(ATTEMPTS_WITH_TWO_OUTCOMES):
        report.add(
            "stale_lease",
            row.run_id,
            f"execution {row.execution} attempt {row.number} has outcomes {list(row.types)}",
        )
    terminals = {"terminals": list(ACTIVITY_TERMINALS)}
    for row in await conn.execute(OUTCOMES_OF_SUPERSEDED_ATTEMPTS, terminals):
        report.add(
            "stale_lease",
            row.run_id,
            f"{row.event_type} of execution {row.execution} names attempt {row.number}, but"
            f" attempt {row.last_leased} was leased",
        )


async def _check_ready_work(
    report: InvariantReport, conn: AsyncConnection, repoll_seconds: float
) -> None:
    for row in await conn.execute(STALE_READY, {"repoll": repoll_seconds}):
        report.add("stale_ready", row.run_id, f"{row.what} {row.id}")
    for row in await conn.execute(OPEN_WORK_OF_CLOSED_RUNS):
        report.add("stale_ready", row.run_id, f"open {row.what} {row.id} of a closed run")


async def sample_ready_work(conn: AsyncConnection, stale_after: float) -> InvariantReport:
    """The ready-work check alone, on a store in use (see "Sampled while a soak runs")."""
    report = InvariantReport()
    await _check_ready_work(report, conn, stale_after)
    return report


async def check(
    database_url: str,
    expected: Mapping[str, Expected],
    *,
    namespace: str = "default",
    repoll_seconds: float = 1.0,
) -> InvariantReport:
    """Read the store at `database_url` and report every invariant it breaks (see the module)."""
    engine = create_async_engine(async_url(database_url), poolclass=NullPool)
    report = InvariantReport(workflows=len(expected))
    try:
        # One repeatable-read snapshot, so that the checks see one consistent store.
        async with engine.connect() as conn:
            await conn.execute(text("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY"))
            rows = (await conn.execute(RUNS, {"namespace": namespace})).all()
            report.runs = len(rows)
            report.closed_runs = sum(1 for r in rows if r.status != "running")
            counts = (await conn.execute(COUNTS)).one()
            report.events = int(counts.events)
            report.activity_executions = int(counts.activity_executions)
            report.workflow_tasks = int(counts.workflow_tasks)
            report.activity_retries = int(counts.activity_retries)
            report.workflow_task_retries = int(counts.workflow_task_retries)
            allowed = _check_workflows(report, rows, expected)
            for row in await conn.execute(SIGNALS):
                if row.n > allowed.get(row.run_id, 0):
                    report.add(
                        "duplicate",
                        row.run_id,
                        f"{row.n} signals received, at most {allowed.get(row.run_id, 0)} sent",
                    )
            await _check_histories(report, conn)
            await _check_leases(report, conn)
            await _check_ready_work(report, conn, repoll_seconds)
            await conn.rollback()
    finally:
        await engine.dispose()
    report.lost = sum(report.violation_counts[k] for k in ("missing", "unfinished", "failed"))
    report.duplicates = report.violation_counts["duplicate"]
    return report
