"""Start `python -m ...` processes for tests, forked from a preloaded launcher (`zygote`).

`popen` and `run` take the arguments `subprocess.Popen` and `subprocess.run` would. A command of
the form `[sys.executable, "-m", module, ...]` whose environment sets the interpreter's own
start-up variables (PYTHON*) as this process does is forked from `tests.support.zygote`, started
once per test process: the child is a real process with its own pid, status, stdio and
connections, without the second of imports. Anything else, or every command when
BURROW_TEST_SPAWN=subprocess, runs through `subprocess` as before, so both paths can be compared.
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

ROOT = Path(__file__).resolve().parents[2]
MAX_MESSAGE = 1 << 20
ZYGOTE_START_TIMEOUT = 120.0
MAX_ZYGOTES = 4
# Read at import: tests/conftest.py clears BURROW_* variables around each test.
MODE = os.environ.get("BURROW_TEST_SPAWN", "zygote")
MAX_ARG_STRLEN = 128 * 1024  # Linux's limit for one argument of a new program

Stdio = IO[Any] | int | None


# Read by the interpreter itself at start-up, before any module (stdio, locale, time zone).
_STARTUP_PREFIXES = ("PYTHON", "LC_")
_STARTUP_NAMES = ("LANG", "LANGUAGE", "TZ")


def _startup_env(env: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith(_STARTUP_PREFIXES) or k in _STARTUP_NAMES}


class _Zygote:
    """A launcher started with one environment; requests are serialized under a lock.

    It serves a child only if the child's environment agrees with that one in every variable
    the interpreter or a preloaded module read at start-up (`fits`).
    """

    def __init__(self, env: Mapping[str, str]) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        with theirs:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "tests.support.zygote", str(theirs.fileno())],
                cwd=ROOT,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                pass_fds=[theirs.fileno()],
            )
        self.socket = ours
        self.lock = threading.Lock()
        self.sequence = 0
        ours.settimeout(ZYGOTE_START_TIMEOUT)
        ready = ours.recv(MAX_MESSAGE)
        if not ready:
            raise RuntimeError(f"the test launcher exited {self.process.wait()}")
        ours.settimeout(None)
        read: dict[str, str | None] = json.loads(ready)["read"]
        self.startup = _startup_env(env)
        self.read = {k: v for k, v in read.items() if not k.startswith(_STARTUP_PREFIXES)}

    def fits(self, env: Mapping[str, str]) -> bool:
        return _startup_env(env) == self.startup and all(
            env.get(k) == v for k, v in self.read.items()
        )

    def request(self, fds: Sequence[int] = (), **fields: Any) -> dict[str, Any]:
        with self.lock:
            self.sequence += 1
            fields["seq"] = self.sequence
            socket.send_fds(self.socket, [json.dumps(fields).encode()], list(fds))
            while True:
                reply: dict[str, Any] = json.loads(self.socket.recv(MAX_MESSAGE))
                # An older one was left unread by a request interrupted (a test's timeout).
                if reply.get("seq") == self.sequence:
                    break
        if "error" in reply:
            raise OSError(reply["error"])
        return reply

    def close(self) -> None:
        self.socket.close()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()


# This process's launchers, one per distinct start-up environment (in practice one or two:
# the CLI's NO_COLOR=1 is read by typer at import).
_zygotes: list[_Zygote] = []
_zygotes_lock = threading.Lock()


def _launcher(env: Mapping[str, str]) -> _Zygote:
    with _zygotes_lock:
        for zygote in list(_zygotes):
            if zygote.process.poll() is not None:
                _zygotes.remove(zygote)
            elif zygote.fits(env):
                return zygote
        if len(_zygotes) >= MAX_ZYGOTES:
            raise RuntimeError(f"over {MAX_ZYGOTES} start-up environments: {_zygotes[0].read}")
        zygote = _Zygote(env)
        atexit.register(zygote.close)
        _zygotes.append(zygote)
        return zygote


def _forkable(args: Sequence[str]) -> bool:
    if MODE == "subprocess":
        return False
    if len(args) < 3 or args[0] != sys.executable or args[1] != "-m":
        return False
    # One over the kernel's limit fails to start (E2BIG), and tests rely on that.
    return all(len(arg.encode()) < MAX_ARG_STRLEN for arg in args)


class Process:
    """The part of `subprocess.Popen` tests use, for a forked child or a plain `Popen`."""

    def __init__(
        self,
        args: Sequence[str],
        *,
        popen: subprocess.Popen[bytes] | None = None,
        zygote: _Zygote | None = None,
        child: int = 0,
        pid: int = 0,
        captured: tuple[IO[bytes], IO[bytes]] | None = None,
    ) -> None:
        self.args = list(args)
        self._popen = popen
        self._zygote = zygote
        self._child = child
        self.pid = popen.pid if popen is not None else pid
        self._captured = captured
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is not None:
            return self.returncode
        if self._popen is not None:
            self.returncode = self._popen.poll()
        else:
            assert self._zygote is not None
            status = self._zygote.request(op="poll", id=self._child)["returncode"]
            if status is not None:
                self._zygote.request(op="forget", id=self._child)
                self.returncode = status
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self._popen is not None:
            self.returncode = self._popen.wait(timeout)
            return self.returncode
        deadline = None if timeout is None else time.monotonic() + timeout
        pause = 0.002
        while (status := self.poll()) is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
            left = None if deadline is None else deadline - time.monotonic()
            time.sleep(pause if left is None else max(0.0, min(pause, left)))
            pause = min(pause * 2, 0.05)
        return status

    def send_signal(self, number: int) -> None:
        if self._popen is not None:
            self._popen.send_signal(number)
        elif self.poll() is None:
            assert self._zygote is not None
            self._zygote.request(op="signal", id=self._child, signal=int(number))

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def communicate(self, timeout: float | None = None) -> tuple[bytes, bytes]:
        """Wait, then the captured stdout and stderr (started with `capture=True`)."""
        if self._popen is not None:
            return self._popen.communicate(timeout=timeout)
        self.wait(timeout)
        assert self._captured is not None, "started without capture=True"
        out, err = self._captured
        with out, err:
            out.seek(0)
            err.seek(0)
            return out.read(), err.read()


def popen(
    args: Sequence[str],
    *,
    cwd: str | Path | None = None,
    env: Mapping[str, str] | None = None,
    stdin: Stdio = None,
    stdout: Stdio = None,
    stderr: Stdio = None,
    capture: bool = False,
) -> Process:
    """Start `args` as `subprocess.Popen` would; `capture=True` collects stdout and stderr
    for `communicate()` (to temporary files when forked, so a full pipe never blocks it)."""
    if not _forkable(args):
        if capture:
            stdout = stderr = subprocess.PIPE
        proc = subprocess.Popen(args, cwd=cwd, env=env, stdin=stdin, stdout=stdout, stderr=stderr)
        return Process(args, popen=proc)
    env = dict(os.environ if env is None else env)
    zygote = _launcher(env)
    captured = None
    if capture:
        # Closed by `communicate`, like the pipes of `Popen`.
        captured = (tempfile.TemporaryFile(), tempfile.TemporaryFile())  # noqa: SIM115
        stdout, stderr = captured
    opened: list[int] = []
    try:
        fds = [_fd(stdin, 0, opened)]
        fds.append(_fd(stdout, 1, opened))
        fds.append(fds[1] if stderr == subprocess.STDOUT else _fd(stderr, 2, opened))
        reply = zygote.request(
            fds,
            op="spawn",
            module=args[2],
            args=list(args[3:]),
            cwd=str(Path(os.getcwd() if cwd is None else cwd).resolve()),
            env=env,
        )
    finally:
        for fd in opened:
            os.close(fd)
    return Process(args, zygote=zygote, child=reply["id"], pid=reply["pid"], captured=captured)


def _fd(stream: Stdio, inherited: int, opened: list[int]) -> int:
    if stream is None:
        return inherited  # as `Popen` does: the child shares this process's descriptor
    if stream == subprocess.DEVNULL:
        fd = os.open(os.devnull, os.O_RDWR)
        opened.append(fd)
        return fd
    if isinstance(stream, int):
        if stream < 0:
            raise ValueError(f"unsupported stdio for a forked child: {stream}")
        return stream
    stream.flush()
    return stream.fileno()


def run(
    args: Sequence[str],
    *,
    cwd: str | Path | None = None,
    env: Mapping[str, str] | None = None,
    input: str | None = None,
    timeout: float | None = None,
    check: bool = False,
) -> subprocess.CompletedProcess[str]:
    """`subprocess.run(args, ..., capture_output=True, text=True)`."""
    if not _forkable(args):
        return subprocess.run(
            args,
            cwd=cwd,
            env=env,
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=check,
        )
    with tempfile.TemporaryFile() as source:
        if input is not None:
            source.write(input.encode())
            source.seek(0)
        stdin = source if input is not None else None
        proc = popen(args, cwd=cwd, env=env, stdin=stdin, capture=True)
    try:
        out, err = proc.communicate(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise
    done = subprocess.CompletedProcess(args, proc.wait(), _text(out), _text(err))
    if check:
        done.check_returncode()
    return done


def _text(data: bytes) -> str:
    """Bytes as `text=True` decodes them (universal newlines)."""
    return data.decode().replace("\r\n", "\n").replace("\r", "\n")
