"""Request dependencies: the server's state and the checked caller of each plane."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated

from fastapi import Depends, Request

from burrow.config import Settings
from burrow.outcomes import OutcomeWaiter
from burrow.server.auth import (
    ALL_ROLES,
    Caller,
    Role,
    authorize,
    check_control_version,
    check_worker_version,
)
from burrow.server.change_feed import ChangeFeed
from burrow.server.condition_waits import KnownWaits
from burrow.server.namespace_cache import KnownNamespaces
from burrow.server.poll_wakes import PollWakes
from burrow.server.polls import HeldPolls, PollRegistry
from burrow.server.settings import ServerSettings
from burrow.server.stream_waits import StreamWaits
from burrow.store import Store
from burrow.supervision import Loops

if TYPE_CHECKING:  # the UI imports this module
    from burrow.ui.metrics_history import MetricsHistory


@dataclass
class ServerState:
    """What the routes share: settings, the store, wakes, outcome waits and poll idempotency."""

    settings: ServerSettings
    runtime: Settings
    store: Store
    wakes: PollWakes
    outcomes: OutcomeWaiter
    """Where query and update calls wait for their answer."""
    polls: PollRegistry = field(default_factory=PollRegistry)
    held: HeldPolls = field(default_factory=lambda: HeldPolls(1000))
    loops: Loops = field(default_factory=Loops)
    """The background loops (the repair pass), for health and operator metrics."""
    waits: KnownWaits = field(default_factory=KnownWaits)
    """The open condition waits of the workflow tasks this process leased."""
    stream_waits: StreamWaits = field(default_factory=StreamWaits)
    """Subscriptions held on run output streams."""
    known: KnownNamespaces = field(default_factory=KnownNamespaces)
    """The namespaces served: those in the store."""
    ui_changes: ChangeFeed = field(default_factory=ChangeFeed)
    """Run-change wakes for the web UI's live pages."""
    metrics_history: MetricsHistory | None = None
    """The UI charts' samples (burrow.ui.metrics_history), while the app's lifespan runs."""
    reads: Store | None = None
    """The read replica (BURROW_DATABASE_READ_URL), if any: reads that tolerate lag only."""

    @property
    def read_store(self) -> Store:
        """Where reads that tolerate lag go: the replica if there is one, else the store."""
        return self.store if self.reads is None else self.reads


def server_state(request: Request) -> ServerState:
    """The app's state (set by create_app)."""
    state: ServerState = request.app.state.burrow
    return state


async def worker_caller(request: Request) -> Caller:
    """A worker-plane caller: worker role, a served protocol version, a known namespace."""
    state = server_state(request)
    roles = authorize(request, state.settings, frozenset({Role.WORKER}))
    check_worker_version(request)
    return Caller(roles=roles, namespace=await state.known.served(request, state.settings))


async def operator_caller(request: Request) -> Caller:
    """A control-plane caller: operator or admin role, version 2, a known namespace."""
    state = server_state(request)
    roles = authorize(request, state.settings, frozenset({Role.OPERATOR, Role.ADMIN}))
    check_control_version(request)
    return Caller(roles=roles, namespace=await state.known.served(request, state.settings))


async def admin_caller(request: Request) -> Caller:
    """An operator-API caller: admin role, control-plane version 2, a known namespace."""
    state = server_state(request)
    roles = authorize(request, state.settings, frozenset({Role.ADMIN}))
    check_control_version(request)
    return Caller(roles=roles, namespace=await state.known.served(request, state.settings))


def any_caller(request: Request) -> Caller:
    """Discovery: any role; the namespace is not checked (PROTOCOL.md 2.2)."""
    settings = server_state(request).settings
    roles = authorize(request, settings, ALL_ROLES)
    return Caller(roles=roles, namespace=settings.default_namespace)


State = Annotated[ServerState, Depends(server_state)]
WorkerCaller = Annotated[Caller, Depends(worker_caller)]
OperatorCaller = Annotated[Caller, Depends(operator_caller)]
AdminCaller = Annotated[Caller, Depends(admin_caller)]
AnyCaller = Annotated[Caller, Depends(any_caller)]
