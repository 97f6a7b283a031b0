"""Wakes on a real RabbitMQ: topology, publish/consume, ack discipline, prefetch, TTL, faults."""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from collections.abc import Iterable
from urllib.parse import urlsplit

import pytest
from structlog.testing import capture_logs

from burrow.broker import (
    BrokerConnection,
    BrokerUnavailable,
    Topology,
    Wake,
    WakeConsumer,
    WakeDisposition,
    WakePublisher,
)
from burrow.testing import assert_eventually
from tests.integration.broker.conftest import (
    SUBSCRIPTION,
    BrokerHarness,
    TcpProxy,
    close_connections_named,
    free_port,
    make_wake,
    rabbitmqctl,
)

UNREACHABLE_URL = "amqp://guest:guest@127.0.0.1:1/"


class Recorder:
    """An on_wake that records wakes, optionally blocks on a gate or fails for some task ids."""

    def __init__(
        self,
        *,
        gate: asyncio.Event | None = None,
        fail: Iterable[str] = (),
        disposition: WakeDisposition = WakeDisposition.DONE,
    ) -> None:
        self.wakes: list[Wake] = []
        self.in_flight = 0
        self._gate = gate
        self._fail = set(fail)
        self._disposition = disposition

    async def __call__(self, wake: Wake) -> WakeDisposition:
        self.wakes.append(wake)
        if wake.task_id in self._fail:
            raise RuntimeError(f"claim failed for {wake.task_id}")
        if self._gate is not None:
            self.in_flight += 1
            try:
                await self._gate.wait()
            finally:
                self.in_flight -= 1
        return self._disposition

    async def count(self, n: int, *, timeout: float = 10.0) -> list[Wake]:
        async def probe() -> bool:
            return len(self.wakes) >= n

        await assert_eventually(probe, timeout=timeout, message=f"{n} wakes consumed")
        return self.wakes


async def started(consumer: WakeConsumer) -> WakeConsumer:
    await consumer.start()
    assert consumer.is_consuming
    return consumer


async def test_declaring_topology_twice_is_idempotent_and_applies_queue_arguments(
    broker: BrokerHarness,
) -> None:
    await broker.declare_queue()
    await broker.declare_queue()
    recorder = Recorder()
    await started(broker.consumer(recorder))  # a third, robust declaration

    rows = json.loads(await rabbitmqctl("list_queues", "name", "arguments", "--formatter", "json"))
    arguments = {
        key: value
        for row in rows
        if row["name"] == broker.queue_name()
        for key, _, value in row["arguments"]
    }
    assert arguments == {
        "x-message-ttl": 60_000,
        "x-max-length": 10_000,
        "x-overflow": "drop-head",
        "x-expires": 6 * 3600 * 1000,
    }

    assert await broker.publisher().publish_wakes([make_wake("t-1")]) == 1
    assert await recorder.count(1) == [make_wake("t-1")]


async def test_published_wake_reaches_on_wake_with_the_same_fields(broker: BrokerHarness) -> None:
    recorder = Recorder()
    await started(broker.consumer(recorder))
    sent = [make_wake("task-7"), make_wake(None)]

    assert await broker.publisher().publish_wakes(sent) == 2

    received = await recorder.count(2)
    assert sorted(received, key=lambda w: w.task_id or "") == sorted(
        sent, key=lambda w: w.task_id or ""
    )
    assert received[0].namespace == "default" and received[0].kind == SUBSCRIPTION[3]


async def test_publish_deduplicates_within_one_call(broker: BrokerHarness) -> None:
    recorder = Recorder()
    await started(broker.consumer(recorder))

    confirmed = await broker.publisher().publish_wakes(
        [make_wake("a"), make_wake("a"), make_wake("b")]
    )

    assert confirmed == 2
    assert sorted(w.task_id or "" for w in await recorder.count(2)) == ["a", "b"]
    assert await broker.queue_depth() == 0


async def test_wake_without_a_bound_queue_is_dropped_silently(broker: BrokerHarness) -> None:
    publisher = broker.publisher()

    assert await publisher.publish_wakes([make_wake("t-1")]) == 1  # the broker confirms the drop
    assert publisher.failures == 0

    await broker.declare_queue()
    assert await broker.queue_depth() == 0


async def test_malformed_body_is_rejected_and_consumption_continues(broker: BrokerHarness) -> None:
    recorder = Recorder()
    await started(broker.consumer(recorder))

    with capture_logs() as logs:
        await broker.publish_raw(b"nope")
        await broker.publisher().publish_wakes([make_wake("after")])
        assert await recorder.count(1) == [make_wake("after")]

    assert [e["event"] for e in logs if e["event"] == "wake_rejected"] == ["wake_rejected"]
    assert await broker.queue_depth() == 0  # rejected without requeue


async def test_on_wake_raising_settles_the_delivery_and_keeps_consuming(
    broker: BrokerHarness,
) -> None:
    recorder = Recorder(fail=["boom"])
    await started(broker.consumer(recorder))
    publisher = broker.publisher()

    with capture_logs() as logs:
        await publisher.publish_wakes([make_wake("boom")])
        await recorder.count(1)
        await publisher.publish_wakes([make_wake("fine")])
        await recorder.count(2)

    assert [w.task_id for w in recorder.wakes] == ["boom", "fine"]  # never redelivered
    assert any(e["event"] == "wake_handler_failed" for e in logs)
    assert await broker.queue_depth() == 0


async def test_a_wake_handed_back_is_requeued_once_then_settled(broker: BrokerHarness) -> None:
    """C3: a worker with no free slot hands the wake back for another consumer, at most once."""
    full_worker = Recorder(disposition=WakeDisposition.HAND_BACK)
    await started(broker.consumer(full_worker))

    await broker.publisher().publish_wakes([make_wake("busy")])

    assert [w.task_id for w in await full_worker.count(2)] == ["busy", "busy"]
    await asyncio.sleep(0.3)  # a third trip would show up here
    assert len(full_worker.wakes) == 2
    assert await broker.queue_depth() == 0


async def test_a_handed_back_wake_reaches_a_consumer_with_capacity(broker: BrokerHarness) -> None:
    full_worker = Recorder(disposition=WakeDisposition.HAND_BACK)
    free_worker = Recorder()
    second = broker.extra_connection(broker.url, suffix="free")
    await second.start()
    await started(broker.consumer(full_worker))
    await started(broker.consumer(free_worker, connection=second))
    ids = {f"t-{i}" for i in range(20)}

    await broker.publisher().publish_wakes([make_wake(task_id) for task_id in ids])

    async def every_wake_settled() -> bool:
        trips = Counter(w.task_id for w in full_worker.wakes)
        claimed = {w.task_id for w in free_worker.wakes}
        return all(i in claimed or trips[i] == 2 for i in ids)

    await assert_eventually(every_wake_settled, timeout=10, message="every wake settled")
    assert len(free_worker.wakes) == len({w.task_id for w in free_worker.wakes})
    assert free_worker.wakes, "round robin hands some wakes to the consumer with capacity"
    assert await broker.queue_depth() == 0


async def test_prefetch_bounds_unacked_deliveries_and_can_change_live(
    broker: BrokerHarness,
) -> None:
    gate = asyncio.Event()
    recorder = Recorder(gate=gate)
    consumer = await started(broker.consumer(recorder, prefetch=2))

    assert await broker.publisher().publish_wakes([make_wake(f"t-{i}") for i in range(5)]) == 5

    async def in_flight(n: int) -> bool:
        return recorder.in_flight == n and await broker.queue_depth() == 5 - n

    await assert_eventually(lambda: in_flight(2), timeout=5, message="2 in flight, 3 queued")
    assert len(recorder.wakes) == 2

    await consumer.set_prefetch(4)  # channel-wide QoS: applies to the running consumer
    await assert_eventually(lambda: in_flight(4), timeout=5, message="4 in flight, 1 queued")

    gate.set()
    assert len(await recorder.count(5)) == 5
    assert await broker.queue_depth() == 0


async def test_wakes_expire_after_the_topology_ttl(broker: BrokerHarness) -> None:
    broker.topology = Topology(prefix=broker.topology.prefix, wake_ttl_seconds=0.3)
    await broker.declare_queue()

    assert await broker.publisher().publish_wakes([make_wake("stale")]) == 1

    async def expired() -> bool:
        return await broker.queue_depth() == 0

    # Nothing consumes it: only the TTL empties the queue.
    await assert_eventually(expired, timeout=5, message="the wake expired")

    recorder = Recorder()
    await started(broker.consumer(recorder))
    await broker.publisher().publish_wakes([make_wake("fresh")])
    assert await recorder.count(1) == [make_wake("fresh")]


async def test_unreachable_broker_never_raises(broker: BrokerHarness) -> None:
    connection = broker.extra_connection(UNREACHABLE_URL, suffix="down")
    await connection.start()
    assert not connection.healthy

    publisher = broker.publisher(connection=connection)
    assert await publisher.publish_wakes([make_wake("a"), make_wake("b")]) == 0
    assert publisher.failures == 2
    publisher.publish_later([make_wake("c")], 0.01)

    async def delayed_publish_failed() -> bool:
        return publisher.failures == 3

    await assert_eventually(delayed_publish_failed, timeout=5, message="delayed publish failed")

    consumer = broker.consumer(Recorder(), connection=connection)
    await consumer.start()
    assert not consumer.is_consuming
    with pytest.raises(BrokerUnavailable, match="not connected"):
        await connection.channel()
    assert not connection.healthy


async def test_late_first_connect_runs_on_reconnect_and_starts_consuming(
    broker: BrokerHarness,
) -> None:
    target = urlsplit(broker.url)
    proxy = TcpProxy(target.hostname or "127.0.0.1", target.port or 5672, port=free_port())
    connection = broker.extra_connection(
        f"amqp://guest:guest@127.0.0.1:{proxy.port}/", suffix="late"
    )
    reconnects: list[float] = []
    connection.on_reconnect(lambda: reconnects.append(time.monotonic()))
    await connection.start()
    assert not connection.healthy
    recorder = Recorder()
    consumer = broker.consumer(recorder, connection=connection)
    await consumer.start()
    assert not consumer.is_consuming

    await proxy.start()
    try:

        async def up() -> bool:
            return connection.healthy and bool(reconnects) and consumer.is_consuming

        await assert_eventually(up, timeout=10, message="late connect")
        await broker.publisher().publish_wakes([make_wake("late")])
        assert await recorder.count(1) == [make_wake("late")]
        assert len(reconnects) == 1
    finally:
        await consumer.stop()
        await connection.close()
        await proxy.close()


async def test_consumption_resumes_after_the_broker_closes_the_connection(
    broker: BrokerHarness,
) -> None:
    reconnects: list[float] = []

    async def on_reconnect() -> None:
        reconnects.append(time.monotonic())

    broker.connection.on_reconnect(on_reconnect)
    recorder = Recorder()
    await started(broker.consumer(recorder))
    publisher = broker.publisher()
    assert await publisher.publish_wakes([make_wake("before")]) == 1
    await recorder.count(1)

    assert await close_connections_named(broker.name) == 1

    async def reconnected() -> bool:
        return broker.connection.healthy and bool(reconnects)

    await assert_eventually(reconnected, timeout=15, message="reconnected")
    assert await publisher.publish_wakes([make_wake("after")]) == 1
    assert [w.task_id for w in await recorder.count(2)] == ["before", "after"]


async def test_copies_deliver_identical_duplicate_wakes(broker: BrokerHarness) -> None:
    recorder = Recorder()
    await started(broker.consumer(recorder))
    publisher: WakePublisher = broker.publisher(copies=3)

    assert await publisher.publish_wakes([make_wake("dup")]) == 3

    assert Counter(await recorder.count(3)) == Counter({make_wake("dup"): 3})
    assert await broker.queue_depth() == 0


async def test_publish_ready_publishes_due_notices_now_and_later_ones_after_their_delay(
    broker: BrokerHarness,
) -> None:
    from dataclasses import dataclass
    from datetime import UTC, datetime, timedelta

    @dataclass
    class Notice:
        namespace: str
        connection: str
        queue: str
        kind: str
        task_id: str | None
        available_at: datetime | None

    recorder = Recorder()
    await started(broker.consumer(recorder))
    namespace, connection_name, queue, kind = SUBSCRIPTION
    now = datetime.now(UTC)
    notices = [
        Notice(namespace, connection_name, queue, str(kind), "now", None),
        Notice(namespace, connection_name, queue, str(kind), "later", now + timedelta(seconds=0.4)),
    ]

    broker.publisher().publish_ready(notices)

    # Due wakes are coalesced per queue (no task hint); a delayed one keeps its hint.
    assert [w.task_id for w in await recorder.count(1)] == [None]
    assert [w.task_id for w in await recorder.count(2)] == [None, "later"]
    assert datetime.now(UTC) - now >= timedelta(seconds=0.4)


async def test_coalesced_wakes_send_one_per_queue_plus_a_trailing_one(
    broker: BrokerHarness,
) -> None:
    recorder = Recorder()
    await started(broker.consumer(recorder))
    publisher = broker.publisher()
    wake = make_wake("x")
    # Twenty requests while the first is in flight: the first goes out, then exactly one more.
    for _ in range(20):
        publisher.announce([wake])
    await publisher.flush(5.0)
    delivered = await recorder.count(2)
    assert len(delivered) == 2 and {w.task_id for w in delivered} == {None}
    await asyncio.sleep(0.3)
    assert len(recorder.wakes) == 2


async def test_close_cancels_pending_delayed_publishes(broker: BrokerHarness) -> None:
    await broker.declare_queue()
    publisher = broker.publisher()
    publisher.publish_later([make_wake("never")], 0.2)

    await publisher.close()
    await asyncio.sleep(0.4)  # past the cancelled delay

    assert await broker.queue_depth() == 0


async def test_connection_close_is_idempotent(amqp_url: str) -> None:
    connection = BrokerConnection(amqp_url, name="burrow-test-close-twice")
    await connection.start()
    assert connection.healthy
    await connection.close()
    await connection.close()
    assert not connection.healthy


async def test_a_wake_queue_with_other_arguments_is_reported_and_consuming_waits(
    broker: BrokerHarness,
) -> None:
    """A queue left by another version: a clear TopologyMismatch, never a crash (C4)."""
    broker.subscriptions.add(SUBSCRIPTION)
    async with broker.admin.channel() as channel:
        await channel.declare_queue(broker.queue_name(), durable=True)  # no wake arguments
    consumer = broker.consumer(Recorder())
    with capture_logs() as logs:
        await consumer.start()
    assert not consumer.is_consuming
    [event] = [e for e in logs if e["event"] == "wake_queue_mismatched"]
    assert "delete it" in event["error"] and broker.queue_name() in event["error"]
