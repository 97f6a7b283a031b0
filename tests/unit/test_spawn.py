"""The test launcher (`tests.support.spawn`): its children behave as processes started anew."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.support import spawn

PROBE = textwrap.dedent(
    """
    import json, os, random, sys

    line = sys.stdin.readline()
    print(json.dumps({
        "pid": os.getpid(), "cwd": os.getcwd(), "argv": sys.argv[1:], "stdin": line,
        "environ": dict(os.environ), "random": random.random(), "main": __name__,
    }))
    print("to stderr", file=sys.stderr)
    raise SystemExit(int(sys.argv[1]))
    """
)


def test_children_get_their_own_environment_stdio_status_and_random_state(tmp_path: Path) -> None:
    (tmp_path / "probe_module.py").write_text(PROBE)
    env = {**{k: v for k, v in os.environ.items() if k != "PATH"}, "ONLY": "this"}
    command = [sys.executable, "-m", "probe_module"]
    runs = [
        spawn.run([*command, str(code)], cwd=tmp_path, env=env, input=f"in {code}\n", timeout=60)
        for code in (3, 4)
    ]

    assert [run.returncode for run in runs] == [3, 4]
    assert [run.stderr for run in runs] == ["to stderr\n"] * 2
    seen = [json.loads(run.stdout) for run in runs]
    assert [s["stdin"] for s in seen] == ["in 3\n", "in 4\n"]
    assert [s["argv"] for s in seen] == [["3"], ["4"]]
    assert {s["cwd"] for s in seen} == {str(tmp_path.resolve())}
    assert {s["main"] for s in seen} == {"__main__"}
    assert seen[0]["pid"] != seen[1]["pid"]
    assert seen[0]["random"] != seen[1]["random"]
    assert seen[0]["environ"] == env  # the given one, whole: PATH dropped, ONLY added


def test_children_stop_on_signals_and_wait_times_out() -> None:
    command = [sys.executable, "-m", "http.server", "--bind", "127.0.0.1", "0"]
    proc = spawn.popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with pytest.raises(subprocess.TimeoutExpired):
        proc.wait(timeout=0.2)
    assert proc.poll() is None
    proc.kill()
    assert proc.wait(timeout=30) == -signal.SIGKILL
    proc.kill()  # gone: nothing is sent to a pid that may be another process's now
    assert proc.returncode == -signal.SIGKILL


def test_an_argument_over_the_kernel_limit_fails_to_start_as_it_would() -> None:
    with pytest.raises(OSError, match="Argument list too long"):
        spawn.run([sys.executable, "-m", "burrow", "x" * spawn.MAX_ARG_STRLEN], timeout=60)
