"""A throwaway Postgres server of a test's own, which it may stop and restart at will.

The shared test server must never be stopped: outage tests run against this one instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from burrow.store import migrate

BIN_ROOT = Path("/usr/lib/postgresql")


def _bin_dir() -> Path | None:
    on_path = shutil.which("pg_ctl")
    if on_path:
        return Path(on_path).parent
    versions = sorted(BIN_ROOT.glob("*/bin"), key=lambda p: int(p.parent.name))
    return versions[-1] if versions else None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PrivatePostgres:
    """One Postgres server in a temporary directory, on a free local port."""

    def __init__(self, bin_dir: Path, root: Path) -> None:
        self.bin_dir = bin_dir
        self.data = root / "data"
        self.port = _free_port()
        # Postgres refuses to run as root: run it as the `postgres` account then.
        self._user = "postgres" if os.geteuid() == 0 else None
        self.data.mkdir()
        if self._user is not None:
            account = pwd.getpwnam(self._user)
            os.chown(root, account.pw_uid, account.pw_gid)
            os.chown(self.data, account.pw_uid, account.pw_gid)
        self._root = root
        self._pg("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres", "--no-sync")

    def url(self, database: str = "burrow") -> str:
        """The URL of a database on this server."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def start(self) -> None:
        """Start the server and wait until it accepts connections."""
        options = (
            f"-p {self.port} -k {self._root} -c listen_addresses=127.0.0.1 -c fsync=off"
            " -c full_page_writes=off"
        )
        log = str(self._root / "server.log")
        self._pg("pg_ctl", "-D", str(self.data), "-o", options, "-l", log, "-w", "start")

    def stop(self, mode: str = "fast", *, wait: bool = True) -> None:
        """Stop the server (`smart` waits for its clients; `fast` disconnects them)."""
        self._pg("pg_ctl", "-D", str(self.data), "-m", mode, "-w" if wait else "-W", "stop")

    def ensure_stopped(self) -> None:
        """Stop the server if it runs, and wait until a shutdown under way has finished."""
        cmd = [str(self.bin_dir / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop"]
        self._run(cmd, check=False)

    def is_running(self) -> bool:
        """Whether the server process is up."""
        cmd = [str(self.bin_dir / "pg_ctl"), "-D", str(self.data), "status"]
        return self._run(cmd, check=False).returncode == 0

    def _pg(self, program: str, *args: str) -> None:
        self._run([str(self.bin_dir / program), *args], check=True)

    def _run(self, cmd: list[str], *, check: bool) -> subprocess.CompletedProcess[bytes]:
        if self._user is not None:
            cmd = ["runuser", "-u", self._user, "--", *cmd]
        return subprocess.run(cmd, check=check, capture_output=True, timeout=60)


@contextlib.contextmanager
def private_postgres() -> Iterator[PrivatePostgres]:
    """A started, migrated private server; stopped and removed afterwards."""
    bin_dir = _bin_dir()
    if bin_dir is None:
        pytest.skip("no Postgres server binaries (pg_ctl) on this machine")
    root = Path(tempfile.mkdtemp(prefix="burrow-pg-"))
    try:
        server = PrivatePostgres(bin_dir, root)
        server.start()
        try:
            asyncio.run(migrate.upgrade(server.url(), create_database=True))
            yield server
        finally:
            if server.is_running():
                server.stop("immediate")
    finally:
        shutil.rmtree(root, ignore_errors=True)
