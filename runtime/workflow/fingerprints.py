"""Workflow definition fingerprints (S8): which code a run was started against.

A fingerprint is `sha256:<hex>` of the definition's name, run method, handlers and the syntax
tree of its class source, so it is the same in every process that loads the same code (comments
and formatting aside) and changes when the class does. It is recorded in `WorkflowStarted`; a
worker whose fingerprint for the type differs from the run's replays it cold (S8).
"""

from __future__ import annotations

import ast
import functools
import hashlib
import inspect
import json
import textwrap

from burrow.workflow.definition import WorkflowDefinition, get_definition

PREFIX = "sha256:"


def fingerprint(definition: WorkflowDefinition) -> str:
    """The stable fingerprint of a workflow class definition."""
    return _of_class(definition.cls, definition.name)


@functools.cache
def _of_class(cls: type, name: str) -> str:
    definition = get_definition(cls)
    shape = json.dumps(
        {
            "name": name,
            "run": definition.run_method,
            "signals": definition.signals,
            "queries": definition.queries,
            "updates": definition.updates,
            "code": _code_of(cls),
        },
        sort_keys=True,
    )
    return PREFIX + hashlib.sha256(shape.encode()).hexdigest()


def _code_of(cls: type) -> list[str]:
    """The code of the class and the classes it inherits from (an override changes it)."""
    return [_code_of_one(klass) for klass in cls.__mro__ if klass is not object]


def _code_of_one(cls: type) -> str:
    """The class's syntax tree, or its functions' bytecode where the source cannot be read."""
    try:
        return ast.dump(ast.parse(textwrap.dedent(inspect.getsource(cls))))
    except (OSError, TypeError, SyntaxError):
        functions = sorted(
            (key, value.__code__.co_code.hex())
            for key, value in vars(cls).items()
            if inspect.isfunction(value)
        )
        return json.dumps(functions)


def changed(recorded: str | None, current: str | None) -> bool:
    """Whether a run recorded with `recorded` meets different code (either unknown: no)."""
    return recorded is not None and current is not None and recorded != current
