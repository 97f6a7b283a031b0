"""Store errors and the one place where driver errors are translated."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from datetime import datetime
from enum import StrEnum

import asyncpg
import sqlalchemy.exc as sa_exc

from burrow.errors import (
    ConfigurationError,
    Conflict,
    NotFound,
    StoreError,
    UnstorableText,
    WorkflowAlreadyStartedError,
    WorkflowNotFoundError,
    WorkflowNotRunningError,
)

__all__ = [
    "Conflict",
    "CredentialsRejected",
    "DatabaseNotReady",
    "InvalidCommandReference",
    "InvalidCommands",
    "InvalidVisibilityUpsert",
    "InvariantBroken",
    "LeaseRefusal",
    "NotFound",
    "RetryableConflict",
    "RunNotFound",
    "RunNotRunning",
    "StaleLease",
    "StoreError",
    "StoreUnavailable",
    "TaskNotFound",
    "UnstorableText",
    "WorkerIdTaken",
    "WorkflowAlreadyStarted",
    "WorkflowAlreadyStartedError",
    "WorkflowNotFoundError",
    "WorkflowNotRunningError",
    "translate_db_errors",
]


class StoreUnavailable(StoreError):
    """The database could not be reached or the transaction could not finish; retriable."""


class DatabaseNotReady(StoreError):
    """The database or its tables do not exist: run `burrow migrate`."""


class RetryableConflict(StoreUnavailable):
    """A deadlock or serialization failure; the transaction may simply be run again."""


class InvariantBroken(StoreError):
    """A row the store's own statements guarantee is missing or different: a bug, not retried."""


class LeaseRefusal(StrEnum):
    """Why a fenced call changed nothing, checked in the order the protocol documents (5.6)."""

    TASK_NOT_FOUND = "task_not_found"
    ALREADY_RECORDED = "already_recorded"
    """The call named the token whose own outcome is recorded: a repeat (its reply was lost)."""
    ATTEMPT_MISMATCH = "attempt_mismatch"
    RUN_CLOSED = "run_closed"
    NOT_LEASED = "not_leased"
    OWNER_MISMATCH = "owner_mismatch"
    EXPIRED = "expired"
    RUN_MISMATCH = "run_mismatch"
    """The call named the task's run, and it is of another (a sticky claim, PROTOCOL.md 11)."""
    STALE_TOKEN = "stale_token"
    """All else matches: the lease token is not the current one, or the row changed meanwhile."""


class StaleLease(StoreError):
    """The lease named is no longer current; nothing was changed (W7, M6).

    `reason` says why, with the task row as the fenced statement found it: its run, attempt
    (and activity attempt id), state, the run's status and the lease; `named_` ones are what
    the call named.
    """

    reason: LeaseRefusal
    run_id: str | None
    run_status: str | None
    task_status: str | None
    current_attempt: int | None
    activity_attempt_id: str | None
    lease_owner: str | None
    lease_expires_at: datetime | None
    named_attempt: int | None
    named_attempt_id: str | None
    named_run_id: str | None

    def __init__(
        self,
        *,
        task_id: str,
        lease_token: str | None,
        kind: str = "task",
        reason: LeaseRefusal = LeaseRefusal.STALE_TOKEN,
        run_id: str | None = None,
        run_status: str | None = None,
        task_status: str | None = None,
        current_attempt: int | None = None,
        activity_attempt_id: str | None = None,
        lease_owner: str | None = None,
        lease_expires_at: datetime | None = None,
        named_attempt: int | None = None,
        named_attempt_id: str | None = None,
        named_run_id: str | None = None,
    ) -> None:
        reason = LeaseRefusal(reason)
        named = f"token {lease_token}" if lease_token is not None else "the lease named"
        super().__init__(
            f"stale lease on {kind} {task_id} ({reason}): {named} is no longer current"
            " (expired and reclaimed, or already completed); nothing was changed",
            task_id=task_id,
            lease_token=lease_token,
            kind=kind,
            reason=reason,
        )
        self.task_id, self.kind, self.reason = task_id, kind, reason
        self.run_id, self.run_status, self.task_status = run_id, run_status, task_status
        self.current_attempt, self.activity_attempt_id = current_attempt, activity_attempt_id
        self.lease_owner, self.lease_expires_at = lease_owner, lease_expires_at
        self.named_attempt, self.named_attempt_id = named_attempt, named_attempt_id
        self.named_run_id = named_run_id


class TaskNotFound(NotFound):
    """No task with that id exists."""


class CredentialsRejected(StoreError, ConfigurationError):
    """The database refused the login; retrying cannot help until the settings change."""


# Deprecated aliases, kept for one release: the store raises the public classes of burrow.errors
# (burrow.WorkflowNotFoundError, ...), which derive from NotFound / Conflict as before.
RunNotFound = WorkflowNotFoundError
WorkflowAlreadyStarted = WorkflowAlreadyStartedError
RunNotRunning = WorkflowNotRunningError


class InvalidCommands(StoreError):
    """A workflow task completion carried commands the store refuses; nothing was written."""

    def __init__(self, *, task_id: str, reason: str) -> None:
        super().__init__(
            f"workflow task {task_id} completion refused: {reason}", task_id=task_id, reason=reason
        )


class InvalidVisibilityUpsert(InvalidCommands):
    """A memo or search attribute upsert the store refuses (`kind`); nothing was written."""

    def __init__(self, *, task_id: str, kind: str, reason: str) -> None:
        super().__init__(task_id=task_id, reason=f"upsert of {kind} refused: {reason}")
        self.kind = kind
        self.ids.update(kind=kind)


class InvalidCommandReference(InvalidCommands):
    """A command names an update, signal or timer the run does not hold open; nothing written.

    `command` is the command's type; `field` and `value` the reference it names (issue 25).
    """

    def __init__(
        self, *, task_id: str, command: str, field: str, value: str | int, why: str
    ) -> None:
        super().__init__(task_id=task_id, reason=f"{command} names {field} {value!r}: {why}")
        self.command, self.field, self.value = command, field, value
        self.ids.update(command=command, field=field, value=value)


class WorkerIdTaken(Conflict):
    """The worker id is registered in another namespace; nothing was released or moved."""

    worker_id: str
    namespace: str

    def __init__(self, *, worker_id: str, namespace: str) -> None:
        super().__init__(
            f"worker id {worker_id!r} is registered in another namespace, not {namespace!r};"
            " a worker id belongs to the namespace it first registered in: choose another",
            worker_id=worker_id,
            namespace=namespace,
        )


_CONNECTION_ERRORS = (sa_exc.InterfaceError, sa_exc.OperationalError, OSError, TimeoutError)
# SQLSTATEs of a server going away or refusing connections for now: a normal shutdown or restart
# ("the database system is shutting down", 57P03), an admin or crash shutdown of the backend
# (57P01, 57P02), a connection exception (class 08) or too many connections (53300). Retriable.
_UNAVAILABLE_CODES = frozenset({"57P01", "57P02", "57P03", "53300"})


# A NUL character: in a text column "invalid byte sequence" (22021), as `\\u0000` in jsonb
# "unsupported Unicode escape sequence" (22P05). The input's fault, never retriable.
_UNSTORABLE_CODES = frozenset({"22021", "22P05"})


def _is_unavailable_code(code: object) -> bool:
    return isinstance(code, str) and (code in _UNAVAILABLE_CODES or code.startswith("08"))


def _raise_for_code(code: object, exc: BaseException, orig: BaseException) -> None:
    """Raise the store error an SQLSTATE means, if it has one (`orig`: the driver's error)."""
    if code in ("40001", "40P01"):
        raise RetryableConflict(f"transaction conflict ({code}); retry it") from exc
    if code in ("3D000", "42P01"):
        raise DatabaseNotReady(f"database not migrated ({orig}); run `burrow migrate`") from exc
    if code in _UNSTORABLE_CODES:
        raise UnstorableText(
            f"the database cannot store this text ({orig}): ids, names and reasons may not"
            " contain a NUL character (\\x00); nothing was written"
        ) from exc
    if code in ("28000", "28P01"):
        raise CredentialsRejected(
            f"database refused the credentials ({code}): {orig}; check the user and"
            " password in the database URL (BURROW_DATABASE_URL)"
        ) from exc


@contextlib.contextmanager
def translate_db_errors() -> Iterator[None]:
    """Map driver errors to the store's tree; a cancellation stays a cancellation.

    A task cancelled mid-statement leaves its connection closed, so the transaction's exit fails
    with "connection is closed" on top of the CancelledError: the cancel is what happened, and
    reporting it as an unavailable store would turn a caller's clean stop into an error.
    """
    try:
        with _driver_errors_translated():
            yield
    except StoreUnavailable as exc:
        cancelled = _cancel_behind(exc)
        if cancelled is not None:
            raise cancelled from None
        raise


def _cancel_behind(exc: BaseException) -> asyncio.CancelledError | None:
    """The CancelledError under `exc`, when this task is being cancelled.

    Only then: a driver timeout also chains a CancelledError (wait_for's own), and that one is
    a real outage.
    """
    task = asyncio.current_task()
    if task is None or not task.cancelling():
        return None
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, asyncio.CancelledError):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


@contextlib.contextmanager
def _driver_errors_translated() -> Iterator[None]:
    """Map driver errors to the store's tree, always chaining the cause.

    Errors come wrapped by SQLAlchemy (Core statements) or straight from asyncpg (the text
    statements of store/sql.py); both get the same translation. asyncpg's InterfaceError is what
    SQLAlchemy wraps as its InterfaceError, hence unavailable on both paths.
    """
    try:
        yield
    except sa_exc.DBAPIError as exc:
        code = getattr(exc.orig, "sqlstate", None) or getattr(exc.orig, "pgcode", None)
        _raise_for_code(code, exc, exc.orig or exc)
        if (
            exc.connection_invalidated
            or isinstance(exc, _CONNECTION_ERRORS)
            or _is_unavailable_code(code)
        ):
            raise StoreUnavailable(f"database unavailable: {exc.orig}") from exc
        raise
    except asyncpg.PostgresError as exc:
        code = exc.sqlstate
        _raise_for_code(code, exc, exc)
        if _is_unavailable_code(code):
            raise StoreUnavailable(f"database unavailable: {exc}") from exc
        raise
    except (asyncpg.InterfaceError, asyncpg.InternalClientError, OSError, TimeoutError) as exc:
        # InternalClientError: the driver's protocol is stuck mid-operation (a command cut off
        # while the server went away); the connection is dropped (`connection_lost`), so a
        # retry gets another.
        raise StoreUnavailable(f"database unavailable: {exc}") from exc
    except Exception as exc:
        # A driver error raised outside SQLAlchemy's wrapping (e.g. while a pooled connection is
        # reset) still carries its SQLSTATE.
        if _is_unavailable_code(getattr(exc, "sqlstate", None)):
            raise StoreUnavailable(f"database unavailable: {exc}") from exc
        raise


def connection_lost(exc: BaseException, driver_connection: asyncpg.Connection) -> bool:
    """Whether a raw driver error left its connection unusable (closed).

    That is how SQLAlchemy judges a disconnect on its own path; the pool must then reconnect
    instead of handing the connection out again.
    """
    return bool(driver_connection.is_closed()) or isinstance(
        exc, (OSError, TimeoutError, asyncpg.InternalClientError)
    )
