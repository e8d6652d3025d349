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
    """The pytest commands of a recipe and the conditions they run under (its ``if``)."""
    parts = [part.strip() for line in text.splitlines() for part in line.split(";")]
    return [p for p in parts if "-m pytest" in p or p.startswith("if [")]


def test_make_test_is_its_two_halves_and_both_always_run():
    units, integration = pytest_lines(dry_run("test-units")), pytest_lines(
        dry_run("test-integration"))
    assert len(units) == 1 and "-n auto" in units[0] and "--ignore=tests/integration" in units[0]
    # every integration test in one of two passes: those that measure alone (those that
    # failed once more, alone), then those marked shares_host two at a time (a file per
    # worker: a file's fixtures stay shared)
    measured = '-m "not shares_host" tests/integration tests/agents'
    assert integration == [
        f".venv/bin/python -m pytest {measured}",
        "if [ $alone -eq 1 ]",
        f".venv/bin/python -m pytest --last-failed --last-failed-no-failures none {measured}",
        ".venv/bin/python -m pytest -m shares_host -n 2 --dist loadfile tests/integration"]
    whole = dry_run("test")
    assert pytest_lines(whole) == units + integration
    # the integration tests run even when a unit test failed, the second pass even when
    # the first failed; the target fails if any did, and a measuring test that failed
    # fails it when it fails again
    assert "units=$?" in whole and "alone=$?" in whole and "shared=$?" in whole
    assert whole.count("alone=$?") == 2
    assert "[ $alone -eq 0 ] && [ $shared -eq 0 ]; labs=$?" in whole
    assert "[ $units -eq 0 ] && [ $labs -eq 0 ]" in whole


def test_no_test_that_measures_or_reads_the_whole_host_shares_it():
    """The marker is declared, and it is not on the files whose claims are measurements
    or host-wide states (rates, a quiet host, every bridge or process of the host, a
    clean of every dead run)."""
    import tomllib

    markers = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["pytest"][
        "ini_options"]["markers"]
    assert any(m.startswith("shares_host:") for m in markers)
    marked = {f.name for f in (REPO / "tests" / "integration").glob("test_*.py")
              if "pytest.mark.shares_host" in f.read_text()}
    assert marked
    alone = {"test_fidelity.py", "test_phantom.py", "test_switchd.py", "test_labs.py",
             "test_lab.py", "test_congestion.py", "test_pfc.py", "test_run.py",
             # a key rotation judged frame by frame loses pings on a loaded host
             "test_macsec_link.py", "test_macsec_seeds.py"}
    assert not marked & alone, marked & alone


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
