"""The request body cap: its setting and the Content-Length check (issue 25 item 2)."""

from __future__ import annotations

import pytest

from burrow.errors import ConfigurationError
from burrow.server.gate import declares_more_than
from burrow.server.settings import ServerSettings

MIB = 1024 * 1024


def test_the_default_cap_admits_eight_full_size_payloads() -> None:
    """Issue 25 item 2: 16 MiB with the default 2 MiB payloads; it follows a larger limit."""
    settings = ServerSettings.load({})
    assert settings.request_cap(2 * MIB) == 16 * MIB
    assert settings.request_cap(4 * MIB) == 32 * MIB


def test_burrow_server_max_request_bytes_sets_the_cap() -> None:
    """Issue 25 item 2: the variable overrides the default; zero or text is refused by name."""
    settings = ServerSettings.load({"BURROW_SERVER_MAX_REQUEST_BYTES": "1048576"})
    assert settings.request_cap(2 * MIB) == MIB
    for bad in ("0", "lots"):
        with pytest.raises(ConfigurationError, match="max_request_bytes"):
            ServerSettings.load({"BURROW_SERVER_MAX_REQUEST_BYTES": bad})


@pytest.mark.parametrize(
    ("content_length", "over"),
    [
        ("1024", False),
        ("1025", True),
        (" 1025 ", True),
        ("9" * 5000, True),
        ("-1", False),
        ("1e9", False),
        ("\u00b2", False),
        (None, False),
    ],
)
def test_a_content_length_is_over_the_cap_only_when_it_says_so(
    content_length: str | None, over: bool
) -> None:
    """Issue 25 item 2: a length of 5,000 digits is over, not an int() error; a malformed one
    announces nothing (the body is still counted as it arrives)."""
    assert declares_more_than(content_length, 1024) is over
