"""`burrow replay verify`: replay recorded runs against the current code (D1, D4).

From the database (`--workflow-type T --limit N`: the newest N runs of T) or from history export
files (`--file a.json --file exports/`), so a CI job can gate a deploy. Exit code 0 when every run
replays, 1 on any divergence or unreplayable run, 2 on bad usage.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from burrow.app import App
from burrow.cli import output
from burrow.cli.options import DatabaseUrlOption, JsonOption, NamespaceOption, build_settings
from burrow.cli.worker import TargetError, load_app
from burrow.replay.verify import Verdict, VerifyReport
from burrow.replay_verify import history_files, verify_history_files, verify_recent_runs

app = typer.Typer(
    name="replay",
    help="Check that the current workflow code replays recorded histories.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
)

AppOption = Annotated[
    str,
    typer.Option(
        "--app",
        envvar="BURROW_APP",
        help="The App with the workflow code to check, as MODULE:ATTR (e.g. myapp:app).",
        show_default=False,
    ),
]
WorkflowTypeOption = Annotated[
    str | None,
    typer.Option(
        "--workflow-type",
        help="Verify the newest runs of this workflow type in the database (with --file: only"
        " the files of this type).",
    ),
]
LimitOption = Annotated[
    int, typer.Option("--limit", min=1, help="With --workflow-type: at most N runs, newest first.")
]
FileOption = Annotated[
    list[Path] | None,
    typer.Option(
        "--file",
        help="A history export file or a directory of them (repeatable); replaces the database.",
        show_default=False,
    ),
]


@app.command("verify")
def verify(
    target: AppOption,
    workflow_type: WorkflowTypeOption = None,
    limit: LimitOption = 20,
    files: FileOption = None,
    as_json: JsonOption = False,
    database_url: DatabaseUrlOption = None,
    namespace: NamespaceOption = None,
) -> None:
    """Replay recorded runs with no side effects; report OK or the first divergence of each."""
    burrow_app = _load(target)
    if files:
        report = _from_files(burrow_app, files, workflow_type)
    elif workflow_type is None:
        output.fail("give --workflow-type T (database) or --file PATH", code=output.EXIT_USAGE)
    else:
        if workflow_type not in burrow_app.workflows:
            output.fail(
                f"workflow type {workflow_type!r} is not in {target}", code=output.EXIT_USAGE
            )
        settings = build_settings(database_url=database_url, namespace=namespace)
        report = output.run(
            verify_recent_runs(
                burrow_app, workflow_type=workflow_type, limit=limit, settings=settings
            )
        )
        if not report.runs:
            output.fail(
                f"no recorded runs of {workflow_type!r} in namespace {settings.namespace!r}"
            )
    if as_json:
        output.emit_json(report.to_json())
    else:
        print_report(report)
    if not report.ok:
        raise typer.Exit(output.EXIT_ERROR)


def _load(target: str) -> App:
    try:
        return load_app(target)
    except TargetError as exc:
        output.fail(str(exc), code=output.EXIT_USAGE)


def _from_files(burrow_app: App, files: list[Path], workflow_type: str | None) -> VerifyReport:
    missing = [str(path) for path in files if not path.exists()]
    if missing:
        output.fail(f"no such file or directory: {', '.join(missing)}", code=output.EXIT_USAGE)
    if not history_files(files):
        output.fail("no history export files (*.json) found", code=output.EXIT_USAGE)
    report = verify_history_files(burrow_app, files)
    if workflow_type is not None:  # narrow the files to one type, as for the database
        kept = [r for r in report.runs if r.workflow_type in (workflow_type, "")]
        report = VerifyReport(runs=kept)
    return report


def print_report(report: VerifyReport) -> None:
    """A table with one row per run, then a summary line."""
    table = Table("run", "workflow_type", "verdict", "detail")
    for run in report.runs:
        detail = run.error or (run.divergence.describe() if run.divergence else "")
        style = "green" if run.verdict is Verdict.OK else "red"
        table.add_row(
            escape(run.source if run.run_id == "" else f"{run.workflow_id} {run.run_id}"),
            escape(run.workflow_type),
            f"[{style}]{run.verdict.value}[/]",
            escape(detail),
        )
    out = output.stdout()
    out.print(table)
    counts = ", ".join(f"{report.count(v)} {v.value}" for v in Verdict)
    out.print(f"{len(report.runs)} run(s): {counts}")
