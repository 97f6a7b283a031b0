"""bind_args: the one check a client (before writing) and a worker (before applying) share.

Issue 13 items 1 and 2: arguments that do not fit a handler are named by parameter.
"""

from __future__ import annotations

from typing import Any

import pytest

from burrow import InvalidArgumentsError, PayloadError, codec, payloads


class Handlers:
    def pair(self, count: int, label: str = "x") -> None: ...

    def many(self, first: int, *rest: Any) -> None: ...

    def keyword(self, *, flag: bool) -> None: ...


def _bind(fn: Any, value: Any) -> list[Any]:
    return payloads.bind_args(codec.encode(value), fn, handler="h", skip_self=True)


def test_values_are_converted_to_their_parameter_types_and_defaults_may_be_left_out() -> None:
    assert _bind(Handlers.pair, ["3"]) == [3]
    assert _bind(Handlers.pair, [3, "y"]) == [3, "y"]
    assert _bind(Handlers.many, [1, "a", 2]) == [1, "a", 2]


@pytest.mark.parametrize(
    ("fn", "value", "parameter", "reason"),
    [
        (Handlers.pair, [1, "y", 3], "", "takes 2 argument(s) (count, label), got 3"),
        (Handlers.pair, [], "count", "missing a value for parameter 'count'"),
        (Handlers.pair, ["seven"], "count", "parameter 'count' expects int, got 'seven'"),
        (Handlers.keyword, [], "flag", "keyword-only parameter 'flag' cannot be sent"),
        (Handlers.pair, {"count": 1}, "", "the payload must hold an argument list, got dict"),
    ],
)
def test_arguments_that_do_not_fit_name_the_parameter(
    fn: Any, value: Any, parameter: str, reason: str
) -> None:
    with pytest.raises(InvalidArgumentsError) as caught:
        _bind(fn, value)
    assert caught.value.parameter == parameter
    assert caught.value.reason == reason
    assert isinstance(caught.value, PayloadError)


def test_an_undecodable_payload_is_invalid_arguments_too() -> None:
    bad = {"codec": "avro", "blob": "not-base64!!"}
    with pytest.raises(InvalidArgumentsError, match="undecodable payload"):
        payloads.bind_args(bad, Handlers.pair, handler="h", skip_self=True)
