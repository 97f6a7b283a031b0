"""A short chaos soak (issue 13): nothing lost or duplicated while services fail and workers die.

Private Postgres and RabbitMQ servers (bench/services.py), never the shared ones. About a
minute of wall time.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.chaos import SoakOptions, run_soak
from bench.services import postgres_bin_dir, rabbit_bin_dir

pytestmark = [pytest.mark.slow, pytest.mark.sticky_cache_set_by_test]


def test_short_soak_loses_duplicates_and_breaks_nothing(tmp_path: Path) -> None:
    """D2, D3, D4, M5, M6, W7: 240 workflows through two workers, one Postgres restart, one
    RabbitMQ restart and three worker SIGKILLs; every run closes with its expected result, no
    workflow or signal is duplicated and the store holds every invariant of bench/invariants.py,
    the ready-work one sampled every second while the soak ran as well as at its end.
    """
    if rabbit_bin_dir() is None:
        pytest.skip("no RabbitMQ server (rabbitmq-server) on this machine")
    if postgres_bin_dir() is None:
        pytest.skip("no Postgres server binaries (pg_ctl) on this machine")
    printed: list[str] = []
    options = SoakOptions(
        workflows=240,
        workers=2,
        # Starts take 40 s at 6/s; the last fault falls by 36 s, while workflows are running.
        rate=6.0,
        kill_every=(8.0, 12.0),
        rabbit_every=(15.0, 20.0),
        postgres_every=(30.0, 35.0),
        max_faults={"kill": 3, "rabbit": 1, "postgres": 1},
        down_for=(1.0, 3.0),
        # Work stuck for good stays stuck; 10 s, not the bench's 5, leaves room for a suite
        # running beside the soak on two cores (a node restart there took 13 s).
        sample_stale_after=10.0,
        timeout=180.0,
        log_dir=tmp_path,
        echo=printed.append,
    )
    report = run_soak(options)
    summary = "\n".join([*printed, *report.lines()])
    assert (report.count("postgres"), report.count("rabbit"), report.count("kill")) == (1, 1, 3), (
        summary
    )
    assert report.all_closed, summary
    invariants = report.invariants
    assert invariants is not None, summary
    assert invariants.completed_as_expected == 240, summary
    assert invariants.lost == 0, summary
    assert invariants.duplicates == 0, summary
    assert invariants.violations == 0, summary
    assert report.unexpected_worker_exits == [], summary
    # Sampled while the soak ran, not only at its end: work never waited unclaimed.
    assert report.ready_samples.checked > 0, summary
    assert report.ready_samples.stale == 0, summary


def test_soak_on_a_rabbit_cluster_survives_a_node_stop(tmp_path: Path) -> None:
    """D2, D3, M5, M6: 60 workflows on a three-node RabbitMQ cluster with quorum wake queues;
    one node stopped and started again while they run. Every workflow completes as expected
    and the store holds every invariant.
    """
    if rabbit_bin_dir() is None or postgres_bin_dir() is None:
        pytest.skip("no RabbitMQ server or Postgres binaries on this machine")
    printed: list[str] = []
    options = SoakOptions(
        workflows=60,
        rate=6.0,
        kill_every=None,
        rabbit_cluster=True,
        rabbit_node_every=(3.0, 4.0),
        max_faults={"rabbit_node": 1},
        down_for=(1.0, 2.0),
        timeout=120.0,
        log_dir=tmp_path,
        echo=printed.append,
    )
    report = run_soak(options)
    summary = "\n".join([*printed, *report.lines()])
    assert report.count("rabbit_node") == 1, summary
    assert report.ok, summary
    assert report.invariants is not None, summary
    assert report.invariants.completed_as_expected == 60, summary


@pytest.mark.parametrize("replication", ["sync", "async"])
def test_soak_through_a_postgres_failover(tmp_path: Path, replication: str) -> None:
    """D2, D3, D4, M5: 60 workflows on a primary with a streaming standby; the primary killed
    and the standby promoted while they run. Sync: nothing lost. Async: only workflows whose
    start or signal was acknowledged in the loss window may be lost; nothing is duplicated and
    every other invariant holds.
    """
    if rabbit_bin_dir() is None or postgres_bin_dir() is None:
        pytest.skip("no RabbitMQ server or Postgres binaries on this machine")
    printed: list[str] = []
    options = SoakOptions(
        workflows=60,
        rate=6.0,
        kill_every=None,
        rabbit_every=None,
        postgres_failover=True,
        replication=replication,
        failover_every=(3.0, 4.0),
        down_for=(0.5, 1.0),
        timeout=120.0,
        log_dir=tmp_path,
        echo=printed.append,
    )
    report = run_soak(options)
    summary = "\n".join([*printed, *report.lines()])
    assert report.count("failover") == 1, summary
    assert report.all_closed, summary
    invariants = report.invariants
    assert invariants is not None, summary
    assert invariants.ok, summary
    if replication == "sync":
        assert report.expected_losses == [], summary
        assert invariants.completed_as_expected == 60, summary
    else:
        assert invariants.completed_as_expected + len(report.expected_losses) == 60, summary
