"""An optional read replica (BURROW_DATABASE_READ_URL) for the reads that tolerate lag.

Only two reads go there: the runs listed (`GET /api/workflows`, with their memo and search
attributes), a page the caller knows is a moment old anyway, and the history of a closed run,
which no longer changes. A replica's copy of such a history is used only when it is complete
(it reaches the run's last event as the primary knows it); otherwise the primary answers.
Claims, fencing, starts, signals, describes and every write stay on the primary.
"""

from __future__ import annotations

from burrow.config import Settings
from burrow.protocol.events import HistoryEvent
from burrow.server.deps import ServerState
from burrow.server.settings import ServerSettings
from burrow.store import Store
from burrow.store.models import RunInfo, RunStatus

READ_POOL_SIZE = 4
READ_APPLICATION_NAME = "burrow-server-reads"


def connect(server: ServerSettings, settings: Settings) -> Store | None:
    """The replica's store (connections open lazily), or None when none is configured."""
    if server.database_read_url is None:
        return None
    return Store.connect(
        server.database_read_url,
        pool_size=READ_POOL_SIZE,
        max_payload_bytes=settings.max_payload_bytes,
        application_name=READ_APPLICATION_NAME,
    )


async def close(state: ServerState) -> None:
    """Close the replica's connections, if it has any."""
    if state.reads is not None:
        await state.reads.close()


async def closed_history(state: ServerState, run: RunInfo) -> list[HistoryEvent] | None:
    """The whole history of a closed run from the replica, or None: read it from the primary.

    None as well when the replica has not replayed the run's last events yet (lag).
    """
    if state.reads is None or run.status is RunStatus.RUNNING:
        return None
    events = await state.reads.read_history(run_id=run.run_id)
    if len(events) != run.last_event_seq or (events and events[-1].sequence != len(events)):
        return None
    return events
