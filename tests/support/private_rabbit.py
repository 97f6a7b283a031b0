"""A throwaway RabbitMQ node of a test's own, which it may stop and restart at will.

The shared broker must never be stopped: the broker-restart test runs against this one instead.
The node itself lives in bench/services.py, which the chaos soak shares.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest

from bench.rabbit_cluster import RabbitCluster
from bench.services import PrivateRabbit, ServiceError, new_private_rabbit

__all__ = ["PrivateRabbit", "private_rabbit", "started_rabbit_cluster"]


@contextlib.contextmanager
def private_rabbit() -> Iterator[PrivateRabbit]:
    """A started private node; stopped (killed if need be) and its directory removed afterwards.

    Skips the test when this machine has no RabbitMQ server binaries.
    """
    try:
        node = new_private_rabbit()
    except ServiceError as exc:
        pytest.skip(str(exc))
    try:
        node.start()
        yield node
    finally:
        node.close()


@contextlib.contextmanager
def started_rabbit_cluster(size: int = 3) -> Iterator[RabbitCluster]:
    """A started cluster of `size` private nodes; stopped and removed afterwards.

    Skips the test when this machine has no RabbitMQ server binaries.
    """
    try:
        cluster = RabbitCluster(size)
    except ServiceError as exc:
        pytest.skip(str(exc))
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.close()
