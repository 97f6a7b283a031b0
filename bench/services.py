"""Throwaway Postgres and RabbitMQ servers of one's own, which may be stopped and restarted.

The shared servers (Postgres on 5432, RabbitMQ on 5672) must never be stopped: the chaos soak and
the outage tests run against these instead. Each lives in a temporary directory, listens on
free local ports only, and is removed by `close()`.

Both need the servers' binaries: `pg_ctl`/`initdb` (on PATH or under /usr/lib/postgresql) and
RabbitMQ's scripts (`/usr/lib/rabbitmq/bin`, or `rabbitmq-server` on PATH). Neither runs as root:
as root, the processes run as the `postgres` / `rabbitmq` accounts.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

PG_BIN_ROOT = Path("/usr/lib/postgresql")
RABBIT_BIN_DIRS = (Path("/usr/lib/rabbitmq/bin"), Path("/usr/lib/rabbitmq/sbin"))
RABBIT_START_TIMEOUT = 60.0
RABBIT_STOP_TIMEOUT = 30.0


class ServiceError(RuntimeError):
    """A private server could not be started or stopped."""


def free_port() -> int:
    """A TCP port nothing listens on right now (on 127.0.0.1)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def postgres_bin_dir() -> Path | None:
    """Where pg_ctl and initdb are, or None if Postgres is not installed."""
    on_path = shutil.which("pg_ctl")
    if on_path:
        return Path(on_path).parent
    versions = sorted(PG_BIN_ROOT.glob("*/bin"), key=lambda p: int(p.parent.name))
    return versions[-1] if versions else None


def rabbit_bin_dir() -> Path | None:
    """Where RabbitMQ's own scripts (rabbitmq-server, rabbitmqctl) are, or None.

    Debian's /usr/sbin/rabbitmq-server is a wrapper that switches to the system node's account
    and directory; the scripts it wraps take the RABBITMQ_* variables as they are.
    """
    for candidate in RABBIT_BIN_DIRS:
        if (candidate / "rabbitmq-server").exists():
            return candidate
    on_path = shutil.which("rabbitmq-server")
    return Path(on_path).parent if on_path else None


def _run_as(account: str | None, cmd: list[str], *, home: Path | None = None) -> list[str]:
    """`cmd` run as `account` (root only: the servers refuse to, or should not, run as root).

    runuser resets HOME to the account's; `home` sets it again for the command.
    """
    if account is None:
        return cmd
    with_home = cmd if home is None else ["env", f"HOME={home}", *cmd]
    return ["runuser", "-u", account, "--", *with_home]


def _service_account(name: str) -> str | None:
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam(name)
    except KeyError:
        return None
    return name


def _give_to(account: str | None, *paths: Path) -> None:
    if account is None:
        return
    entry = pwd.getpwnam(account)
    for path in paths:
        os.chown(path, entry.pw_uid, entry.pw_gid)


class PrivatePostgres:
    """One Postgres server in a temporary directory, on a free local port."""

    def __init__(
        self, bin_dir: Path, root: Path, settings: Sequence[str] = (), *, initdb: bool = True
    ) -> None:
        """`initdb=False` leaves the data directory empty (for a base backup to fill)."""
        self.bin_dir = bin_dir
        self.settings = tuple(settings)  # extra `name=value` server settings
        self.data = root / "data"
        self.port = free_port()
        # Postgres refuses to run as root: run it as the `postgres` account then.
        self._user = "postgres" if os.geteuid() == 0 else None
        self.data.mkdir()
        _give_to(self._user, root, self.data)
        self._root = root
        if not initdb:
            return
        self._pg("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres", "--no-sync")

    def url(self, database: str = "burrow") -> str:
        """The URL of a database on this server."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def start(self) -> None:
        """Start the server and wait until it accepts connections."""
        options = (
            f"-p {self.port} -k {self._root} -c listen_addresses=127.0.0.1 -c fsync=off"
            " -c full_page_writes=off"
        ) + "".join(f" -c {setting}" for setting in self.settings)
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
        return subprocess.run(
            _run_as(self._user, cmd), check=check, capture_output=True, timeout=60
        )


class PrivateRabbit:
    """One RabbitMQ node (`burrow-chaos-<hex>@localhost`) in a temporary directory.

    It listens on a free port of 127.0.0.1, with no plugins, its own Erlang cookie (in its own
    HOME) and no environment file, so nothing of the system node's configuration applies. The
    node runs in the foreground of a child process of ours, so `stop()` and `close()` know
    exactly which process to end. The `guest` user works from localhost, as on any node.
    """

    def __init__(self, bin_dir: Path, root: Path) -> None:
        self.bin_dir = bin_dir
        self.root = root
        self.port = free_port()
        self.node = f"burrow-chaos-{uuid.uuid4().hex[:8]}@localhost"
        self._account = _service_account("rabbitmq")
        self._proc: subprocess.Popen[bytes] | None = None
        (root / "rabbitmq.conf").write_text(
            f"listeners.tcp.1 = 127.0.0.1:{self.port}\nlog.console = false\n"
        )
        (root / "enabled_plugins").write_text("[].\n")
        (root / "rabbitmq-env.conf").write_text("")
        for sub in ("mnesia", "log"):
            (root / sub).mkdir()
        _give_to(self._account, root, root / "mnesia", root / "log", root / "enabled_plugins")

    @property
    def url(self) -> str:
        """The AMQP URL of this node."""
        return f"amqp://guest:guest@127.0.0.1:{self.port}/"

    def _env(self) -> dict[str, str]:
        keep = {k: v for k, v in os.environ.items() if not k.startswith(("RABBITMQ_", "ERL_"))}
        return {
            **keep,
            "HOME": str(self.root),  # its own .erlang.cookie, shared by rabbitmqctl below
            "RABBITMQ_NODENAME": self.node,
            "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_DIST_PORT": str(free_port()),
            "RABBITMQ_MNESIA_BASE": str(self.root / "mnesia"),
            "RABBITMQ_LOG_BASE": str(self.root / "log"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(self.root / "enabled_plugins"),
            "RABBITMQ_CONFIG_FILE": str(self.root / "rabbitmq.conf"),
            "RABBITMQ_ADVANCED_CONFIG_FILE": str(self.root / "advanced.config"),
            "RABBITMQ_CONF_ENV_FILE": str(self.root / "rabbitmq-env.conf"),
            "RABBITMQ_PID_FILE": str(self.root / "node.pid"),
            "ERL_EPMD_ADDRESS": "127.0.0.1",
            "ERL_FLAGS": "-kernel inet_dist_use_interface {127,0,0,1}",
        }

    def _ctl(self, *args: str, timeout: float = 60.0) -> subprocess.CompletedProcess[bytes]:
        ctl = [str(self.bin_dir / "rabbitmqctl"), "-n", self.node, *args]
        cmd = _run_as(self._account, ctl, home=self.root)
        return subprocess.run(
            cmd, env=self._env(), cwd=self.root, capture_output=True, timeout=timeout, check=False
        )

    def ctl(self, *args: str, timeout: float = 60.0) -> str:
        """Run `rabbitmqctl` against this node and return its output; ServiceError if it fails."""
        done = self._ctl(*args, timeout=timeout)
        if done.returncode != 0:
            error = done.stderr.decode(errors="replace").strip()
            raise ServiceError(f"rabbitmqctl {' '.join(args)} on {self.node}: {error}")
        return done.stdout.decode(errors="replace")

    def is_running(self) -> bool:
        """Whether the node's process is alive."""
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> None:
        """Start the node and wait until it accepts AMQP connections."""
        if self.is_running():
            return
        with (self.root / "server.out").open("ab") as out:
            self._proc = subprocess.Popen(
                _run_as(self._account, [str(self.bin_dir / "rabbitmq-server")], home=self.root),
                env=self._env(),
                cwd=self.root,  # a crash dump lands here, not in the caller's directory
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + RABBIT_START_TIMEOUT
        while True:
            if self._proc.poll() is not None:
                raise ServiceError(
                    f"RabbitMQ node {self.node} exited ({self._proc.returncode}) while starting;"
                    f" see {self.root / 'server.out'} and {self.root / 'log'}"
                )
            # await_startup fails at once while the node has not registered with epmd yet; on a
            # loaded machine the CLI's own VM may outlast its wait, which is no verdict either.
            try:
                if self._ctl("await_startup", "--timeout", "10", timeout=20).returncode == 0:
                    return
            except subprocess.TimeoutExpired:
                pass
            if time.monotonic() > deadline:
                raise ServiceError(f"RabbitMQ node {self.node} did not start within 60 s")
            time.sleep(0.2)

    def stop(self) -> None:
        """Stop the node (its clients see the connection closed), and wait until it is gone."""
        proc = self._proc
        if proc is None or proc.poll() is not None:
            return
        self._ctl("stop", timeout=RABBIT_STOP_TIMEOUT)
        try:
            proc.wait(timeout=RABBIT_STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            self._kill()

    def _kill(self) -> None:
        proc = self._proc
        if proc is None or proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # the whole session: the script and beam.smp
        proc.wait(timeout=10)

    def close(self) -> None:
        """Stop the node (killing it if it does not stop) and delete its directory."""
        try:
            self.stop()
        finally:
            self._kill()
            shutil.rmtree(self.root, ignore_errors=True)


def new_private_rabbit() -> PrivateRabbit:
    """A private RabbitMQ node, not yet started; raises ServiceError if RabbitMQ is missing."""
    bin_dir = rabbit_bin_dir()
    if bin_dir is None:
        raise ServiceError("no RabbitMQ server (rabbitmq-server) on this machine")
    return PrivateRabbit(bin_dir, Path(tempfile.mkdtemp(prefix="burrow-rabbit-")))


def new_private_postgres(settings: Sequence[str] = ()) -> tuple[PrivatePostgres, Path]:
    """A private Postgres (initialised, not started) and its directory; ServiceError if missing.

    `settings` are extra `name=value` server settings, given on the command line at start.
    """
    bin_dir = postgres_bin_dir()
    if bin_dir is None:
        raise ServiceError("no Postgres server binaries (pg_ctl) on this machine")
    root = Path(tempfile.mkdtemp(prefix="burrow-pg-"))
    try:
        return PrivatePostgres(bin_dir, root, settings), root
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise


def close_postgres(server: PrivatePostgres, root: Path) -> None:
    """Stop the server at once if it runs, and delete its directory."""
    try:
        if server.is_running():
            server.stop("immediate")
    finally:
        shutil.rmtree(root, ignore_errors=True)
