"""A private Postgres primary with a streaming standby, to kill the one and promote the other.

`PgCluster(mode)` starts a primary (bench/services.py `PrivatePostgres`, `wal_level=replica`)
and a hot standby cloned from it by `pg_basebackup -R`, on ports of their own:

- `sync`:  the primary names the standby in `synchronous_standby_names` with
           `synchronous_commit=on` (set once the standby streams, after the clone, so the
           promoted standby does not inherit it): a commit is acknowledged once the standby
           flushed it.
- `async`: the standby streams behind the primary; the commits it has not received when the
           primary dies are lost.

`url()` is the libpq failover URL Burrow takes (`postgresql://postgres@127.0.0.1:P,127.0.0.1:S/
burrow?target_session_attrs=read-write`). `kill_primary()` SIGKILLs the primary's postmaster and
every backend (a machine gone, as the clients see it: their connections drop); `promote()` runs
`pg_ctl promote`. `pause_replication()` stops the primary's WAL sender (SIGSTOP), which opens a
window of commits the standby has not got; `lost_commits()` counts them afterwards in the dead
primary's WAL (pg_waldump).

`python -m bench.pg_cluster --measure` runs bench/pg_failover.py: workers under load, the
primary killed, the standby promoted; it prints the time to recovery and the commits lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import asyncpg

from bench.services import PrivatePostgres, ServiceError, _run_as, postgres_bin_dir
from burrow.store import migrate

Mode = Literal["sync", "async"]
MODES: tuple[Mode, ...] = ("sync", "async")
STANDBY_NAME = "burrow_standby"
STREAMING_TIMEOUT = 60.0
PRIMARY_SETTINGS = ("wal_level=replica", "max_wal_senders=4", "wal_keep_size=256")
STANDBY_SETTINGS = (f"cluster_name={STANDBY_NAME}", "hot_standby=on")


class PgCluster:
    """A primary and one streaming standby in a temporary directory; `close()` removes both."""

    def __init__(self, mode: Mode) -> None:
        bin_dir = postgres_bin_dir()
        if bin_dir is None:
            raise ServiceError("no Postgres server binaries (pg_ctl) on this machine")
        if mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
        self.mode = mode
        bin_dir = (bin_dir / "pg_ctl").resolve().parent  # pg_basebackup, pg_waldump live there
        self.bin_dir = bin_dir
        self.root = Path(tempfile.mkdtemp(prefix="burrow-pgcluster-"))
        os.chmod(self.root, 0o755)  # the postgres account reaches its subdirectories
        for name in ("primary", "standby"):
            (self.root / name).mkdir()
        try:
            self.primary = PrivatePostgres(bin_dir, self.root / "primary", PRIMARY_SETTINGS)
            self.standby = PrivatePostgres(
                bin_dir, self.root / "standby", STANDBY_SETTINGS, initdb=False
            )
        except BaseException:
            shutil.rmtree(self.root, ignore_errors=True)
            raise
        self.promoted = False

    def url(self, database: str = "burrow") -> str:
        """The failover URL: the primary first, the standby second, writable sessions only."""
        hosts = f"127.0.0.1:{self.primary.port},127.0.0.1:{self.standby.port}"
        return f"postgresql://postgres@{hosts}/{database}?target_session_attrs=read-write"

    def start(self) -> None:
        """Start the primary, migrate `burrow` on it, clone the standby, wait until it streams."""
        self.primary.start()
        asyncio.run(migrate.upgrade(self.primary.url(), create_database=True))
        self._clone_standby()
        self.standby.start()
        asyncio.run(self._replicate())

    async def _replicate(self) -> None:
        if self.mode == "sync":  # only now: until the standby streams, every commit would wait
            await self._on_primary(
                f"ALTER SYSTEM SET synchronous_standby_names = '{STANDBY_NAME}'",
                "ALTER SYSTEM SET synchronous_commit = on",
                "SELECT pg_reload_conf()",
            )
        await self.wait_streaming()

    async def _on_primary(self, *statements: str) -> None:
        conn = await asyncpg.connect(self.primary.url("postgres"))
        try:
            for statement in statements:
                await conn.execute(statement)
        finally:
            await conn.close()

    def _clone_standby(self) -> None:
        cmd = [str(self.bin_dir / "pg_basebackup"), "-h", "127.0.0.1"]
        cmd += ["-p", str(self.primary.port), "-U", "postgres", "-D", str(self.standby.data)]
        cmd += ["-R", "-X", "stream", "--no-sync", "--checkpoint=fast"]
        done = self.standby._run(cmd, check=False)
        if done.returncode != 0:
            raise ServiceError(f"pg_basebackup failed: {done.stderr.decode(errors='replace')}")
        os.chmod(self.standby.data, 0o700)  # Postgres refuses a data directory others can read

    async def wait_streaming(self, timeout: float = STREAMING_TIMEOUT) -> None:
        """Wait until the standby streams from the primary (as the synchronous one in sync mode)."""
        want = "sync" if self.mode == "sync" else "async"
        deadline = time.monotonic() + timeout
        while True:
            conn = await asyncpg.connect(self.primary.url("postgres"))
            try:
                row = await conn.fetchrow(
                    "SELECT state, sync_state FROM pg_stat_replication WHERE application_name = $1",
                    STANDBY_NAME,
                )
            finally:
                await conn.close()
            if row is not None and row["state"] == "streaming" and row["sync_state"] == want:
                return
            if time.monotonic() > deadline:
                raise ServiceError(f"standby not streaming ({want}) within {timeout:g} s: {row}")
            await asyncio.sleep(0.1)

    async def _walsender_pid(self) -> int:
        conn = await asyncpg.connect(self.primary.url("postgres"))
        try:
            pid = await conn.fetchval(
                "SELECT pid FROM pg_stat_replication WHERE application_name = $1", STANDBY_NAME
            )
        finally:
            await conn.close()
        if pid is None:
            raise ServiceError("the primary has no WAL sender for the standby")
        return int(pid)

    async def pause_replication(self) -> None:
        """Stop the primary's WAL sender: from now on the standby receives nothing.

        In sync mode commits then wait (their acknowledgement needs the standby); in async mode
        they are acknowledged and exist on the primary only.
        """
        os.kill(await self._walsender_pid(), signal.SIGSTOP)

    def primary_pids(self) -> list[int]:
        """The primary's postmaster and its children (backends, WAL sender, background workers)."""
        pid_file = self.primary.data / "postmaster.pid"
        try:
            postmaster = int(pid_file.read_text().split("\n", 1)[0])
        except (OSError, ValueError):
            return []
        return [postmaster, *_children(postmaster)]

    def kill_primary(self) -> float:
        """SIGKILL the primary and all its processes; the time.time() of the kill."""
        pids = self.primary_pids()
        if not pids:
            raise ServiceError("the primary is not running")
        killed_at = time.time()
        for pid in pids:  # the postmaster first: it must not restart its children
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
            time.sleep(0.01)
        return killed_at

    async def standby_replay_lsn(self) -> str:
        """The standby's last replayed WAL position (where the promoted timeline branches)."""
        conn = await asyncpg.connect(self.standby.url("postgres"))
        try:
            return str(await conn.fetchval("SELECT pg_last_wal_replay_lsn()::text"))
        finally:
            await conn.close()

    def promote(self) -> float:
        """Promote the standby and wait until it takes writes; the time.time() it did."""
        pg_ctl = [str(self.bin_dir / "pg_ctl"), "-D", str(self.standby.data), "-w", "promote"]
        self.standby._run(pg_ctl, check=True)
        self.promoted = True
        return time.time()

    def lost_commits(self, branch_lsn: str) -> int:
        """Transactions the dead primary committed after `branch_lsn` (the standby never saw).

        Read from the primary's WAL with pg_waldump, which stops at the end of the valid WAL.
        """
        cmd = [str(self.bin_dir / "pg_waldump"), "-p", str(self.primary.data / "pg_wal")]
        cmd += ["-s", branch_lsn, "-t", "1", "-r", "Transaction"]
        done = subprocess.run(
            _run_as("postgres" if os.geteuid() == 0 else None, cmd),
            capture_output=True,
            timeout=60,
            check=False,
        )
        return sum(1 for line in done.stdout.decode().splitlines() if "COMMIT" in line)

    def close(self) -> None:
        """Stop whatever still runs, at once, and delete both data directories."""
        try:
            if self.primary_pids():
                with contextlib.suppress(ServiceError):
                    self.kill_primary()
            if self.standby.is_running():
                self.standby.stop("immediate")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[-1].split()
        if len(fields) > 1 and int(fields[1]) == pid:
            found.append(int(entry.name))
    return found


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


@contextlib.contextmanager
def pg_cluster(mode: Mode) -> Iterator[PgCluster]:
    """A started cluster, removed afterwards."""
    cluster = PgCluster(mode)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.close()


if __name__ == "__main__":
    from bench.pg_failover import main

    sys.exit(main())
