"""The typed API under mypy: sample code type-checks, wrong arguments and results do not."""

from __future__ import annotations

import re
from pathlib import Path

from mypy import api

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
MARK = "# expected error"


def _mypy(path: Path) -> tuple[str, int]:
    stdout, stderr, status = api.run(
        ["--config-file", str(ROOT / "pyproject.toml"), "--no-error-summary", str(path)]
    )
    return stdout + stderr, status


def _error_lines(output: str, path: Path) -> set[int]:
    pattern = re.compile(rf"^(?:.*/)?{re.escape(path.name)}:(\d+): error:", re.MULTILINE)
    return {int(n) for n in pattern.findall(output)}


def test_sample_authoring_code_passes_strict_mypy() -> None:
    output, status = _mypy(HERE / "authoring.py")
    assert status == 0, output


def test_wrong_arguments_and_result_types_are_mypy_errors() -> None:
    path = HERE / "wrong_calls.py"
    lines = path.read_text().splitlines()
    expected = {n for n, line in enumerate(lines, start=1) if line.endswith(MARK)}
    assert len(expected) >= 10
    output, _ = _mypy(path)
    assert _error_lines(output, path) == expected, output
