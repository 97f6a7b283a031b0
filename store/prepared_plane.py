"""The Store's prepared local activity calls (protocol 1.20): each one transaction.

Each checks the workflow claim it names, locks the run and reads its history, and records what
it decides (`burrow.store.prepared_locals`); a refusal (StaleLease, PreparedRefused) writes
nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

from burrow.codec import Payload
from burrow.protocol import commands as cmd
from burrow.protocol.shapes import LocalActivitySpec
from burrow.store import prepared_admissions as admissions
from burrow.store import prepared_outcomes as outcomes
from burrow.store.facade import Facade
from burrow.store.prepared_locals import AttemptState, Claim


class PreparedLocalPlane(Facade):
    """Prepared local activities: admissions, observation and closes, on a workflow claim."""

    async def checkpoint_local_prefix(
        self, *, claim: Claim, start_sequence: int, commands: Sequence[cmd.Command]
    ) -> admissions.Checkpointed:
        """Record the authored steps before a prepared local call."""
        return await self.transactions.run(
            lambda txn: admissions.checkpoint(
                txn, claim=claim, start_sequence=start_sequence, commands=commands
            )
        )

    async def checkpoint_local_group(
        self,
        *,
        claim: Claim,
        start_sequence: int,
        members: Sequence[admissions.GroupMember],
        kind: str,
    ) -> admissions.Checkpointed:
        """Open every member of a parallel group of local calls (and others) at once."""
        return await self.transactions.run(
            lambda txn: admissions.checkpoint_group(
                txn, claim=claim, start_sequence=start_sequence, members=members, kind=kind
            )
        )

    async def prepare_local_attempt(
        self,
        *,
        claim: Claim,
        sequence: int,
        worker_attempt_id: str,
        spec: LocalActivitySpec,
        group: tuple[int, int] | None,
        cleanup: admissions.CleanupProof | None,
    ) -> AttemptState:
        """Start the next attempt of a local step (in a group, in cancellation cleanup)."""
        return await self.transactions.run(
            lambda txn: admissions.prepare(
                txn,
                claim=claim,
                sequence=sequence,
                worker_attempt_id=worker_attempt_id,
                spec=spec,
                group=group,
                cleanup=cleanup,
            )
        )

    async def control_local_attempt(
        self, *, claim: Claim, activity_attempt_id: str
    ) -> AttemptState:
        """Observe an attempt, renewing the claim's lease while it may go on."""
        return await self.transactions.run(
            lambda txn: admissions.control(
                txn, claim=claim, activity_attempt_id=activity_attempt_id
            )
        )

    async def heartbeat_local_attempt(
        self, *, claim: Claim, activity_attempt_id: str, progress: Payload | None
    ) -> AttemptState:
        """Record an attempt's heartbeat (with its details, `progress`) while it may go on."""
        return await self.transactions.run(
            lambda txn: admissions.heartbeat(
                txn, claim=claim, activity_attempt_id=activity_attempt_id, progress=progress
            )
        )

    async def report_local_outcome(
        self, *, claim: Claim, activity_attempt_id: str, report: outcomes.Report
    ) -> outcomes.Closed:
        """Close an attempt as its worker reports it."""
        return await self.transactions.run(
            lambda txn: outcomes.outcome(
                txn, claim=claim, activity_attempt_id=activity_attempt_id, report=report
            )
        )

    async def recover_local_attempt(
        self, *, claim: Claim, sequence: int, spec: LocalActivitySpec
    ) -> outcomes.Closed:
        """Close the attempt of a local step that a lost claim left open."""
        return await self.transactions.run(
            lambda txn: outcomes.recover(txn, claim=claim, sequence=sequence, spec=spec)
        )
