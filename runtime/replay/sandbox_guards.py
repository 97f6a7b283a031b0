"""What the workflow sandbox guards (D1): the calls that read clocks, entropy or the outside world.

Each guard wraps the real function once, for the whole process, and asks `sandbox_policy.check`
on every call, which raises only inside an activation (see there). The README's "The workflow
sandbox" section lists exactly these; keep the two in step.
"""

from __future__ import annotations

import builtins
import ctypes
import datetime
import functools
import gc
import io
import multiprocessing.process
import os
import random
import secrets
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from burrow.replay.sandbox_policy import check, state

NOW = "use workflow.now()"
RANDOM = "use workflow.random()"
UUID = "use workflow.uuid4()"
ENTROPY = "use workflow.random() or workflow.uuid4(), or an activity for secrets"
SLEEP = "use await workflow.sleep()"
ACTIVITY = "move it into an activity"

# open() and os.open() are refused only when they may change a file: reading stays allowed, as
# imports, tracebacks (linecache) and packaged templates read files.
_WRITE_MODES = frozenset("wax+")
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC


def _opens_for_writing(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> bool:
    mode = args[1] if len(args) > 1 else kwargs.get("mode", "r")
    return isinstance(mode, str) and not _WRITE_MODES.isdisjoint(mode)


def _os_opens_for_writing(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> bool:
    flags = args[1] if len(args) > 1 else kwargs.get("flags", os.O_RDONLY)
    return isinstance(flags, int) and bool(flags & _WRITE_FLAGS)


def _reads_the_clock(position: int, keyword: str) -> Callable[..., bool]:
    """time.localtime() and friends read the clock only when given no time of their own."""

    def refuses(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> bool:
        given = args[position] if len(args) > position else kwargs.get(keyword)
        return given is None

    return refuses


def _seeds_from_entropy(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> bool:
    """random.Random() without a seed seeds itself from the OS (args[0] is the instance).

    SystemRandom ignores seeds; its draws are guarded one by one instead.
    """
    if isinstance(args[0], random.SystemRandom):
        return False
    seed = args[1] if len(args) > 1 else kwargs.get("x")
    return seed is None


Refuses = Callable[[tuple[Any, ...], Mapping[str, Any]], bool]


@dataclass(frozen=True, slots=True)
class Guard:
    """One attribute of a module or class replaced by a wrapper that asks the policy first."""

    owner: ModuleType | type
    name: str
    instead: str
    call: str = ""  # how the error names it; "<owner>.<name>()" when empty
    refuses: Refuses | None = None  # only calls it accepts are checked; every call when None

    def described(self) -> str:
        """How the error names the call, e.g. "time.time()"."""
        if self.call:
            return self.call
        owner = self.owner.__name__ if isinstance(self.owner, ModuleType) else _named(self.owner)
        return f"{owner}.{self.name}()"


def _named(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


# Every module-level function of `random`: each is a method of its one shared generator.
_RANDOM_FUNCTIONS = sorted(
    name
    for name in random.__all__
    if getattr(getattr(random, name), "__self__", None) is getattr(random, "_inst", None)
)

GUARDS: tuple[Guard, ...] = (
    *(
        Guard(time, name, NOW)
        for name in (
            "time",
            "time_ns",
            "monotonic",
            "monotonic_ns",
            "perf_counter",
            "perf_counter_ns",
            "process_time",
            "process_time_ns",
        )
    ),
    *(
        Guard(
            time, name, NOW, call=f"time.{name}() without a time", refuses=_reads_the_clock(0, "")
        )
        for name in ("localtime", "gmtime", "ctime", "asctime")
    ),
    Guard(
        time,
        "strftime",
        NOW,
        call="time.strftime() without a time",
        refuses=_reads_the_clock(1, ""),
    ),
    Guard(time, "sleep", SLEEP),
    Guard(
        random.Random,
        "__init__",
        RANDOM,
        call="random.Random() without a seed",
        refuses=_seeds_from_entropy,
    ),
    *(Guard(random, name, RANDOM) for name in _RANDOM_FUNCTIONS),
    *(Guard(random.SystemRandom, name, RANDOM) for name in ("random", "getrandbits", "randbytes")),
    *(
        Guard(secrets, name, ENTROPY)
        for name in ("choice", "randbelow", "randbits", "token_bytes", "token_hex", "token_urlsafe")
    ),
    *(Guard(os, name, ENTROPY) for name in ("urandom", "getrandom") if hasattr(os, name)),
    Guard(uuid, "uuid1", UUID),
    Guard(uuid, "uuid4", UUID),
    Guard(socket.socket, "__init__", ACTIVITY, call="socket.socket()"),
    Guard(socket.socket, "connect", ACTIVITY, call="socket.socket.connect()"),
    Guard(socket.socket, "connect_ex", ACTIVITY, call="socket.socket.connect_ex()"),
    *(
        Guard(socket, name, ACTIVITY)
        for name in ("create_connection", "getaddrinfo", "gethostbyname")
    ),
    *(
        Guard(subprocess, name, ACTIVITY)
        for name in ("run", "call", "check_call", "check_output", "getoutput", "getstatusoutput")
    ),
    Guard(subprocess.Popen, "__init__", ACTIVITY, call="subprocess.Popen()"),
    Guard(os, "system", ACTIVITY),
    Guard(os, "popen", ACTIVITY),
    # os's exec*, spawn* and popen-style helpers all end in one of these (looked up at call time).
    *(
        Guard(os, name, ACTIVITY)
        for name in ("fork", "forkpty", "execv", "execve", "posix_spawn", "posix_spawnp")
        if hasattr(os, name)
    ),
    Guard(
        multiprocessing.process.BaseProcess,
        "start",
        ACTIVITY,
        call="multiprocessing.Process.start()",
    ),
    Guard(builtins, "open", ACTIVITY, call="open() for writing", refuses=_opens_for_writing),
    Guard(io, "open", ACTIVITY, call="io.open() for writing", refuses=_opens_for_writing),
    Guard(os, "open", ACTIVITY, call="os.open() for writing", refuses=_os_opens_for_writing),
    Guard(threading.Thread, "start", ACTIVITY, call="threading.Thread.start()"),
)

# datetime's types are C types that refuse new attributes; their clock readers are replaced in
# the types' own dictionaries instead, so `from datetime import datetime` is guarded too.
CLOCK_METHODS: tuple[tuple[type, str], ...] = (
    (datetime.datetime, "now"),
    (datetime.datetime, "utcnow"),
    (datetime.date, "today"),  # datetime.datetime.today() inherits it
)

# The module-level originals and their wrappers, to rebind names workflow modules imported
# directly (`from time import time`) before the guards were installed.
_WRAPPERS: dict[object, object] = {}
_lock = threading.Lock()
_installed = False


def _wrap(guard: Guard, original: Callable[..., Any]) -> Callable[..., Any]:
    call, instead, refuses = guard.described(), guard.instead, guard.refuses

    @functools.wraps(original)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        if state.active and (refuses is None or refuses(args, kwargs)):
            check(call, instead)
        return original(*args, **kwargs)

    return guarded


def _guard_clock(cls: type, name: str) -> None:
    original = cls.__dict__[name]  # a classmethod descriptor of the C type
    on_cls = original.__get__(None, cls)  # bound once: most calls are on the type itself

    def guarded(owner: type, *args: Any, **kwargs: Any) -> Any:
        if state.active:
            check(f"{_named(owner)}.{name}()", NOW)
        if owner is cls:
            return on_cls(*args, **kwargs)
        return original.__get__(None, owner)(*args, **kwargs)

    guarded.__wrapped__ = original  # type: ignore[attr-defined]
    guarded.__name__ = guarded.__qualname__ = name
    guarded.__doc__ = original.__doc__
    namespace = gc.get_referents(cls.__dict__)[0]  # the dict behind the read-only mappingproxy
    namespace[name] = classmethod(guarded)
    ctypes.pythonapi.PyType_Modified(ctypes.py_object(cls))  # drop cached attribute lookups


def install() -> None:
    """Wrap every guarded call (once per process; the wrappers are inert outside activations)."""
    global _installed
    with _lock:
        if _installed:
            return
        for guard in GUARDS:
            original = getattr(guard.owner, guard.name)
            wrapper = _wrap(guard, original)
            setattr(guard.owner, guard.name, wrapper)
            if isinstance(guard.owner, ModuleType):
                _WRAPPERS.setdefault(original, wrapper)
        for cls, name in CLOCK_METHODS:
            _guard_clock(cls, name)
        _installed = True


def rebind(module_name: str) -> bool:
    """Point a module's names for guarded functions at the wrappers (`from time import time`).

    False when no such module is loaded.
    """
    module = sys.modules.get(module_name)
    if module is None:
        return False
    namespace = vars(module)
    for key, value in list(namespace.items()):
        try:
            wrapper = _WRAPPERS.get(value)
        except Exception:  # unhashable or odd values are not guarded functions
            continue
        if wrapper is not None:
            namespace[key] = wrapper
    return True
