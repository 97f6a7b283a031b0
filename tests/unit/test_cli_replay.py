"""`burrow replay verify` argument checks, and files verified with no database at all (C5)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from burrow.cli import app
from burrow.replay.bundle import export_bundle
from burrow.replay.instance import RunContext
from burrow.testing.helpers import history_from_json

WIDE = {"COLUMNS": "250", "NO_COLOR": "1"}
UNREACHABLE = "postgresql://postgres@127.0.0.1:1/never_used"  # reaching it fails, never hangs
GOLDEN = Path(__file__).parent / "replay" / "histories" / "order_flow.json"


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(
        app, ["replay", "verify", *args, "--database-url", UNREACHABLE], env=WIDE
    )
    return result.exit_code, result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--app", "nowhere"), "must look like MODULE:ATTR"),
        (("--app", "tests.apps.flows:app"), "give --workflow-type T (database) or --file PATH"),
        (("--app", "tests.apps.flows:app", "--workflow-type", "Nope"), "'Nope' is not in"),
        (("--app", "tests.apps.flows:app", "--file", "/no/such.json"), "no such file"),
    ],
)
def test_bad_usage_exits_2_before_reading_anything(args: tuple[str, ...], message: str) -> None:
    code, out = invoke(*args)
    assert code == 2, out
    assert message in " ".join(out.split())


def test_exported_file_verifies_without_a_database(tmp_path: Path) -> None:
    doc = json.loads(GOLDEN.read_text())
    run = RunContext(**doc["run"])
    events = history_from_json(doc["events"], run.run_id)
    bundle = export_bundle(
        run=run, events=events, status="completed", started_at=events[0].recorded_at, closed_at=None
    )
    path = tmp_path / "order.json"
    path.write_text(json.dumps(bundle))
    code, out = invoke("--app", "tests.apps.flows:app", "--file", str(path))
    assert code == 0, out
    assert "1 run(s): 1 ok, 0 diverged, 0 error" in out
    code, out = invoke("--app", "tests.apps.flows:app", "--file", str(tmp_path), "--json")
    assert code == 0, out
    assert json.loads(out)["summary"] == {"ok": 1, "diverged": 0, "error": 0}
    code, out = invoke("--app", "burrow.demo:app", "--file", str(path))
    assert code == 1, out
    assert "workflow type 'OrderFlow' is not in the app" in " ".join(out.split())
