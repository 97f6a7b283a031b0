"""The README's Example, run as a newcomer runs it: a script of its own (issue 33 items 1 and 4)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from burrow import Settings

ROOT = Path(__file__).resolve().parents[2]


def readme_example() -> str:
    """The first Python block under the README's `## Example` heading."""
    section = (ROOT / "README.md").read_text().split("\n## Example\n", 1)[1]
    block = re.search(r"```python\n(.*?)\n```", section, re.DOTALL)
    assert block is not None, "README.md: no python block under ## Example"
    return block.group(1)


@pytest.mark.sticky_cache_set_by_test
def test_readme_example_prints_only_its_result_on_every_run(
    burrow_env: Settings, tmp_path: Path
) -> None:
    """Issue 33 items 1 and 4: stdout is the result line, stderr is empty, and a second run
    behaves as the first (a new order, a new workflow id), at the default log level."""
    script = tmp_path / "example.py"
    script.write_text(readme_example())
    outputs = []
    for _ in range(2):
        proc = subprocess.run(
            [sys.executable, str(script)],
            cwd=tmp_path,
            env=dict(os.environ),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert proc.returncode == 0, proc.stderr
        assert proc.stderr == ""
        assert re.fullmatch(r"charged 4200 for order-[0-9a-f]{8}\n", proc.stdout), proc.stdout
        outputs.append(proc.stdout)
    assert outputs[0] != outputs[1]
