"""The Store's schedule methods (issue 30), each one transaction.

Shaped for the client, the CLI and the HTTP routes alike: `list_schedules` pages by schedule id.
"""

from __future__ import annotations

from datetime import datetime

from burrow.protocol.schedules import OverlapPolicy
from burrow.store import schedule_history, schedules
from burrow.store.facade import Facade
from burrow.store.schedule_models import (
    NewSchedule,
    ScheduleDescription,
    ScheduleFire,
    ScheduleHistoryPage,
    ScheduleStatus,
    ScheduleSummary,
    ScheduleUpdate,
)


class SchedulePlane(Facade):
    """Create, read, change and fire schedules; the repair pass fires them when due."""

    async def create_schedule(self, new: NewSchedule) -> ScheduleSummary:
        """Create a schedule (ScheduleAlreadyExists: the id is taken; nothing written)."""
        self.check_payload(new.action.input, "schedule input")
        return await self.transactions.run(lambda txn: schedules.create_schedule(txn, new))

    async def describe_schedule(
        self,
        *,
        namespace: str,
        schedule_id: str,
        upcoming: int = schedules.UPCOMING,
        recent: int = schedules.RECENT,
    ) -> ScheduleDescription:
        """The schedule, its next `upcoming` fire times and latest `recent` fires."""
        async with self.transactions.begin() as conn:
            return await schedules.describe_schedule(
                conn, namespace=namespace, schedule_id=schedule_id, upcoming=upcoming, recent=recent
            )

    async def list_schedules(
        self,
        *,
        namespace: str,
        status: ScheduleStatus | None = None,
        workflow_type: str | None = None,
        after_schedule_id: str | None = None,
        limit: int = 100,
    ) -> list[ScheduleSummary]:
        """One page of the namespace's schedules by id, after `after_schedule_id`."""
        async with self.transactions.one_statement() as conn:
            return await schedules.list_schedules(
                conn,
                namespace=namespace,
                status=status,
                workflow_type=workflow_type,
                after_schedule_id=after_schedule_id,
                limit=limit,
            )

    async def update_schedule(
        self, *, namespace: str, schedule_id: str, update: ScheduleUpdate
    ) -> ScheduleSummary:
        """Change the fields `update` gives."""
        if update.action is not None:
            self.check_payload(update.action.input, "schedule input")
        return await self.transactions.run(
            lambda txn: schedules.update_schedule(
                txn, namespace=namespace, schedule_id=schedule_id, update=update
            )
        )

    async def pause_schedule(
        self, *, namespace: str, schedule_id: str, note: str | None = None
    ) -> ScheduleSummary:
        """Stop firing until resumed, with a note saying why."""
        return await self.transactions.run(
            lambda txn: schedules.pause_schedule(
                txn, namespace=namespace, schedule_id=schedule_id, note=note
            )
        )

    async def resume_schedule(
        self, *, namespace: str, schedule_id: str, note: str | None = None
    ) -> ScheduleSummary:
        """Fire again, from the next fire time after now."""
        return await self.transactions.run(
            lambda txn: schedules.resume_schedule(
                txn, namespace=namespace, schedule_id=schedule_id, note=note
            )
        )

    async def trigger_schedule(
        self, *, namespace: str, schedule_id: str, overlap: OverlapPolicy | None = None
    ) -> ScheduleFire:
        """Fire now; `overlap` overrides the overlap policy for this fire."""
        return await self.transactions.run(
            lambda txn: schedules.trigger_schedule(
                txn, namespace=namespace, schedule_id=schedule_id, overlap=overlap
            )
        )

    async def backfill_schedule(
        self,
        *,
        namespace: str,
        schedule_id: str,
        start: datetime,
        end: datetime,
        overlap: OverlapPolicy | None = None,
    ) -> list[ScheduleFire]:
        """Fire every fire time in `[start, end)` not fired before."""
        return await self.transactions.run(
            lambda txn: schedules.backfill_schedule(
                txn,
                namespace=namespace,
                schedule_id=schedule_id,
                start=start,
                end=end,
                overlap=overlap,
            )
        )

    async def delete_schedule(self, *, namespace: str, schedule_id: str) -> None:
        """Delete the schedule; runs it started go on."""
        await self.transactions.run(
            lambda txn: schedules.delete_schedule(txn, namespace=namespace, schedule_id=schedule_id)
        )

    async def schedule_history(
        self,
        *,
        namespace: str,
        schedule_id: str,
        after_sequence: int | None = None,
        limit: int = schedule_history.DEFAULT_PAGE,
    ) -> ScheduleHistoryPage | None:
        """The schedule's audit events after `after_sequence`; None: the id never existed.

        Kept after a delete (the stream ends with `ScheduleDeleted`).
        """
        async with self.transactions.begin() as conn:
            return await schedule_history.history_page(
                conn,
                namespace=namespace,
                schedule_id=schedule_id,
                after_sequence=after_sequence,
                limit=limit,
            )
