"""Store errors and the one place where driver errors are translated."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import sqlalchemy.exc as sa_exc

from burrow.errors import (
    ConfigurationError,
    Conflict,
    NotFound,
    StoreError,
    WorkflowAlreadyStartedError,
    WorkflowNotFoundError,
    WorkflowNotRunningError,
)

__all__ = [
    "Conflict",
    "CredentialsRejected",
    "DatabaseNotReady",
    "InvalidCommands",
    "NotFound",
    "RetryableConflict",
    "RunNotFound",
    "RunNotRunning",
    "StaleLease",
    "StoreError",
    "StoreUnavailable",
    "TaskNotFound",
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


class StaleLease(StoreError):
    """The lease token is no longer current; nothing was changed (W7, M6)."""

    def __init__(self, *, task_id: str, lease_token: str, kind: str = "task") -> None:
        super().__init__(
            f"stale lease on {kind} {task_id}: token {lease_token} is no longer current"
            " (expired and reclaimed, or already completed); nothing was changed",
            task_id=task_id,
            lease_token=lease_token,
            kind=kind,
        )


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


_CONNECTION_ERRORS = (sa_exc.InterfaceError, sa_exc.OperationalError, OSError, TimeoutError)


@contextlib.contextmanager
def translate_db_errors() -> Iterator[None]:
    """Map driver errors to the store's tree, always chaining the cause."""
    try:
        yield
    except sa_exc.DBAPIError as exc:
        code = getattr(exc.orig, "sqlstate", None) or getattr(exc.orig, "pgcode", None)
        if code in ("40001", "40P01"):
            raise RetryableConflict(f"transaction conflict ({code}); retry it") from exc
        if code in ("3D000", "42P01"):
            raise DatabaseNotReady(
                f"database not migrated ({exc.orig}); run `burrow migrate`"
            ) from exc
        if code in ("28000", "28P01"):
            raise CredentialsRejected(
                f"database refused the credentials ({code}): {exc.orig}; check the user and"
                " password in the database URL (BURROW_DATABASE_URL)"
            ) from exc
        if exc.connection_invalidated or isinstance(exc, _CONNECTION_ERRORS):
            raise StoreUnavailable(f"database unavailable: {exc.orig}") from exc
        raise
    except (OSError, TimeoutError) as exc:
        raise StoreUnavailable(f"database unavailable: {exc}") from exc
