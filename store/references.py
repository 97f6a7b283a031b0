"""What completion commands refer to: the run's updates, signals and timers (issue 25).

`complete_update`, `fail_update`, `skip_signal` and `cancel_timer` name something the run must
hold open: an accepted update with no outcome yet, a received signal not yet skipped, a timer
its code started and did not cancel. Each check runs in the completion's transaction, under the
run lock it holds (store/completion/transactional.py), in the statement that writes the change
where there is one. A reference to nothing raises `InvalidCommandReference`, which rolls the
whole completion back: no event is made up for it.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncConnection

from burrow.protocol import commands as cmd
from burrow.store import errors, sql
from burrow.store.models import JsonDict, TimerState, UpdateState
from burrow.store.sql import statement

_FINISH_UPDATE = statement(
    """
    UPDATE updates
    SET state = :state, result = :result, failure = :failure, completed_at = now()
    WHERE run_id = :run_id AND update_id = :update_id AND state = 'accepted'
    RETURNING update_name, arguments
    """,
    json_params=["result", "failure"],
)

# The timer row as it was before this statement's own update (one snapshot): a pending timer
# is cancelled now; a fired one is left alone; a missing or cancelled one is no reference.
_CANCEL_TIMER = statement(
    """
    WITH cancelled AS (
        UPDATE timers SET state = 'cancelled'
        WHERE run_id = :run_id AND step_seq = :seq AND state = 'pending'
        RETURNING delay_seconds
    )
    SELECT (SELECT delay_seconds FROM cancelled) AS delay_seconds,
           (SELECT state FROM timers WHERE run_id = :run_id AND step_seq = :seq) AS state
    """
)

_RECEIVED_SIGNAL = statement(
    """
    SELECT signal_name,
           EXISTS (SELECT 1 FROM history_events
                   WHERE run_id = :run_id AND idempotency_key = :skipped_key) AS skipped
    FROM signals WHERE run_id = :run_id AND signal_id = :signal_id
    """
)


@dataclass(frozen=True, slots=True)
class FinishedUpdate:
    """The accepted update a command gave its outcome: its name and arguments as accepted."""

    update_name: str
    arguments: JsonDict


async def finish_update(
    conn: AsyncConnection,
    *,
    task_id: str,
    run_id: str,
    command: cmd.CompleteUpdate | cmd.FailUpdate,
) -> FinishedUpdate:
    """Record the update's outcome, if it is an accepted update of the run with none yet.

    Raises:
        InvalidCommandReference: the run has no such update, or it already has its outcome.
    """
    if isinstance(command, cmd.FailUpdate):
        state, result, failure = UpdateState.FAILED, None, command.failure().to_json()
    else:
        state, result, failure = UpdateState.COMPLETED, dict(command.result), None
    params = {
        "run_id": run_id,
        "update_id": command.update_id,
        "state": state.value,
        "result": result,
        "failure": failure,
    }
    row = await sql.first(conn, _FINISH_UPDATE, params)
    if row is None:
        raise errors.InvalidCommandReference(
            task_id=task_id,
            command=command.type,
            field="update_id",
            value=command.update_id,
            why=f"run {run_id} has no accepted update of that id still waiting for its outcome",
        )
    return FinishedUpdate(update_name=row.update_name, arguments=row.arguments)


async def cancel_timer(
    conn: AsyncConnection, *, task_id: str, run_id: str, seq: int
) -> float | None:
    """Cancel the run's pending timer of step `seq`: its delay, or None if it already fired.

    A fired timer is a valid reference: the code may cancel it before it sees `TimerFired`
    (the timer fired after the task was claimed, or later in the same history), and replay
    ignores the fire.

    Raises:
        InvalidCommandReference: the run started no timer at that step, or cancelled it.
    """
    row = await sql.one(conn, _CANCEL_TIMER, {"run_id": run_id, "seq": seq})
    if row.delay_seconds is not None:
        return float(row.delay_seconds)
    if row.state == TimerState.FIRED:
        return None
    raise errors.InvalidCommandReference(
        task_id=task_id,
        command="cancel_timer",
        field="sequence",
        value=seq,
        why=f"run {run_id} started no timer at that step"
        if row.state is None
        else "that timer was already cancelled",
    )


async def check_signal(
    conn: AsyncConnection, *, task_id: str, run_id: str, command: cmd.SkipSignal, skipped_key: str
) -> None:
    """Refuse a skip of a signal the run did not receive under that id and name, or skipped.

    `skipped_key` is the idempotency key of the skip's `SignalSkipped` event.

    Raises:
        InvalidCommandReference: no such signal, another name, or a skip already recorded.
    """
    params = {"run_id": run_id, "signal_id": command.signal_id, "skipped_key": skipped_key}
    row = await sql.first(conn, _RECEIVED_SIGNAL, params)
    if row is None:
        why = f"run {run_id} received no signal of that id"
    elif row.signal_name != command.signal_name:
        why = f"that signal is {row.signal_name!r}, not {command.signal_name!r}"
    elif row.skipped:
        why = "that signal was already skipped"
    else:
        return
    raise errors.InvalidCommandReference(
        task_id=task_id, command=command.type, field="signal_id", value=command.signal_id, why=why
    )
