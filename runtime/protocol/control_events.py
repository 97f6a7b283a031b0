"""History events of the control plane's repair, archive and redrive (PROTOCOL.md 8.2, 17).

Re-exported by `burrow.protocol.events`. Each records what an operator's command did to the run,
under the command's id (`workflow_command_id`, the `command_id` the command answered with), so a
run's history says who repaired, archived or redrove it. None of them is input to workflow code
or a decision of it: they are appended with no workflow task, and replay passes over them.

`RepairRequested`, `ArchiveRequested` and `WorkflowArchived` carry the Durable Workflow
catalogue's names and payload keys: every accepted repair records `RepairRequested` with its
outcome; every accepted archive records `ArchiveRequested`, and the archive that marks the run
records `WorkflowArchived` after it.

Burrow adds `RedriveRequested`, which the catalogue lacks: recorded on the failed run when it is
continued as a new run, naming that run and the step it runs again. A resent redrive that finds
the run an earlier one made records nothing more.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from burrow.protocol.event_base import Event
from burrow.protocol.shapes import Omitted


class _Command(Event):
    """An operator's command on the run: its id, the run it named, and what it was."""

    workflow_command_id: str
    workflow_instance_id: str
    workflow_run_id: str
    request_id: str | None = Omitted
    """The caller's `request_id`, when it sent one."""


class RepairRequested(_Command):
    """The repair pass ran for the run: `repair_dispatched` or `repair_not_needed`."""

    event_type: ClassVar[str] = "RepairRequested"
    command_type: Literal["repair"] = "repair"
    outcome: Literal["repair_dispatched", "repair_not_needed"]
    wait_kind: str | None = Omitted
    """What the run waited on when nothing of its own was open (describe's `wait_kind`)."""
    task_id: str | None = Omitted
    """The workflow task the repair handed out again or created, if one."""
    task_type: Literal["workflow"] | None = Omitted


class ArchiveRequested(_Command):
    """An archive of the closed run was accepted: `archived`, or `archive_not_needed` again."""

    event_type: ClassVar[str] = "ArchiveRequested"
    command_type: Literal["archive"] = "archive"
    outcome: Literal["archived", "archive_not_needed"]
    reason: str | None = Omitted


class WorkflowArchived(_Command):
    """The run was archived (once; `archived_at` on the run says when)."""

    event_type: ClassVar[str] = "WorkflowArchived"
    archive_command_id: str
    reason: str | None = Omitted


class RedriveRequested(_Command):
    """The failed run was continued as a new run that runs its failed step again."""

    event_type: ClassVar[str] = "RedriveRequested"
    command_type: Literal["redrive"] = "redrive"
    outcome: Literal["redriven"] = "redriven"
    continued_to_run_id: str
    resume_step_sequence: int


CONTROL_EVENTS = (RepairRequested, ArchiveRequested, WorkflowArchived, RedriveRequested)
"""Events an operator's command records; never input to workflow code, never its decision."""
