"""D1: every call the workflow sandbox guards raises WorkflowSandboxError inside workflow code.

Each case names the call as the error does and the deterministic alternative it points to. The
cases must list every guard (test_sandbox_allowed.py checks the list against the guard table).
"""

from __future__ import annotations

import concurrent.futures
import datetime
import io
import multiprocessing
import os
import pathlib
import random
import secrets
import socket
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest

from burrow.errors import WorkflowSandboxError
from burrow.replay.sandbox import sandboxed

NOW = "use workflow.now()"
RANDOM = "use workflow.random()"
UUID = "use workflow.uuid4()"
ENTROPY = "use workflow.random() or workflow.uuid4()"
ACTIVITY = "move it into an activity"
RANDOM_STATE = random.getstate()


@dataclass
class Env:
    """What a case may touch: a scratch directory and a socket made outside the sandbox."""

    tmp: pathlib.Path
    sock: socket.socket


@dataclass(frozen=True)
class Case:
    call: str  # as the error names it
    instead: str
    run: Callable[[Env], object]


# Process cases name a program that does not exist, and a fork's child exits at once: should a
# guard not fire (or outside the sandbox), nothing replaces or duplicates the test process.
MISSING = "/nonexistent/burrow-sandbox-test"


def _reaped(pid: int) -> int:
    if pid == 0:
        os._exit(0)
    return os.waitpid(pid, 0)[1]


def _thread_pool(env: Env) -> object:
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(int).result()


CASES: list[Case] = [
    Case("time.time()", NOW, lambda e: time.time()),
    Case("time.time_ns()", NOW, lambda e: time.time_ns()),
    Case("time.monotonic()", NOW, lambda e: time.monotonic()),
    Case("time.monotonic_ns()", NOW, lambda e: time.monotonic_ns()),
    Case("time.perf_counter()", NOW, lambda e: time.perf_counter()),
    Case("time.perf_counter_ns()", NOW, lambda e: time.perf_counter_ns()),
    Case("time.process_time()", NOW, lambda e: time.process_time()),
    Case("time.process_time_ns()", NOW, lambda e: time.process_time_ns()),
    Case("time.sleep()", "use await workflow.sleep()", lambda e: time.sleep(0)),
    Case("time.localtime() without a time", NOW, lambda e: time.localtime()),
    Case("time.gmtime() without a time", NOW, lambda e: time.gmtime(None)),
    Case("time.ctime() without a time", NOW, lambda e: time.ctime()),
    Case("time.asctime() without a time", NOW, lambda e: time.asctime()),
    Case("time.strftime() without a time", NOW, lambda e: time.strftime("%Y")),
    Case("datetime.datetime.now()", NOW, lambda e: datetime.datetime.now()),
    Case("datetime.datetime.now()", NOW, lambda e: datetime.datetime.now(datetime.UTC)),
    Case("datetime.datetime.utcnow()", NOW, lambda e: datetime.datetime.utcnow()),
    Case("datetime.datetime.today()", NOW, lambda e: datetime.datetime.today()),
    Case("datetime.date.today()", NOW, lambda e: datetime.date.today()),
    Case("random.random()", RANDOM, lambda e: random.random()),
    Case("random.uniform()", RANDOM, lambda e: random.uniform(0, 1)),
    Case("random.randint()", RANDOM, lambda e: random.randint(1, 2)),
    Case("random.randrange()", RANDOM, lambda e: random.randrange(3)),
    Case("random.choice()", RANDOM, lambda e: random.choice([1, 2])),
    Case("random.choices()", RANDOM, lambda e: random.choices([1, 2], k=2)),
    Case("random.sample()", RANDOM, lambda e: random.sample([1, 2], 1)),
    Case("random.shuffle()", RANDOM, lambda e: random.shuffle([1, 2])),
    Case("random.getrandbits()", RANDOM, lambda e: random.getrandbits(8)),
    Case("random.randbytes()", RANDOM, lambda e: random.randbytes(2)),
    Case("random.gauss()", RANDOM, lambda e: random.gauss()),
    Case("random.normalvariate()", RANDOM, lambda e: random.normalvariate()),
    Case("random.lognormvariate()", RANDOM, lambda e: random.lognormvariate(0, 1)),
    Case("random.expovariate()", RANDOM, lambda e: random.expovariate(1)),
    Case("random.vonmisesvariate()", RANDOM, lambda e: random.vonmisesvariate(0, 1)),
    Case("random.gammavariate()", RANDOM, lambda e: random.gammavariate(1, 1)),
    Case("random.betavariate()", RANDOM, lambda e: random.betavariate(1, 1)),
    Case("random.paretovariate()", RANDOM, lambda e: random.paretovariate(1)),
    Case("random.weibullvariate()", RANDOM, lambda e: random.weibullvariate(1, 1)),
    Case("random.triangular()", RANDOM, lambda e: random.triangular()),
    Case("random.seed()", RANDOM, lambda e: random.seed()),
    Case("random.getstate()", RANDOM, lambda e: random.getstate()),
    Case("random.setstate()", RANDOM, lambda e: random.setstate(RANDOM_STATE)),
    Case("random.Random() without a seed", RANDOM, lambda e: random.Random()),
    Case("random.Random() without a seed", RANDOM, lambda e: random.Random(None)),
    Case("random.SystemRandom.random()", RANDOM, lambda e: random.SystemRandom().random()),
    Case(
        "random.SystemRandom.getrandbits()",
        RANDOM,
        lambda e: random.SystemRandom().randint(1, 9),
    ),
    Case("random.SystemRandom.randbytes()", RANDOM, lambda e: random.SystemRandom().randbytes(2)),
    Case("secrets.choice()", ENTROPY, lambda e: secrets.choice([1, 2])),
    Case("secrets.randbelow()", ENTROPY, lambda e: secrets.randbelow(9)),
    Case("secrets.randbits()", ENTROPY, lambda e: secrets.randbits(8)),
    Case("secrets.token_bytes()", ENTROPY, lambda e: secrets.token_bytes()),
    Case("secrets.token_hex()", ENTROPY, lambda e: secrets.token_hex()),
    Case("secrets.token_urlsafe()", ENTROPY, lambda e: secrets.token_urlsafe()),
    Case("os.urandom()", ENTROPY, lambda e: os.urandom(4)),
    Case("os.getrandom()", ENTROPY, lambda e: os.getrandom(4)),
    Case("uuid.uuid1()", UUID, lambda e: uuid.uuid1()),
    Case("uuid.uuid4()", UUID, lambda e: uuid.uuid4()),
    Case("socket.socket()", ACTIVITY, lambda e: socket.socket().close()),
    Case("socket.socket.connect()", ACTIVITY, lambda e: e.sock.connect(("127.0.0.1", 9))),
    Case("socket.socket.connect_ex()", ACTIVITY, lambda e: e.sock.connect_ex(("127.0.0.1", 9))),
    Case(
        "socket.create_connection()",
        ACTIVITY,
        lambda e: socket.create_connection(("127.0.0.1", 9), timeout=0.5),
    ),
    Case("socket.getaddrinfo()", ACTIVITY, lambda e: socket.getaddrinfo("localhost", 80)),
    Case("socket.gethostbyname()", ACTIVITY, lambda e: socket.gethostbyname("localhost")),
    Case("subprocess.run()", ACTIVITY, lambda e: subprocess.run(["true"], check=False)),
    Case("subprocess.call()", ACTIVITY, lambda e: subprocess.call(["true"])),
    Case("subprocess.check_call()", ACTIVITY, lambda e: subprocess.check_call(["true"])),
    Case("subprocess.check_output()", ACTIVITY, lambda e: subprocess.check_output(["true"])),
    Case("subprocess.getoutput()", ACTIVITY, lambda e: subprocess.getoutput("true")),
    Case("subprocess.getstatusoutput()", ACTIVITY, lambda e: subprocess.getstatusoutput("true")),
    Case("subprocess.Popen()", ACTIVITY, lambda e: subprocess.Popen(["true"]).wait()),
    Case("os.system()", ACTIVITY, lambda e: os.system("true")),
    Case("os.popen()", ACTIVITY, lambda e: os.popen("true").close()),
    Case("os.fork()", ACTIVITY, lambda e: _reaped(os.fork())),
    Case("os.forkpty()", ACTIVITY, lambda e: _reaped(os.forkpty()[0])),
    Case("os.fork()", ACTIVITY, lambda e: os.spawnv(os.P_WAIT, MISSING, ["x"])),
    Case("os.execv()", ACTIVITY, lambda e: os.execv(MISSING, ["x"])),
    Case("os.execve()", ACTIVITY, lambda e: os.execve(MISSING, ["x"], {})),
    Case("os.execv()", ACTIVITY, lambda e: os.execl(MISSING, "x")),
    Case("os.posix_spawn()", ACTIVITY, lambda e: os.posix_spawn(MISSING, ["x"], {})),
    Case("os.posix_spawnp()", ACTIVITY, lambda e: os.posix_spawnp(MISSING, ["x"], {})),
    Case(
        "multiprocessing.Process.start()",
        ACTIVITY,
        lambda e: multiprocessing.get_context("spawn").Process(target=int).start(),
    ),
    Case("open() for writing", ACTIVITY, lambda e: open(e.tmp / "w", "w").close()),
    Case("open() for writing", ACTIVITY, lambda e: open(e.tmp / "a", mode="ab").close()),
    Case("open() for writing", ACTIVITY, lambda e: open(e.tmp / "x", "x").close()),
    Case("open() for writing", ACTIVITY, lambda e: open(e.tmp / "r", "r+").close()),
    Case("io.open() for writing", ACTIVITY, lambda e: io.open(e.tmp / "io", "w").close()),  # noqa: UP020
    Case("io.open() for writing", ACTIVITY, lambda e: (e.tmp / "p").write_text("x")),
    Case(
        "os.open() for writing",
        ACTIVITY,
        lambda e: os.close(os.open(e.tmp / "os", os.O_WRONLY | os.O_CREAT)),
    ),
    Case("io.open() for writing", ACTIVITY, lambda e: tempfile.TemporaryFile(dir=e.tmp).close()),
    Case(
        "threading.Thread.start()",
        ACTIVITY,
        lambda e: threading.Thread(target=int).start(),
    ),
    Case("threading.Thread.start()", ACTIVITY, _thread_pool),
]


@pytest.fixture
def env(tmp_path: pathlib.Path) -> Iterator[Env]:
    (tmp_path / "r").write_text("")
    with socket.socket() as sock:
        yield Env(tmp=tmp_path, sock=sock)


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c.call}-{CASES.index(c)}")
def test_guarded_call_raises_inside_workflow_code(case: Case, env: Env) -> None:
    """D1: the call raises the typed error naming it and the deterministic alternative."""
    if case.call == "os.getrandom()" and not hasattr(os, "getrandom"):
        pytest.skip("os.getrandom exists on Linux only")
    with sandboxed(), pytest.raises(WorkflowSandboxError) as raised:
        case.run(env)
    message = str(raised.value)
    assert message.startswith(f"{case.call} inside workflow code is not replay-safe"), message
    assert case.instead in message
