"""Burrow: durable workflows in plain async Python, on Postgres with RabbitMQ wakes.

The root is lazy (PEP 562): `import burrow`, `burrow.workflow` or `burrow.activity` loads no
database or AMQP library; `Client`, `Worker` and the other names below are imported on first use.
Importing it routes Burrow's logs through the standard `logging` module (`burrow.logging`).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from burrow import logging as _logging
from burrow.errors import (
    ActivityError,
    ActivityTimedOut,
    ApplicationError,
    BurrowError,
    ConfigurationError,
    InvalidArgumentsError,
    InvalidListQuery,
    InvalidScheduleSpec,
    InvalidSearchAttribute,
    NondeterminismError,
    PayloadError,
    PayloadTooLarge,
    QueryFailedError,
    ScheduleAlreadyExists,
    ScheduleNotFound,
    UnknownActivityType,
    UnknownWorkflowType,
    UnstorableText,
    UpdateFailedError,
    WorkflowAlreadyStartedError,
    WorkflowCancelled,
    WorkflowCancelledError,
    WorkflowFailureError,
    WorkflowNotFoundError,
    WorkflowNotRunningError,
    WorkflowTerminatedError,
    WorkflowTimedOutError,
)

_logging.install_library_default()

if TYPE_CHECKING:
    from burrow import activity, workflow
    from burrow.activity_handle import ActivityHandle
    from burrow.app import App
    from burrow.client import Client
    from burrow.config import Settings, WorkerSettings
    from burrow.handle import WorkflowHandle
    from burrow.protocol.schedules import IntervalSpec, OverlapPolicy, ScheduleSpec
    from burrow.schedule_handle import ScheduleHandle
    from burrow.store.models import IdReusePolicy
    from burrow.worker.worker import Worker
    from burrow.workflow import RetryPolicy

    __version__: str

__all__ = [
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

# Name -> module that defines it; imported on first access.
_LAZY = {
    "App": "burrow.app",
    "Client": "burrow.client",
    "WorkflowHandle": "burrow.handle",
    "ActivityHandle": "burrow.activity_handle",
    "IdReusePolicy": "burrow.store.models",
    "IntervalSpec": "burrow.protocol.schedules",
    "OverlapPolicy": "burrow.protocol.schedules",
    "ScheduleSpec": "burrow.protocol.schedules",
    "ScheduleHandle": "burrow.schedule_handle",
    "Settings": "burrow.config",
    "WorkerSettings": "burrow.config",
    "Worker": "burrow.worker.worker",
    "RetryPolicy": "burrow.workflow",
}
_SUBMODULES = frozenset({"activity", "workflow"})

if not TYPE_CHECKING:  # type checkers see the imports above; unknown names stay errors

    def __getattr__(name: str) -> object:
        if name == "__version__":  # read once, from the installed package's metadata
            from importlib.metadata import version

            globals()[name] = value = version("burrow")
            return value
        if name in _SUBMODULES:
            return importlib.import_module(f"burrow.{name}")
        module = _LAZY.get(name)
        if module is None:
            raise AttributeError(f"module 'burrow' has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        globals()[name] = value  # later lookups skip __getattr__
        return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
