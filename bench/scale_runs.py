"""What bench/long_history.py and bench/warm_runs.py share: the database, memory and CPU split.

Both run on a private Postgres of their own (bench/services.py, fsync off) unless given
`--database-url`, so that the Postgres CPU figure is this bench's alone. RabbitMQ is the shared
one, under an AMQP prefix of the bench's own; its CPU counts other people's traffic too.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy.engine import URL

from bench.server_cpu import Servers, server_ports
from bench.services import close_postgres, new_private_postgres
from bench.sticky_runs import Workers
from bench.throughput import check_bench_url, cpu_seconds

MIB = 1024 * 1024
RSS_SAMPLE_SECONDS = 0.02


@contextlib.contextmanager
def bench_database(database_url: str | None, name: str) -> Iterator[URL]:
    """The bench database's URL: on a private Postgres started here, or on `database_url`."""
    if database_url is not None:
        yield check_bench_url(database_url)
        return
    server, root = new_private_postgres()
    try:
        server.start()
        yield check_bench_url(server.url(name))
    finally:
        close_postgres(server, root)


def status_kib(pid: int, key: str) -> int:
    """A `/proc/<pid>/status` figure in KiB (VmRSS: resident now, VmHWM: resident at peak)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{key}:"):
            return int(line.split()[1])
    raise KeyError(key)


def rss_bytes(pid: int) -> int:
    return status_kib(pid, "VmRSS") * 1024


def worker_pids(workers: Workers) -> list[int]:
    return [proc.pid for _, proc, _ in workers]


@dataclass
class RssPeak:
    """The highest resident size each process reached while sampled (every 20 ms)."""

    pids: Sequence[int]
    start: dict[int, int] = field(default_factory=dict)
    peak: dict[int, int] = field(default_factory=dict)
    _task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> RssPeak:
        self.start = {pid: rss_bytes(pid) for pid in self.pids}
        self.peak = dict(self.start)
        self._task = asyncio.create_task(self._sample())
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        self._read()

    def _read(self) -> None:
        for pid in self.pids:
            with contextlib.suppress(OSError):
                self.peak[pid] = max(self.peak[pid], rss_bytes(pid))

    async def _sample(self) -> None:
        while True:
            self._read()
            await asyncio.sleep(RSS_SAMPLE_SECONDS)

    def peak_mib(self) -> float:
        return max(self.peak.values()) / MIB

    def growth_mib(self) -> float:
        return max(self.peak[pid] - self.start[pid] for pid in self.pids) / MIB


class CpuSplit:
    """CPU of the workers, this process (the client), Postgres and RabbitMQ over a window."""

    def __init__(self, workers: Workers, database: URL) -> None:
        plain = database.render_as_string(hide_password=False)
        self.workers = workers
        self.servers = Servers(server_ports(plain))
        self.worker0 = cpu_seconds(workers)
        self.client0 = time.process_time()
        self.servers0 = self.servers.cpu()

    def per(self, n: float) -> dict[str, float]:
        """CPU ms per `n` since this split was made: worker, client, postgres, broker."""
        servers = self.servers.since(self.servers0)
        seconds = {
            "worker": cpu_seconds(self.workers) - self.worker0,
            "client": time.process_time() - self.client0,
            **servers,
        }
        return {name: s * 1000 / n for name, s in seconds.items()}
