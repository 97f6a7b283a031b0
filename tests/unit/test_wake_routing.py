"""Where a wake goes (C1, S3): its sticky worker's queue when it has one, else the shared queue."""

from __future__ import annotations

import json

from burrow.broker import TaskKind, Topology, Wake

WAKE = Wake(namespace="ns", queue="orders", kind=TaskKind.WORKFLOW, task_id="t-1")


def test_a_wake_without_a_sticky_target_encodes_as_before() -> None:
    assert json.loads(WAKE.encode()) == {
        "namespace": "ns",
        "connection": "default",
        "queue": "orders",
        "kind": "workflow",
        "task_id": "t-1",
    }


def test_a_sticky_target_survives_encoding() -> None:
    wake = WAKE.model_copy(update={"sticky_worker_id": "host-1-ab12"})
    assert Wake.decode(wake.encode()) == wake


def test_sticky_wakes_route_to_their_worker_queue_and_others_to_the_shared_queue() -> None:
    topology = Topology(prefix="p")
    sticky = WAKE.model_copy(update={"sticky_worker_id": "host-1-ab12"})

    assert topology.sticky_queue_name("host-1-ab12") == "p.sticky.host-1-ab12"
    assert topology.routing_key(sticky) == "p.sticky.host-1-ab12"
    assert topology.routing_key(WAKE) == "p.wake.ns.default.orders.workflow"


def test_sticky_queues_share_the_wake_limits_but_never_expire_on_a_timer() -> None:
    """The queue dies with its worker's connection (exclusive), so it needs no x-expires."""
    topology = Topology(prefix="p", wake_ttl_seconds=2.5)
    shared = topology.queue_arguments()
    sticky = topology.sticky_queue_arguments()

    assert "x-expires" not in sticky
    assert sticky == {k: v for k, v in shared.items() if k != "x-expires"}
    assert sticky["x-message-ttl"] == 2500
