"""A Postgres primary with a streaming standby of a test's own (bench/pg_cluster.py)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest

from bench.pg_cluster import Mode, PgCluster
from bench.services import ServiceError


@contextlib.contextmanager
def started_pg_cluster(mode: Mode) -> Iterator[PgCluster]:
    """A started primary and standby replicating in `mode`; removed afterwards.

    Skips the test on a machine without the Postgres server binaries.
    """
    try:
        cluster = PgCluster(mode)
    except ServiceError as exc:
        pytest.skip(str(exc))
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.close()
