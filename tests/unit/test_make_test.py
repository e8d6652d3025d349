"""``make test`` is what the README gives; CI runs it as its two halves: the two must be
the same commands, so a green CI proves the README."""

from __future__ import annotations

import shutil
import subprocess
import sys
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
    # every integration test in one of two passes: those marked shares_host three at a
    # time (a file per worker: a file's fixtures stay shared), then those that measure alone;
    # those of either that failed once more, alone
    tests = "tests/integration tests/agents"
    assert integration == [
        f".venv/bin/python -m pytest -m shares_host -n 3 --dist loadfile {tests}",
        f'.venv/bin/python -m pytest -m "not shares_host" {tests}',
        "if [ $shared -eq 1 ] || [ $alone -eq 1 ]",
        f".venv/bin/python -m pytest --last-failed --last-failed-no-failures none {tests}"]
    whole = dry_run("test")
    assert pytest_lines(whole) == units + integration
    # the integration tests run even when a unit test failed, the second pass even when
    # the first failed; the target fails if any did, and a test that failed fails it when
    # it fails again (the rerun's status replaces the first of the pass it failed in)
    assert "units=$?" in whole and "alone=$?" in whole and "shared=$?" in whole
    assert "[ $shared -ne 1 ] || shared=$again" in whole
    assert "[ $alone -ne 1 ] || alone=$again" in whole
    assert "[ $shared -eq 0 ] && [ $alone -eq 0 ]; labs=$?" in whole
    assert "[ $units -eq 0 ] && [ $labs -eq 0 ]" in whole


def shared_tests(path: Path) -> set[str]:
    """The tests of a file marked ``shares_host``: all of them when the module's
    ``pytestmark`` has it, else those whose decorators do."""
    import ast

    tree = ast.parse(path.read_text())
    tests = [n for n in tree.body if isinstance(n, ast.FunctionDef)
             and n.name.startswith("test_")]
    module = any(isinstance(n, ast.Assign) and any(getattr(t, "id", "") == "pytestmark"
                                                   for t in n.targets)
                 and "shares_host" in ast.unparse(n.value) for n in tree.body)
    return {t.name for t in tests
            if module or any("shares_host" in ast.unparse(d) for d in t.decorator_list)}


def test_no_test_that_measures_or_reads_the_whole_host_shares_it():
    """The marker is declared, and it is not on the tests whose claims are measurements
    or host-wide states (rates, a quiet host, every bridge or process of the host, a
    clean of every dead run)."""
    import tomllib

    markers = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["pytest"][
        "ini_options"]["markers"]
    assert any(m.startswith("shares_host:") for m in markers)
    integration = REPO / "tests" / "integration"
    marked = {f.name: shared_tests(f) for f in integration.glob("test_*.py")}
    assert any(marked.values())
    alone = {"test_fidelity.py", "test_phantom.py", "test_switchd.py",
             "test_congestion.py", "test_pfc.py",
             # a key rotation judged frame by frame loses pings on a loaded host
             "test_macsec_link.py", "test_macsec_seeds.py"}
    assert not {f for f in alone if marked[f]}, {f: marked[f] for f in alone if marked[f]}
    # in files of both: the graded figures of the lab guides, a clean of every dead run
    # (beside another test it would clean that test's runs), a look for anything of any run
    assert not marked["test_labs.py"] & {
        "test_lab1_starter_run_and_graded", "test_lab3_starter_app_below_ecmp",
        "test_lab5_solution_repairs_every_layer", "test_lab8_solution_lossless_with_pfc",
        "test_lab9_starter_graded_and_explored"}
    assert not marked["test_lab.py"] & {"test_clean_removes_a_dead_lab_and_leaves_a_live_one",
                                        "test_lab_up_ls_exec_fault_capture_down"}
    assert "test_lab1_explore" not in marked["test_labs.py"]  # counts every iperf3 of the host
    # a mark on a parameter (pytest.param), as pytest reads it: the ring example alone
    alone_ids = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
         "-m", "not shares_host", str(integration / "test_experiments.py")],
        cwd=REPO, capture_output=True, text=True).stdout
    assert "test_examples_run[ring-<lambda>]" in alone_ids, alone_ids
    assert "test_examples_run[fault-kinds-<lambda>]" not in alone_ids, alone_ids
    assert not marked["test_run.py"] & {
        "test_interrupted_run_removes_everything",
        "test_run_survives_a_killed_controller_and_cleans_up",
        "test_clean_removes_only_what_the_testbed_made",
        "test_clean_leaves_a_live_run_alone_unless_forced"}


def test_the_marker_is_read_from_a_module_and_from_a_test(tmp_path):
    """shared_tests sees both ways of marking, and not a test left unmarked."""
    f = tmp_path / "test_x.py"
    f.write_text("import pytest\n\n@pytest.mark.shares_host\ndef test_a():\n    pass\n\n\n"
                 "def test_b():\n    pass\n")
    assert shared_tests(f) == {"test_a"}
    f.write_text("import pytest\npytestmark = [pytest.mark.ovs, pytest.mark.shares_host]\n\n\n"
                 "def test_b():\n    pass\n")
    assert shared_tests(f) == {"test_b"}


def test_ci_runs_both_halves():
    ci = (REPO / ".ci" / "run").read_text()
    lines = ci.splitlines()

    def at(start: str) -> int:
        return next(i for i, line in enumerate(lines) if line.startswith(start))

    assert at("make setup-dev") < at("make test-units") < at("make lint") \
        < at("make test-integration")
    assert "make test-units || status=1" in ci and "make test-integration || status=1" in ci
