"""Burrow: durable workflows in plain async Python, on Postgres with RabbitMQ wakes."""

from __future__ import annotations

from burrow import activity, workflow
from burrow.app import App
from burrow.client import Client, WorkflowHandle
from burrow.config import Settings, WorkerSettings
from burrow.errors import (
    ActivityError,
    ActivityTimedOut,
    ApplicationError,
    BurrowError,
    NondeterminismError,
    PayloadError,
    PayloadTooLarge,
    UnknownActivityType,
    UnknownWorkflowType,
    WorkflowCancelled,
    WorkflowFailureError,
)
from burrow.worker.worker import Worker
from burrow.workflow import RetryPolicy

__all__ = [
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
