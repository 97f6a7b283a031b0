"""App: the workflows and activities one task queue serves."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from burrow import activity
from burrow.errors import WorkflowDefinitionError
from burrow.workflow.definition import WorkflowDefinition, get_definition


class App:
    """A task queue's registry of workflow classes and activity functions."""

    def __init__(
        self,
        *,
        task_queue: str,
        workflows: Iterable[type] = (),
        activities: Iterable[Callable[..., object]] = (),
    ) -> None:
        self.task_queue = task_queue
        self.workflows: dict[str, WorkflowDefinition] = {}
        self.activities: dict[str, activity.ActivityDefinition] = {}
        for cls in workflows:
            definition = get_definition(cls)
            if definition.name in self.workflows:
                raise WorkflowDefinitionError(f"two workflows named {definition.name!r}")
            self.workflows[definition.name] = definition
        for fn in activities:
            act = activity.get_definition(fn)
            if act.name in self.activities:
                raise WorkflowDefinitionError(f"two activities named {act.name!r}")
            self.activities[act.name] = act

    def __repr__(self) -> str:
        return (
            f"App(task_queue={self.task_queue!r}, workflows={sorted(self.workflows)},"
            f" activities={sorted(self.activities)})"
        )
