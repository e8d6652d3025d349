"""``make test`` is what the README gives; CI runs it as its two halves (the lab VM's tests
beside the first): the two must be the same commands, so a green CI proves the README."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs make")


def dry_run(target: str) -> str:
    """The commands ``make TARGET`` would run, not run (``make -n``)."""
    return subprocess.run(["make", "-n", "-C", str(REPO), target], capture_output=True,
                          text=True, check=True).stdout


def pytest_lines(text: str) -> list[str]:
    return [part.strip() for line in text.splitlines() for part in line.split(";")
            if "-m pytest" in part]


def test_make_test_is_its_two_halves_and_both_always_run():
    units, integration = pytest_lines(dry_run("test-units")), pytest_lines(
        dry_run("test-integration"))
    assert len(units) == 1 and "-n auto" in units[0] and "--ignore=tests/integration" in units[0]
    assert integration == [".venv/bin/python -m pytest tests/integration tests/agents"]
    whole = dry_run("test")
    assert pytest_lines(whole) == units + integration
    # the integration tests run even when a unit test failed; the target fails if either did
    assert "units=$?" in whole and "labs=$?" in whole
    assert "[ $units -eq 0 ] && [ $labs -eq 0 ]" in whole


def test_ci_runs_both_halves_and_the_integration_tests_after_the_lab_vm():
    ci = (REPO / ".ci" / "run").read_text()
    lines = ci.splitlines()

    def at(start: str) -> int:
        return next(i for i, line in enumerate(lines) if line.startswith(start))

    # the set-up first where the lab VM's tools would have to be installed (both run
    # apt-get), else after the VM has started; the unit tests beside the VM, the
    # integration tests once it has finished
    assert at("vm_tools || make setup-dev") < at("make vm-test") < at("make setup-dev") \
        < at("make test-units") < at('wait "$vm"') < at("make test-integration")
