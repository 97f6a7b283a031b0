"""`burrow --version` and `burrow.__version__` name the installed package (issue 33 item 3)."""

from __future__ import annotations

from importlib.metadata import version

from typer.testing import CliRunner

import burrow
from burrow.cli import app


def test_package_version_is_the_installed_distributions() -> None:
    """Issue 33 item 3: `burrow.__version__` is read from the package metadata."""
    assert burrow.__version__ == version("burrow")


def test_version_option_prints_the_installed_version_and_exits() -> None:
    """Issue 33 item 3: `burrow --version` prints it without running a command."""
    result = CliRunner().invoke(app, ["--version"], prog_name="burrow")
    assert result.exit_code == 0
    assert result.output == f"burrow {version('burrow')}\n"
