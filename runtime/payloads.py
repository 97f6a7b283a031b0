"""Values ↔ `{codec, blob}` envelopes, with signature types restored on decode."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pydantic import TypeAdapter, ValidationError

from burrow import codec
from burrow.codec import Payload
from burrow.errors import InvalidArgumentsError, PayloadError
from burrow.workflow.definition import param_types, parameters


@functools.lru_cache(maxsize=512)
def _adapter(hint: Any) -> TypeAdapter[Any]:  # a type form, as TypeAdapter takes it
    return TypeAdapter(hint)


def convert(value: object, hint: object) -> Any:
    """Validate a decoded plain value into its declared type (no-op for Any)."""
    if hint is Any or hint is None or hint is type(None):
        return value
    try:
        return _adapter(hint).validate_python(value)
    except ValidationError as exc:
        raise PayloadError(f"payload does not match declared type {hint!r}: {exc}") from exc
    except TypeError:
        return value  # Unhashable or unsupported hint: leave the plain value.


def encode_args(
    args: Sequence[object], *, limit: int = codec.DEFAULT_MAX_PAYLOAD_BYTES, what: str
) -> Payload:
    """Encode an argument list as one envelope (the DW wire form) and check its size."""
    payload = codec.encode(list(args))
    codec.check_size(payload, limit=limit, what=what)
    return payload


def decode_args(payload: Mapping[str, object] | None, types: Sequence[object] = ()) -> list[Any]:
    """Decode an argument-list envelope, converting each to its parameter type when known."""
    if payload is None:
        return []
    values = codec.decode(payload)
    if values is None:
        return []
    if not isinstance(values, list):
        raise PayloadError(f"argument payload must hold a list, got {type(values).__name__}")
    return [convert(v, types[i] if i < len(types) else Any) for i, v in enumerate(values)]


def encode_value(
    value: object, *, limit: int = codec.DEFAULT_MAX_PAYLOAD_BYTES, what: str
) -> Payload:
    """Encode one value and check its size."""
    payload = codec.encode(value)
    codec.check_size(payload, limit=limit, what=what)
    return payload


def decode_value(payload: Mapping[str, object] | None, hint: object = Any) -> Any:
    """Decode one value envelope, converting to `hint`."""
    if payload is None:
        return None
    return convert(codec.decode(payload), hint)


def bind_args(
    payload: Mapping[str, object] | None,
    fn: Callable[..., object],
    *,
    handler: str,
    skip_self: bool,
) -> list[Any]:
    """Decode an argument-list envelope for `fn`, each value into its parameter's type.

    The same check runs in a client that knows the handler (before anything is written) and in
    the worker that applies a recorded signal, update or start input, so both refuse alike.

    Raises:
        InvalidArgumentsError: The payload is undecodable or not a list, there are too many or
            too few arguments, or a value does not fit its parameter's declared type; names
            the parameter at fault when there is one.
    """
    try:
        values = [] if payload is None else codec.decode(payload)
    except PayloadError as exc:
        raise InvalidArgumentsError(handler=handler, reason=f"undecodable payload: {exc}") from exc
    if values is None:
        values = []
    if not isinstance(values, list):
        reason = f"the payload must hold an argument list, got {type(values).__name__}"
        raise InvalidArgumentsError(handler=handler, reason=reason)
    params = parameters(fn, skip_self=skip_self)
    _check_arity(params, len(values), handler)
    types = param_types(fn, skip_self=skip_self)
    bound = []
    for param, value, hint in zip(params, values, types, strict=False):
        try:
            bound.append(convert(value, hint))
        except PayloadError as exc:
            reason = f"parameter {param.name!r} expects {_type_name(hint)}, got {value!r:.80}"
            raise InvalidArgumentsError(
                handler=handler, parameter=param.name, reason=reason
            ) from exc
    return bound + values[len(bound) :]  # beyond the parameters only with *args: kept as sent


_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


def _check_arity(params: Sequence[inspect.Parameter], given: int, handler: str) -> None:
    positional = [p for p in params if p.kind in _POSITIONAL]
    variadic = any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in params)
    if given > len(positional) and not variadic:
        names = ", ".join(p.name for p in positional) or "none"
        reason = f"takes {len(positional)} argument(s) ({names}), got {given}"
        raise InvalidArgumentsError(handler=handler, reason=reason)
    for param in positional[given:]:
        if param.default is inspect.Parameter.empty:
            reason = f"missing a value for parameter {param.name!r}"
            raise InvalidArgumentsError(handler=handler, parameter=param.name, reason=reason)
    for param in params:
        if (
            param.kind is inspect.Parameter.KEYWORD_ONLY
            and param.default is inspect.Parameter.empty
        ):
            reason = f"keyword-only parameter {param.name!r} cannot be sent"
            raise InvalidArgumentsError(handler=handler, parameter=param.name, reason=reason)


def _type_name(hint: object) -> str:
    return hint.__name__ if isinstance(hint, type) else repr(hint)
