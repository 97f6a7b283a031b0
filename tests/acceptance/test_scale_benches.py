"""The long-history and warm-runs benchmarks' workloads, at a tiny scale, so they cannot rot.

Each bench runs its real workers on the test's database. The figures are not checked (timings
never decide a test); what is checked is that every run completed with its result, warm and
cold alike (S1, S12).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench import long_history, warm_runs

pytestmark = [pytest.mark.slow, pytest.mark.sticky_cache_set_by_test]


def _figures(path: Path) -> dict[str, Any]:
    figures: dict[str, Any] = json.loads(path.read_text())["figures"]
    return figures


def test_long_history_bench_runs_warm_and_cold(database_url: str, tmp_path: Path) -> None:
    """S1, S6, S12: a run of 40 events and one of 10, signalled with the cache and without it;
    every signal's task completes in both modes, warm tasks hit the cache, cold ones replay
    the whole history (read page by page)."""
    out = tmp_path / "long.json"

    code = long_history.main(
        ["--scale", "0.002", "--signals", "2", "--database-url", database_url, "--json", str(out)]
    )

    assert code == 0
    figures = _figures(out)
    for mode in ("warm", "cold"):
        for length in (10, 40):
            assert figures[f"samples_{mode}_{length}"] == 2
        assert figures[f"worker_bad_exits_{mode}"] == 0
    assert figures["cache_hits_warm"] >= 4
    assert figures["cache_hits_cold"] == 0


def test_warm_runs_bench_evicts_by_bytes_and_every_run_completes(
    database_url: str, tmp_path: Path
) -> None:
    """S1, S2, S6, S12: 20 runs on two workers, none cached, all cached, then under a byte cap
    that holds about six per worker; the evicted runs complete by cold replay with the same
    results as the cached ones."""
    out = tmp_path / "warm.json"

    code = warm_runs.main(
        [
            "--scale",
            "0.002",
            "--cap-mib",
            "0.08",
            "--database-url",
            database_url,
            "--json",
            str(out),
        ]
    )

    assert code == 0
    figures = _figures(out)
    for phase in ("off", "uncapped", "capped"):
        assert figures[f"completed_{phase}"] == 20
        assert figures[f"wrong_results_{phase}"] == 0
    assert figures["cached_runs_uncapped"] == 20
    assert figures["close_cache_hits_uncapped"] == 20
    assert figures["cached_runs_capped"] < 20
    assert figures["close_cold_replays_capped"] > 0
    held = figures["bench-w0_accounted_mib_capped"] + figures["bench-w1_accounted_mib_capped"]
    assert held <= 2 * figures["cap_mib_per_worker_capped"]
