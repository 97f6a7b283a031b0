"""A cold replay of a claimed workflow task, its history read and fed one page at a time.

The claim brings the first page of a long history (`history_through` says where it ends); the
rest is read one page per transaction, fenced at what the claim saw, and each page is fed to
the instance and let go, so a worker holds the parsed events of about one page, not of the whole
history (issue 32). When the pages cannot give the commands a replay of the whole history gives
(`PagedReplay.diverged`: code that does not take its steps where history recorded them), the
instance is dropped and the whole history is read and replayed at once, as before.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import structlog

from burrow.replay.activation import Activation
from burrow.replay.instance import WorkflowInstance
from burrow.replay.paged import PagedReplay
from burrow.store import history
from burrow.store.models import ClaimedWorkflowTask, HistoryEvent

if TYPE_CHECKING:
    from burrow.worker.env import TaskEnv

log = structlog.get_logger("burrow.worker")


@dataclass(frozen=True, slots=True)
class ColdReplay:
    """What a cold replay left: the instance, its activation and how many events it read."""

    instance: WorkflowInstance
    activation: Activation
    events: int
    history_bytes: int
    """What the history weighs, for a cache: as the claim said, or as read when it did not."""
    paged: bool
    """Whether it was fed page by page (not when the claim brought it whole, or pages diverged)."""


async def replay_cold(
    env: TaskEnv,
    claimed: ClaimedWorkflowTask,
    build: Callable[[], WorkflowInstance],
) -> ColdReplay:
    """Replay the claimed run from its first event on a fresh instance from `build`.

    A history the claim brought whole is replayed at once, as it is held already.
    """
    weigh = claimed.history_after > 0  # the claim weighed only the tail it returned
    size = 0 if weigh else claimed.history_bytes
    if not weigh and claimed.history_through is None:
        instance = build()
        activation = instance.activate(claimed.history)
        return ColdReplay(instance, activation, len(claimed.history), size, paged=False)
    replay = PagedReplay(build())
    async with contextlib.aclosing(history_pages(env, claimed)) as pages:
        async for page in pages:
            if weigh:
                size += sum(len(event.event.model_dump_json()) for event in page)
            replay.feed(page)
            del page
            if replay.diverged is not None:
                break
    if replay.diverged is None:
        return ColdReplay(replay.instance, replay.finish(), replay.events, size, paged=True)
    log.info("paged_replay_diverged", reason=replay.diverged)
    replay.instance.release()
    whole: list[HistoryEvent] = []
    async for page in history_pages(env, claimed):
        whole.extend(page)
    if weigh:
        size = sum(len(event.event.model_dump_json()) for event in whole)
    instance = build()
    return ColdReplay(instance, instance.activate(whole), len(whole), size, paged=False)


async def claimed_history(env: TaskEnv, claimed: ClaimedWorkflowTask) -> list[HistoryEvent]:
    """The events the claim stands for, all of them: its first page and the rest, read.

    What a warm instance resumes from: its tail, long only after a long time away.
    """
    if claimed.history_through is None or not claimed.history:
        return claimed.history
    events = list(claimed.history)
    after = claimed.history[-1].sequence
    async for page in _read_pages(env, claimed, after, claimed.history_through):
        events.extend(page)
    return events


async def history_pages(
    env: TaskEnv, claimed: ClaimedWorkflowTask
) -> AsyncGenerator[list[HistoryEvent]]:
    """The claimed run's whole history in pages: the claim's own first, if it has it."""
    through = claimed.history_through
    if claimed.position is not None:
        through = claimed.position.run.last_event_seq
    after = 0
    if claimed.history_after == 0:  # the claim's history starts at the first event
        if claimed.history:
            yield claimed.history
            after = claimed.history[-1].sequence
        if claimed.history_through is None:
            return  # the claim brought all of it
    async for page in _read_pages(env, claimed, after, through):
        yield page


async def _read_pages(
    env: TaskEnv, claimed: ClaimedWorkflowTask, after: int, through: int | None
) -> AsyncGenerator[list[HistoryEvent]]:
    """The run's events after `after` up to `through`, one page per transaction, while leased."""
    size = history.HISTORY_PAGE_EVENTS
    while through is None or after < through:
        read = functools.partial(
            env.store.read_history_page,
            run_id=claimed.run.run_id,
            after_seq=after,
            through=through,
            page_events=size,
        )
        page = await env.while_leased(claimed.lease, read, "read_history")
        count, after = len(page), page[-1].sequence if page else after
        if page:
            yield page
        del page  # the caller let it go: this frame does not hold it through the next read
        if count < size:
            return
