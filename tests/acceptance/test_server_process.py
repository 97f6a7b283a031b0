"""`burrow server` as a real process exits 0 after a graceful stop (issue 27 item 7, SPEC M4b).

Process managers (systemd, Kubernetes, Compose) read exit 143 or 130 as a crash; a server that
shut down as asked exits 0, as `burrow worker` and `burrow matching` do.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.support import spawn

pytestmark = [pytest.mark.slow, pytest.mark.sticky_cache_set_by_test]

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def started_server(database_url: str, log: Path) -> spawn.Process:
    """`burrow server` on a free port, once its health check answers `serving`."""
    port = free_port()
    with log.open("wb") as out:
        proc = spawn.popen(
            [sys.executable, "-m", "burrow", "server", "--host", "127.0.0.1", "--port", str(port)],
            cwd=ROOT,
            env={**os.environ, "BURROW_DATABASE_URL": database_url},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    deadline = time.monotonic() + 30
    while True:
        assert proc.poll() is None, log.read_text()
        try:
            health = httpx.get(f"http://127.0.0.1:{port}/api/health")
            assert health.json()["status"] == "serving", health.text
            return proc
        except httpx.TransportError:
            assert time.monotonic() < deadline, "burrow server did not start"
            time.sleep(0.1)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_server_exits_0_after_a_graceful_stop_m4b(
    database_url: str, tmp_path: Path, signum: signal.Signals
) -> None:
    """M4b: SIGTERM or SIGINT stops the server gracefully, and the process exits 0."""
    log = tmp_path / "server.log"
    proc = started_server(database_url, log)
    proc.send_signal(signum)
    try:
        code = proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert code == 0, log.read_text()
