"""Verify that the current workflow code replays recorded runs: from the database or from files.

`verify_recent_runs(app, workflow_type=..., limit=...)` reads the newest runs of a workflow type
and their histories (reads only: nothing is written, no wake is sent, no activity runs);
`verify_history_files(app, paths)` reads history export files (`burrow workflow history
--export`), so a CI job can check a new build against histories exported from production.
Both return a `VerifyReport`: OK or the first divergence per run (burrow.replay.verify).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path

from burrow.app import App
from burrow.config import Settings
from burrow.protocol.events import HistoryEvent
from burrow.protocol.shapes import JsonDict
from burrow.replay.bundle import BundleError, export_bundle, read_bundle
from burrow.replay.verify import RecordedRun, RunVerdict, Verdict, VerifyReport, verify_run
from burrow.store import Store
from burrow.store.models import RunInfo
from burrow.worker.workflow_tasks import run_context

__all__ = [
    "VerifyReport",
    "bundle_of",
    "history_files",
    "verify_history_files",
    "verify_recent_runs",
    "verify_recorded",
]


def verify_recorded(app: App, runs: Iterable[RecordedRun]) -> VerifyReport:
    """Replay each recorded run against the app's workflows."""
    return VerifyReport(runs=[verify_run(run, workflows=app.workflows) for run in runs])


async def verify_recent_runs(
    app: App,
    *,
    workflow_type: str,
    limit: int,
    settings: Settings | None = None,
    store: Store | None = None,
) -> VerifyReport:
    """Verify the newest `limit` runs of `workflow_type` in the settings' namespace."""
    settings = settings or Settings.load()
    own = store is None
    store = store or Store.connect(settings.database_url, pool_size=1)
    try:
        runs = await store.list_workflows(
            namespace=settings.namespace, workflow_type=workflow_type, limit=limit
        )
        recorded = [
            RecordedRun(
                run=run_context(run),
                events=await store.read_history(run_id=run.run_id),
                source=f"run {run.run_id}",
            )
            for run in runs
        ]
    finally:
        if own:
            await store.close()
    return verify_recorded(app, recorded)


def verify_history_files(app: App, paths: Sequence[Path]) -> VerifyReport:
    """Verify history export files; a directory stands for its `*.json` files.

    A file that cannot be read as a history export is reported as an error for that file.
    """
    verdicts: list[RunVerdict] = []
    for path in history_files(paths):
        try:
            recorded = read_bundle(json.loads(path.read_text(encoding="utf-8")), source=str(path))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, BundleError) as exc:
            verdicts.append(_unreadable(path, exc))
            continue
        verdicts.append(verify_run(recorded, workflows=app.workflows))
    return VerifyReport(runs=verdicts)


def history_files(paths: Sequence[Path]) -> list[Path]:
    """The files named, with each directory replaced by its `*.json` files in name order."""
    found: list[Path] = []
    for path in paths:
        found.extend(sorted(path.glob("*.json")) if path.is_dir() else [path])
    return found


def _unreadable(path: Path, exc: Exception) -> RunVerdict:
    message = str(exc) if isinstance(exc, BundleError) else f"{path}: {exc}"
    return RunVerdict(
        source=str(path),
        workflow_id="",
        run_id="",
        workflow_type="",
        verdict=Verdict.ERROR,
        error=message,
    )


def bundle_of(run: RunInfo, events: Sequence[HistoryEvent]) -> JsonDict:
    """The history export of a stored run (what `burrow workflow history --export` writes)."""
    return export_bundle(
        run=run_context(run),
        events=events,
        status=str(run.status),
        started_at=run.created_at,
        closed_at=run.closed_at,
    )
