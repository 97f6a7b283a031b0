"""Child workflow steps: start one, signal it, ask it to cancel.

A child is a step (`ChildWorkflowScheduled` records it); its `ChildRun*` event arrives later as
an input, like an activity's result, and resolves the step's future (inputs.py). Asking a child
to cancel is recorded once (`ChildCancelRequested`), so replay never asks again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence

from burrow import payloads
from burrow.protocol import commands as cmd
from burrow.protocol import visibility_values as vv
from burrow.protocol.shapes import RetrySpec
from burrow.replay.steps import Steps


def child_id(run_id: str, step: int) -> str:
    """The id of a child started without one (the store derives the same: children.py)."""
    return f"{run_id}:child:{step}"


class ChildSteps(Steps):
    """The Runtime calls for child workflows (`burrow.workflow.context.Runtime`)."""

    def start_child_workflow(
        self,
        workflow_type: str,
        args: Sequence[object],
        *,
        workflow_id: str | None,
        queue: str | None,
        connection: str | None,
        parent_close_policy: str,
        cancellation_policy: str,
        retry_policy: RetrySpec | None,
        execution_timeout: float | None,
        run_timeout: float | None,
        result_type: object,
        memo: Mapping[str, object] | None = None,
        search_attributes: Mapping[str, object] | None = None,
    ) -> tuple[int, str, asyncio.Future[object]]:
        """Start (or replay the start of) a child; its step, its workflow id and result future."""
        seq = self._next_step
        child = workflow_id or child_id(self.run.run_id, seq)
        arguments = payloads.encode_args(
            args, limit=self.max_payload_bytes, what=f"child workflow {workflow_type} arguments"
        )
        self._step(
            lambda n: cmd.StartChildWorkflow(
                seq=n,
                workflow_type=workflow_type,
                queue=queue or self.run.task_queue,
                arguments=arguments,
                workflow_id=child,
                connection=connection,
                parent_close_policy=parent_close_policy,
                cancellation_policy=cancellation_policy,
                retry_policy=retry_policy,
                execution_timeout_seconds=execution_timeout,
                run_timeout_seconds=run_timeout,
                memo=None if memo is None else vv.check_memo(memo),
                search_attributes=None
                if search_attributes is None
                else vv.plain_values(search_attributes),
            )
        )
        future: asyncio.Future[object] = self.loop.create_future()
        self._results[seq] = future
        self._result_types[seq] = (workflow_type, result_type)
        return seq, child, future

    def signal_child_workflow(
        self, child_seq: int, signal_name: str, args: Sequence[object]
    ) -> None:
        """Signal the child started at step `child_seq` (a step of its own)."""
        arguments = payloads.encode_args(
            args, limit=self.max_payload_bytes, what=f"signal {signal_name} arguments"
        )
        self._step(
            lambda n: cmd.SignalChildWorkflow(
                seq=n, child_sequence=child_seq, signal_name=signal_name, arguments=arguments
            )
        )

    def cancel_child_workflow(self, child_seq: int) -> None:
        """Ask the child started at step `child_seq` to cancel, once."""
        if child_seq in self._child_cancels:
            return
        self._child_cancels.add(child_seq)
        self._emit(cmd.CancelChildWorkflow(sequence=child_seq))
