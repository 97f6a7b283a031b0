"""Workflow definition fingerprints (S8): stable for one class, different for changed code."""

from __future__ import annotations

import subprocess
import sys

from burrow.workflow import fingerprints
from burrow.workflow.definition import get_definition
from tests.apps.build_flows import BuildFlow, BuildFlowV2
from tests.apps.sticky_flows import StepFlow


def test_s8_a_fingerprint_is_a_sha256_and_the_same_in_another_process() -> None:
    """S8: the fingerprint a worker registers equals the one a client records elsewhere."""
    mine = fingerprints.fingerprint(get_definition(BuildFlow))
    code = (
        "from burrow.workflow import fingerprints;"
        "from burrow.workflow.definition import get_definition;"
        "from tests.apps.build_flows import BuildFlow;"
        "print(fingerprints.fingerprint(get_definition(BuildFlow)))"
    )
    theirs = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    ).stdout.strip()

    assert mine.startswith("sha256:") and len(mine) == len("sha256:") + 64
    assert theirs == mine


def test_s8_changed_code_or_another_type_changes_the_fingerprint() -> None:
    """S8: an override of the run method (same type name) and another workflow differ."""
    first = fingerprints.fingerprint(get_definition(BuildFlow))

    assert fingerprints.fingerprint(get_definition(BuildFlowV2)) != first
    assert fingerprints.fingerprint(get_definition(StepFlow)) != first


def test_s8_only_two_known_and_different_fingerprints_are_a_change() -> None:
    assert fingerprints.changed("sha256:a", "sha256:b")
    assert not fingerprints.changed("sha256:a", "sha256:a")
    assert not fingerprints.changed(None, "sha256:a")
    assert not fingerprints.changed("sha256:a", None)
