"""Cold replay fed one history page at a time, with the commands of a replay of the whole history.

A long history need not be parsed all at once: the instance is activated with every workflow
task's events as soon as a page shows they are complete, and the events are let go. Only the
events of the task still open (the last one of the page) are carried to the next page.

A page may end in the middle of a workflow task: its events are held until the task's last
one arrived, because an activation applies its inputs and then runs the code once (instance.py).
Cutting between two tasks' events is where the original execution stopped and resumed, so the
code reaches the same block point. It is not equivalent in one case: a replay of the whole
history has registered every later step before the first activation runs, and code that does
not take its steps where they were recorded (a changed definition, a `get_version` just before
a block point, a recorded local activity whose outcome a later task recorded) can behave
differently when the later steps are not known yet. Every such difference shows at the end of
an activation followed by more history: new commands, a local activity to run, a failure, or
code awaiting an outcome not fed yet; or later as a step recorded before one already fed.
Then the paged replay stops (`diverged`) and the caller replays the whole history instead, so
the result is always the one of a whole replay.
"""

from __future__ import annotations

from collections.abc import Sequence

from burrow.protocol import events as ev
from burrow.protocol.events import HistoryEvent
from burrow.replay.activation import Activation
from burrow.replay.instance import WorkflowInstance


class PagedReplay:
    """Feeds a fresh instance history pages in order; `finish()` gives the last activation."""

    def __init__(self, instance: WorkflowInstance) -> None:
        self.instance = instance
        self.diverged: str | None = None
        """Why the pages cannot give the commands of a whole replay: replay it whole instead."""
        self.events = 0
        """Events fed so far."""
        self._held: list[HistoryEvent] = []
        self._task: str | None = None  # the workflow task of the last event that names one
        self._complete = 0  # how many held events belong to tasks known to be complete
        self._last_step = 0  # the highest step recorded by the events activated so far

    def feed(self, page: Sequence[HistoryEvent]) -> None:
        """Take the next page; activate the instance with every workflow task it completes."""
        if self.diverged is not None:
            return
        self.events += len(page)
        for event in page:
            task = event.workflow_task_id
            if task is not None and task != self._task:
                # A new task's events start here: every event held before is complete. Events
                # of no task go with the task before them, as `activations` groups them.
                self._complete = len(self._held)
                self._task = task
            self._held.append(event)
        if self._complete:
            complete, self._held = self._held[: self._complete], self._held[self._complete :]
            self._complete = 0
            self._activate_before_more(complete)

    def finish(self) -> Activation:
        """Activate the last workflow task's events: the commands a whole replay gives.

        Call it only when `diverged` is None, after the last page.
        """
        held, self._held = self._held, []
        return self.instance.activate(held)

    def _activate_before_more(self, events: list[HistoryEvent]) -> None:
        steps = [e.event.sequence for e in events if isinstance(e.event, ev.STEP_EVENTS)]
        if steps and min(steps) <= self._last_step:
            self.diverged = f"step {min(steps)} was recorded after step {self._last_step}"
            return
        self._last_step = max(steps, default=self._last_step)
        activation = self.instance.activate(events)
        del events[:]  # let the parsed events go now, not when the caller's frame ends
        if activation.failure is not None:
            self.diverged = f"an activation before the last failed: {activation.failure!r}"
        elif activation.commands or activation.local_activities:
            self.diverged = "the code made new steps before history's last workflow task"
        elif self.instance.awaits_recorded_outcomes:
            self.diverged = "the code awaits a local activity outcome recorded later"
