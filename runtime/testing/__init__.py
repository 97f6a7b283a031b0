"""Testing helpers: a pytest plugin on real servers (C5), waiting without sleeps, typed history.

Lazy (PEP 562) like the `burrow` root: pytest loads the plugin in every session of a project that
installs burrow, so importing this package loads no database or AMQP library.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from burrow.testing.helpers import assert_eventually, replay_history
    from burrow.testing.runs import RunHistory, read_history, wait_for_result

__all__ = ["RunHistory", "assert_eventually", "read_history", "replay_history", "wait_for_result"]

_LAZY = {
    "assert_eventually": "burrow.testing.helpers",
    "replay_history": "burrow.testing.helpers",
    "RunHistory": "burrow.testing.runs",
    "read_history": "burrow.testing.runs",
    "wait_for_result": "burrow.testing.runs",
}

if not TYPE_CHECKING:  # type checkers see the imports above; unknown names stay errors

    def __getattr__(name: str) -> object:
        module = _LAZY.get(name)
        if module is None:
            raise AttributeError(f"module 'burrow.testing' has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        globals()[name] = value
        return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
