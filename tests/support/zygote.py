"""A preloaded launcher for the `python -m ...` processes tests start (`tests.support.spawn`).

Each `burrow` process a test starts spends about a second of CPU importing the same modules
(typer, pydantic models, SQLAlchemy, asyncpg, aio-pika, FastAPI). This process imports them
once, stays single-threaded, and forks one child per request. A child is a real process (own
pid, exit status, signals, stdio and sockets): it takes the requested environment (replacing
`os.environ` whole), working directory, stdio descriptors and arguments, then runs the module
as `python -m` would (`runpy`, `__main__`) and ends through the interpreter's own shutdown.

The preloaded modules start no thread or event loop (checked before serving). The variables they
read at import (typer reads NO_COLOR, for one) are recorded and reported when ready: the caller
sends a child here only if its environment agrees on them, else starts another launcher. The
test apps (`tests.apps.*`) are not preloaded, so each child imports them fresh. Children share
the launcher's str hash seed (PYTHONHASHSEED), unlike processes started anew.

Protocol: JSON requests on a SOCK_SEQPACKET socket (its descriptor the one argument), stdio
descriptors passed with SCM_RIGHTS. `spawn` answers with an id and pid; `poll` with the exit
status, or None while the child runs; `signal` sends a signal to a child not yet reaped (so never
to a reused pid). At EOF every live child is killed.
"""

from __future__ import annotations

import gc
import importlib
import json
import os
import runpy
import signal
import socket
import sys
import threading
from typing import Any

PRELOAD = (
    "burrow",
    "burrow.cli",
    "burrow.client",
    "burrow.worker.worker",
    "burrow.server.asgi_app",
    "burrow.matching",
    "burrow.replay_verify",
    "burrow.store",
    "burrow.broker",
    "sqlalchemy.ext.asyncio",
    "sqlalchemy.dialects.postgresql.asyncpg",
    "asyncpg",
    "aio_pika",
    "uvloop",
    "uvicorn",
    "fastapi",
    "alembic.command",
    "durable_workflow",
    "httpx",
)
MAX_MESSAGE = 1 << 20


class RecordingEnviron(os._Environ):  # type: ignore[type-arg]
    """`os.environ` that notes every variable read (and whether it was listed whole)."""

    def __init__(self, environ: Any) -> None:
        super().__init__(
            environ._data,
            environ.encodekey,
            environ.decodekey,
            environ.encodevalue,
            environ.decodevalue,
        )
        self.read: dict[str, str | None] = {}
        self.listed: set[str] = set()

    def __getitem__(self, key: str) -> str:
        try:
            value: str | None = super().__getitem__(key)
        except KeyError:
            value = None
        if _caller() not in RELIST:  # a module copied whole is copied again in each child
            self.read[key] = value
        if value is None:
            raise KeyError(key)
        return value

    def __iter__(self) -> Any:
        self.listed.add(_caller())
        return super().__iter__()


def _caller() -> str:
    """The module reading `os.environ`, past the mapping's own methods."""
    frame = sys._getframe(2)
    while frame.f_back is not None and frame.f_globals.get("__name__") in _MAPPING_MODULES:
        frame = frame.f_back
    return str(frame.f_globals.get("__name__", "?"))


_MAPPING_MODULES = ("collections.abc", "_collections_abc", "os", __name__)


def preload() -> dict[str, str | None]:
    """Import the heavy modules with the collector paused, then freeze them (as `burrow.launch`).

    Returns the environment variables read while importing (None: read while unset): a child
    whose environment differs in one of them must start from scratch instead.
    """
    environ = os.environ
    recording = RecordingEnviron(environ)
    os.environ = recording  # noqa: B003 (the same variables, read through a recorder)
    gc.disable()
    try:
        for name in PRELOAD:
            importlib.import_module(name)
    finally:
        os.environ = environ  # noqa: B003
        gc.freeze()
        gc.enable()
    if unknown := recording.listed - set(RELIST):
        raise RuntimeError(f"preloaded modules copy the whole environment at import: {unknown}")
    threads = os.listdir("/proc/self/task")
    if threading.active_count() != 1 or len(threads) != 1:
        raise RuntimeError(f"preloading started threads ({len(threads)}): cannot fork safely")
    return recording.read


def relist_wsgiref() -> None:
    """`wsgiref.handlers` copies the environment at import, for the CGI variables it serves."""
    import wsgiref.handlers

    wsgiref.handlers.BaseHandler.os_environ = wsgiref.handlers.read_environ()


# Modules that copy the whole environment at import, and how a child copies its own.
RELIST = {"wsgiref.handlers": relist_wsgiref}


class ChildStart(BaseException):
    """Raised in a forked child: unwinds the serving loop, so the child runs from `main`."""

    def __init__(self, request: dict[str, Any], fds: list[int]) -> None:
        super().__init__()
        self.request = request
        self.fds = fds


def run_child(request: dict[str, Any], fds: list[int], control: socket.socket) -> None:
    """In the forked child: take the request's stdio, environment and argv, then run the module.

    It runs as `__main__` from the top of this process, so what it raises or exits with ends the
    process as it would end `python -m`: the interpreter shuts down as usual (threads joined,
    atexit run, open files flushed), prints an uncaught exception, exits by SIGINT on an uncaught
    KeyboardInterrupt.
    """
    control.close()
    for target, fd in enumerate(fds):
        os.dup2(fd, target)  # dup2 makes the copy inheritable, as a new process's stdio
    for fd in fds:
        if fd > 2:
            os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    for name, relist in RELIST.items():
        if name in sys.modules:
            relist()
    sys.argv = ["-m", *request["args"]]
    sys.path[0] = request["cwd"]  # `python -m` puts the working directory first
    module = request["module"]
    sys.modules.pop(module, None)  # preloaded, it would run a second copy (and runpy warns)
    runpy.run_module(module, run_name="__main__", alter_sys=True)


class Zygote:
    """Forks children on request and keeps their statuses until asked."""

    def __init__(self, control: socket.socket) -> None:
        self.control = control
        self.next_id = 0
        self.live: dict[int, int] = {}  # id -> pid, not reaped yet
        self.pids: dict[int, int] = {}  # pid -> id
        self.statuses: dict[int, int] = {}  # id -> returncode

    def reap(self) -> None:
        while self.live:
            try:
                pid, wait_status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            child = self.pids.pop(pid, None)
            if child is not None:
                del self.live[child]
                self.statuses[child] = os.waitstatus_to_exitcode(wait_status)

    def spawn(self, request: dict[str, Any], fds: list[int]) -> dict[str, Any]:
        try:
            pid = os.fork()
        except OSError:
            for fd in fds:
                os.close(fd)
            raise
        if pid == 0:
            raise ChildStart(request, fds)
        for fd in fds:
            os.close(fd)
        self.next_id += 1
        self.live[self.next_id] = pid
        self.pids[pid] = self.next_id
        return {"id": self.next_id, "pid": pid}

    def poll(self, child: int) -> dict[str, Any]:
        return {"returncode": self.statuses.get(child)}

    def send_signal(self, child: int, number: int) -> dict[str, Any]:
        pid = self.live.get(child)
        if pid is not None:
            os.kill(pid, number)
        return {"sent": pid is not None}

    def forget(self, child: int) -> dict[str, Any]:
        self.statuses.pop(child, None)
        return {}

    def serve(self) -> None:
        while True:
            message, fds, _flags, _address = socket.recv_fds(self.control, MAX_MESSAGE, 3)
            if not message:
                break
            request = json.loads(message)
            self.reap()
            op = request["op"]
            try:
                if op == "spawn":
                    reply = self.spawn(request, fds)
                elif op == "poll":
                    reply = self.poll(request["id"])
                elif op == "signal":
                    reply = self.send_signal(request["id"], request["signal"])
                elif op == "forget":
                    reply = self.forget(request["id"])
                else:
                    reply = {"error": f"unknown request {op!r}"}
            except OSError as error:
                reply = {"error": repr(error)}
            reply["seq"] = request.get("seq")
            self.control.send(json.dumps(reply).encode())
        for pid in self.live.values():
            os.kill(pid, signal.SIGKILL)
        for pid in self.live.values():
            os.waitpid(pid, 0)


def main() -> None:
    """Preload, then serve the socket whose descriptor is the argument until it closes."""
    control = socket.socket(fileno=int(sys.argv[1]))
    read = preload()
    control.send(json.dumps({"read": read}).encode())
    try:
        Zygote(control).serve()
    except ChildStart as start:
        request, fds = start.request, start.fds
    else:
        return
    run_child(request, fds, control)  # outside the handler: no exception context to inherit


if __name__ == "__main__":
    main()
