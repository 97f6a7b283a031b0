"""The command line's input checks (issue 13 item 8): --input forms, workflow ids, run ids."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from burrow.cli import app
from burrow.cli.inputs import InputError, check_id, check_run_id, load_input

WIDE = {"COLUMNS": "250", "NO_COLOR": "1"}
# Points at a closed port: a check that let a value through to the database would fail, not hang.
UNREACHABLE = "postgresql://postgres@127.0.0.1:1/never_used"
RUN_ID = "0b8f5c9e-2d4a-4f7e-9a51-6c3d2e1f0a9b"
LARGE = ["x" * (300 * 1024), {"n": 1}]


def _stdin(data: bytes = b"") -> io.BytesIO:
    return io.BytesIO(data)


def _load(value: str, stdin: bytes = b"") -> object:
    return load_input(value, stdin=_stdin(stdin))


# -- --input ---------------------------------------------------------------------------------------


def test_literal_json_array_is_the_arguments() -> None:
    assert _load("[]") == []
    assert _load('[{"order_id": "o1"}, 2, null]') == [{"order_id": "o1"}, 2, None]


def test_file_input_reads_a_large_array(tmp_path: Path) -> None:
    path = tmp_path / "args.json"
    path.write_text(json.dumps(LARGE))
    assert _load(f"@{path}") == LARGE


def test_stdin_input_reads_a_large_array() -> None:
    assert _load("-", stdin=json.dumps(LARGE).encode()) == LARGE


def test_file_input_drops_a_byte_order_mark(tmp_path: Path) -> None:
    path = tmp_path / "bom.json"
    path.write_bytes(b"\xef\xbb\xbf" + '["café"]'.encode())
    assert _load(f"@{path}") == ["café"]


def test_stdin_is_read_only_for_a_lone_dash() -> None:
    """`-` reads stdin; JSON text never does (a negative number is JSON, not the stdin form)."""
    stdin = _stdin(b'["from stdin"]')
    assert load_input("[-1]", stdin=stdin) == [-1]
    assert stdin.tell() == 0


@pytest.mark.parametrize(
    ("value", "stdin", "message"),
    [
        ("{nope", b"", "--input is not valid JSON (Expecting property name enclosed in double"),
        ("[1,\n 2,,]", b"", "at line 2, column 4"),
        ("", b"", "--input is empty"),
        ("   ", b"", "--input is empty"),
        ('{"a": 1}', b"", "got an object; wrap a single argument in '[{\"a\": 1}]'"),
        ('"solo"', b"", "got a string"),
        ("42", b"", "got a number"),
        ("true", b"", "got a boolean"),
        ("null", b"", "got null"),
        ("-", b"", "--input from stdin is empty"),
        ("-", b"[1,\n\n  {]", "--input from stdin is not valid JSON (Expecting property name"),
        ("-", b"[1,\n\n  {]", "at line 3, column 4"),
        ("-", b'{"a": 1}', "--input from stdin must be a JSON array"),
        ("-", b'["ok", "\xff"]', "--input from stdin is not UTF-8 text: byte 0xff at offset 8"),
        ("@", b"", "--input @ needs a file name"),
    ],
)
def test_bad_input_is_refused_with_its_reason(value: str, stdin: bytes, message: str) -> None:
    with pytest.raises(InputError) as caught:
        _load(value, stdin=stdin)
    assert message in str(caught.value)


def test_a_long_bad_literal_is_shown_shortened() -> None:
    with pytest.raises(InputError) as caught:
        _load("[" + "1," * 10_000)
    assert len(str(caught.value)) < 200


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "is empty"),
        (b"[1, 2", "is not valid JSON (Expecting ',' delimiter at line 1, column 6)"),
        (b'[\n  "a"\n  "b"\n]', "at line 3, column 3"),
        (b"\x00\x01[]", "is not valid JSON"),
        (b'["caf\xe9"]', "is not UTF-8 text: byte 0xe9 at offset 5"),
        (b'{"a": 1}', "must be a JSON array of positional arguments, got an object"),
    ],
)
def test_bad_file_content_names_the_file(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "args.json"
    path.write_bytes(content)
    with pytest.raises(InputError) as caught:
        _load(f"@{path}")
    assert f"--input @{path}" in str(caught.value)
    assert message in str(caught.value)


def test_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such file"):
        _load(f"@{tmp_path / 'absent.json'}")


def test_directory_is_not_a_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="is a directory"):
        _load(f"@{tmp_path}")


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_unreadable_file_is_named(tmp_path: Path) -> None:
    path = tmp_path / "secret.json"
    path.write_text("[]")
    path.chmod(0)
    with pytest.raises(InputError, match="permission denied"):
        _load(f"@{path}")


# -- ids -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "workflow_id",
    ["order-1", 'it\'s "quoted"', "'; DROP TABLE runs; --", "🦡 burrow", "a b", "x" * 4000],
)
def test_awkward_but_printable_ids_are_kept_as_given(workflow_id: str) -> None:
    assert check_id(workflow_id, what="workflow id") == workflow_id


@pytest.mark.parametrize(
    ("workflow_id", "message"),
    [
        ("", "workflow id must not be empty"),
        (" ", "workflow id ' ' is blank"),
        ("\t\n", "is blank"),
        (" order-1", "has leading or trailing whitespace; ids are compared exactly, so write"),
        ("order-1\n", "write 'order-1' if"),
        ("a\nb", "contains the control character U+000A at position 1"),
        ("a\x00b", "U+0000"),
        ("a\x7fb", "U+007F"),
    ],
)
def test_unusable_ids_are_refused(workflow_id: str, message: str) -> None:
    with pytest.raises(InputError) as caught:
        check_id(workflow_id, what="workflow id")
    assert message in str(caught.value)


def test_run_ids_are_canonical_uuids() -> None:
    assert check_run_id(RUN_ID) == RUN_ID
    assert check_run_id(RUN_ID.upper()) == RUN_ID
    assert check_run_id(RUN_ID.replace("-", "")) == RUN_ID


@pytest.mark.parametrize("run_id", ["", " ", "abc", "latest", RUN_ID[:-1], RUN_ID + "0", "1234"])
def test_run_ids_that_are_not_uuids_are_refused(run_id: str) -> None:
    with pytest.raises(InputError, match="is not a run id: run ids are UUIDs"):
        check_run_id(run_id)


# -- the commands ----------------------------------------------------------------------------------

START = ["workflow", "start", "OrderWorkflow", "--task-queue", "q"]


@pytest.mark.parametrize(
    ("command", "message"),
    [
        ([*START, "--id", ""], "--id must not be empty; leave --id out for a generated id"),
        ([*START, "--id", "  "], "--id '  ' is blank"),
        ([*START, "--id", "o-1 "], "--id 'o-1 ' has leading or trailing whitespace"),
        (["workflow", "describe", ""], "workflow id must not be empty"),
        (["workflow", "history", " "], "workflow id ' ' is blank"),
        (["workflow", "signal", "", "approve"], "workflow id must not be empty"),
        (["workflow", "signal", "w", "approve", "--signal-id", ""], "--signal-id must not be"),
        (["workflow", "cancel", " w"], "leading or trailing whitespace"),
        (["workflow", "terminate", "w\n"], "leading or trailing whitespace"),
        (["workflow", "result", ""], "workflow id must not be empty"),
        (["workflow", "describe", "w", "--run-id", "abc"], "--run-id 'abc' is not a run id"),
        (["workflow", "history", "w", "--run-id", ""], "is not a run id"),
        (["workflow", "signal", "w", "s", "--run-id", "x"], "is not a run id"),
        (["workflow", "cancel", "w", "--run-id", "x"], "is not a run id"),
        (["workflow", "terminate", "w", "--run-id", "x"], "is not a run id"),
        (["workflow", "result", "w", "--run-id", "x"], "is not a run id"),
    ],
)
def test_bad_ids_exit_2_before_connecting(
    runner: CliRunner, command: list[str], message: str
) -> None:
    result = runner.invoke(app, [*command, "--database-url", UNREACHABLE], env=WIDE)
    assert result.exit_code == 2, result.output
    assert "error: " in result.stderr
    assert message in result.stderr
    assert "Traceback" not in result.output


@pytest.mark.parametrize("command", [START, ["workflow", "signal", "wf-1", "approve"]])
def test_input_from_stdin_and_file_reach_the_same_checks(
    runner: CliRunner, command: list[str], tmp_path: Path
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"not": "an array"}')
    from_file = runner.invoke(
        app, [*command, "--input", f"@{bad}", "--database-url", UNREACHABLE], env=WIDE
    )
    from_stdin = runner.invoke(
        app, [*command, "--input", "-", "--database-url", UNREACHABLE], env=WIDE, input="[1,"
    )
    assert from_file.exit_code == 2, from_file.output
    assert f"--input @{bad} must be a JSON array" in from_file.stderr
    assert from_stdin.exit_code == 2, from_stdin.output
    assert "--input from stdin is not valid JSON" in from_stdin.stderr


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()
