"""A RabbitMQ cluster (C1, C4): node URLs, the node a lost connection moves to, quorum queues."""

from __future__ import annotations

import asyncio

import pytest
from aio_pika.connection import make_url

from burrow import Settings
from burrow.broker.connection import BrokerConnection, _ClosingRobustConnection
from burrow.broker.topology import Topology
from burrow.config import split_amqp_urls
from burrow.errors import ConfigurationError

NODES = [
    "amqp://guest:secret@10.0.0.1:5672/",
    "amqp://guest:secret@10.0.0.2:5673/",
    "amqp://guest:secret@10.0.0.3:5674/",
]


def test_comma_separated_nodes_are_kept_in_order_blanks_dropped() -> None:
    value = f" {NODES[0]} ,{NODES[1]},, {NODES[2]}"
    assert split_amqp_urls(value) == tuple(NODES)
    settings = Settings.load({"BURROW_AMQP_URL": value})
    assert settings.amqp_urls == tuple(NODES)
    assert Settings.load({}).amqp_urls == ("amqp://guest:guest@127.0.0.1:5672/",)


def test_a_bad_node_is_named_by_position_without_its_password() -> None:
    value = f"{NODES[0]},amqp://guest:secret@10.0.0.2:99999/"
    with pytest.raises(ConfigurationError) as raised:
        Settings.load({"BURROW_AMQP_URL": value})
    message = str(raised.value)
    assert "node 2 (amqp://guest:***@10.0.0.2:99999/)" in message
    assert "BURROW_AMQP_URL or --amqp-url" in message
    assert "secret" not in message


@pytest.mark.parametrize("value", [",", " , ,"])
def test_a_list_of_no_node_is_refused(value: str) -> None:
    with pytest.raises(ConfigurationError, match="at least one node"):
        Settings.load({"BURROW_AMQP_URL": value})


def test_the_queue_type_is_classic_unless_set_to_quorum() -> None:
    assert Settings.load({}).wakes.queue_type == "classic"
    quorum = Settings.load({"BURROW_AMQP_QUEUE_TYPE": "quorum"})
    assert quorum.wakes.queue_type == "quorum"
    with pytest.raises(ConfigurationError, match="queue_type"):
        Settings.load({"BURROW_AMQP_QUEUE_TYPE": "stream"})


def test_quorum_wake_queues_keep_the_limits_and_refuse_a_channel_wide_prefetch() -> None:
    """C1: the same TTL, length cap and expiry; classic queues are declared as before."""
    classic, quorum = Topology(), Topology(queue_type="quorum")
    assert "x-queue-type" not in classic.queue_arguments()
    assert quorum.queue_arguments() == {**classic.queue_arguments(), "x-queue-type": "quorum"}
    assert quorum.sticky_queue_arguments() == classic.sticky_queue_arguments()
    assert classic.global_qos and not quorum.global_qos


def test_a_connection_takes_a_list_or_a_comma_separated_string() -> None:
    assert BrokerConnection(",".join(NODES), name="n")._urls == tuple(NODES)
    assert BrokerConnection(NODES, name="n")._urls == tuple(NODES)
    with pytest.raises(ValueError, match="at least one"):
        BrokerConnection(" , ", name="n")


async def test_a_lost_connection_moves_to_the_next_node_round_robin() -> None:
    """C4: each loss (or failed attempt) moves the next reconnect to the next node."""
    conn = _ClosingRobustConnection(make_url(NODES[1]))
    conn.follow_nodes(NODES, 1)
    seen = [conn.node]
    for _ in range(3):
        closing: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        closing.set_exception(ConnectionResetError("node gone"))
        await conn._on_connection_close(closing)
        seen.append(conn.node)
    assert seen == [
        "amqp://guest:***@10.0.0.2:5673/",
        "amqp://guest:***@10.0.0.3:5674/",
        "amqp://guest:***@10.0.0.1:5672/",
        "amqp://guest:***@10.0.0.2:5673/",
    ]
    await conn.close()
    closing = asyncio.get_running_loop().create_future()
    closing.set_result(None)
    await conn._on_connection_close(closing)
    assert conn.node == seen[-1]  # a closed connection stays where it was


async def test_a_single_node_connection_never_changes_its_url() -> None:
    conn = _ClosingRobustConnection(make_url(NODES[0]))
    conn.follow_nodes(NODES[:1], 0)
    closing: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    closing.set_exception(ConnectionResetError("node gone"))
    await conn._on_connection_close(closing)
    assert conn.url == make_url(NODES[0])
    await conn.close()
