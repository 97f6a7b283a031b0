"""CPU seconds of the Postgres and RabbitMQ servers a benchmark talks to, per workflow.

The servers are found by the port each listens on (Linux /proc), so other servers on the machine
(throwaway test instances, say) do not count.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from urllib.parse import urlsplit

from sqlalchemy.engine import make_url

from bench.throughput import env_settings


def listening_pid(port: int) -> int | None:
    """The process holding the listening TCP socket on `port` (Linux /proc; None if unseen)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(f"socket:[{fields[9]}]")
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if any(os.readlink(fd) in inodes for fd in (proc / "fd").iterdir()):
                return int(proc.name)
        except OSError:
            continue  # exited meanwhile, or not ours to read
    return None


def stat_fields(pid: int | str) -> list[str]:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def tree_cpu(root: int) -> float:
    """CPU seconds of `root` with its reaped children, plus its live children.

    A backend that exits in the window moves from "live child" to the parent's cutime, so
    nothing is lost as long as the parent reaps it (Postgres' postmaster does).
    """
    fields = stat_fields(root)
    ticks = sum(int(fields[i]) for i in (11, 12, 13, 14))
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or proc.name == str(root):
            continue
        try:
            child = stat_fields(proc.name)
        except OSError:
            continue
        if int(child[1]) == root:
            ticks += int(child[11]) + int(child[12])
    return ticks / os.sysconf("SC_CLK_TCK")


class Servers:
    """CPU of exactly the Postgres and RabbitMQ servers the bench talks to.

    Found by the port each listens on, so other servers on the machine (throwaway test
    instances, say) do not count. A server that restarts mid-window reads as NaN.
    """

    def __init__(self, ports: dict[str, int]) -> None:
        self.roots = {name: listening_pid(port) for name, port in ports.items()}

    def cpu(self) -> dict[str, float]:
        out = {}
        for name, root in self.roots.items():
            try:
                out[name] = math.nan if root is None else tree_cpu(root)
            except OSError:
                out[name] = math.nan
        return out

    def since(self, before: dict[str, float]) -> dict[str, float]:
        after = self.cpu()
        return {name: after[name] - before[name] for name in after}


def server_ports(database_url: str) -> dict[str, int]:
    amqp = urlsplit(env_settings().amqp_urls[0])
    return {
        "postgres": make_url(database_url).port or 5432,
        "broker": amqp.port or 5672,
    }


def per_workflow(seconds: float, n: int) -> float:
    return seconds * 1000 / n


def server_figures(servers: dict[str, float], n: int) -> dict[str, float]:
    return {f"{name}_cpu_ms_per_workflow": per_workflow(servers[name], n) for name in servers}
