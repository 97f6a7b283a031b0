"""Condition waits on Burrow's timers (PROTOCOL.md 7 `open_condition_wait`, 8.2 ConditionWait*).

A wait is the step that opened it (`ConditionWaitOpened`, id `run_id:step`); its timeout is an
ordinary durable timer of that step. When the timer fires, the run's inbox gets
`ConditionWaitTimedOut` instead of `TimerFired` (`timed_out_event`). Workflow code resolves a
wait it found true (`satisfy`: the timer is cancelled) or re-opens one it found still false
(`move`: the timer goes to the new step, keeping its deadline). A timeout that fired while the
task that resolves or re-opens its wait ran is still in the inbox, not yet seen by the code: it
is dropped (satisfied) or moved with the wait (re-opened), so history says what the code saw.
"""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncConnection

from burrow.protocol import events
from burrow.store import sql
from burrow.store.history import NewEvent
from burrow.store.sql import statement


def opened_key(step: int) -> str:
    """The once-only key of a wait's ConditionWaitOpened."""
    return f"step:{step}:condition-opened"


def timed_out_key(step: int) -> str:
    """The once-only key of a wait's ConditionWaitTimedOut."""
    return f"step:{step}:condition-timed-out"


def satisfied_key(step: int) -> str:
    """The once-only key of a wait's ConditionWaitSatisfied."""
    return f"step:{step}:condition-satisfied"


def wait_id(run_id: str, step: int) -> str:
    """A wait's id (and its timer's): the run and the step that opened it."""
    return f"{run_id}:{step}"


_OPENED = statement(
    "SELECT payload FROM history_events WHERE run_id = :run_id AND idempotency_key = :key"
)

_MOVE_TIMER = statement(
    """
    UPDATE timers SET step_seq = :new_step
    WHERE run_id = :run_id AND step_seq = :old_step AND state = 'pending'
    RETURNING fire_at
    """
)

_MOVE_TIMED_OUT = statement(
    """
    UPDATE inbox_events
    SET idempotency_key = :new_key,
        payload = payload || jsonb_build_object(
            'condition_wait_id', CAST(:new_id AS text), 'timer_id', CAST(:new_id AS text),
            'sequence', CAST(:new_step AS integer))
    WHERE run_id = :run_id AND idempotency_key = :old_key AND NOT applied
    RETURNING id
    """
)

_CANCEL_TIMER = statement(
    """
    UPDATE timers SET state = 'cancelled'
    WHERE run_id = :run_id AND step_seq = :step AND state = 'pending'
    RETURNING step_seq
    """
)

_DROP_TIMED_OUT = statement(
    "DELETE FROM inbox_events WHERE run_id = :run_id AND idempotency_key = :key AND NOT applied"
)


async def timed_out_event(conn: AsyncConnection, *, run_id: str, step: int) -> NewEvent | None:
    """The ConditionWaitTimedOut a fired timer of `step` records, if it is a wait's timeout."""
    row = await sql.first(conn, _OPENED, {"run_id": run_id, "key": opened_key(step)})
    if row is None:
        return None
    opened = events.ConditionWaitOpened.model_validate(row.payload)
    timed_out = events.ConditionWaitTimedOut(**opened.model_dump(), timer_id=wait_id(run_id, step))
    return NewEvent(timed_out, timed_out_key(step))


async def move(conn: AsyncConnection, *, run_id: str, old_step: int, new_step: int) -> bool:
    """Move the wait's timeout from `old_step` to `new_step`; False if it had none left.

    A timeout already fired but unseen moves too (its inbox event names the new wait).
    """
    moved = await sql.first(
        conn, _MOVE_TIMER, {"run_id": run_id, "old_step": old_step, "new_step": new_step}
    )
    if moved is not None:
        return True
    params = {
        "run_id": run_id,
        "old_key": timed_out_key(old_step),
        "new_key": timed_out_key(new_step),
        "new_id": wait_id(run_id, new_step),
        "new_step": new_step,
    }
    return await sql.first(conn, _MOVE_TIMED_OUT, params) is not None


async def satisfy(conn: AsyncConnection, *, run_id: str, step: int) -> None:
    """Cancel the wait's timeout, or drop its timeout fired while the code found it true."""
    cancelled = await sql.first(conn, _CANCEL_TIMER, {"run_id": run_id, "step": step})
    if cancelled is None:
        await sql.fetch(conn, _DROP_TIMED_OUT, {"run_id": run_id, "key": timed_out_key(step)})
