"""Decorator misuse raises at decoration; definitions carry names and handlers."""

from __future__ import annotations

import pytest

from burrow import App, activity, workflow
from burrow.config import Settings
from burrow.errors import NotInActivityError, NotInWorkflowError, WorkflowDefinitionError


def test_workflow_needs_exactly_one_run_method() -> None:
    with pytest.raises(WorkflowDefinitionError, match=r"exactly one @workflow\.run"):

        @workflow.defn
        class NoRun:
            pass


def test_run_method_must_be_async() -> None:
    with pytest.raises(WorkflowDefinitionError, match="must be async def"):

        class Sync:
            @workflow.run
            def run(self) -> None:  # type: ignore[type-var]
                pass


def test_query_handlers_cannot_be_async() -> None:
    with pytest.raises(WorkflowDefinitionError, match="plain def"):

        class Q:
            @workflow.query
            async def status(self) -> str:
                return ""


def test_definition_records_names_and_handlers() -> None:
    @workflow.defn(name="Renamed")
    class Flow:
        @workflow.signal(name="go")
        def on_go(self) -> None: ...

        @workflow.query
        def status(self) -> str:
            return ""

        @workflow.update
        async def bump(self, n: int) -> int:
            return n

        @workflow.run
        async def run(self, x: int, y: str) -> None: ...

    definition = workflow.get_definition(Flow)
    assert definition.name == "Renamed"
    assert definition.signals == {"go": "on_go"}
    assert definition.queries == {"status": "status"}
    assert definition.updates == {"bump": "bump"}
    assert definition.arg_types == (int, str)


def test_app_refuses_duplicate_names_and_undecorated_functions() -> None:
    @activity.defn(name="same")
    async def one() -> None: ...

    @activity.defn(name="same")
    async def two() -> None: ...

    with pytest.raises(WorkflowDefinitionError, match="two activities named 'same'"):
        App(task_queue="q", activities=[one, two])
    with pytest.raises(WorkflowDefinitionError, match="not decorated"):
        App(task_queue="q", activities=[lambda: None])


async def test_authoring_calls_outside_workflows_fail_loudly() -> None:
    with pytest.raises(NotInWorkflowError):
        workflow.now()
    with pytest.raises(NotInWorkflowError):
        await workflow.sleep(1)
    with pytest.raises(NotInActivityError):
        activity.context()


def test_settings_come_from_the_given_environment_only() -> None:
    settings = Settings.from_env(
        {
            "BURROW_DATABASE_URL": "postgresql://x@h/db",
            "BURROW_NAMESPACE": "tenant-a",
            "BURROW_LEASE_SECONDS": "5",
        }
    )
    assert settings.database_url == "postgresql://x@h/db"
    assert settings.namespace == "tenant-a"
    assert settings.worker.lease_seconds == 5
    assert Settings.from_env({}).namespace == "default"
