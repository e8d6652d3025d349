"""``testbed check LAB --lab NAME`` on real running labs (``testbed up``) of labs 3, 5, 7
and 10: the lesson's checks pass on the solution's lab, and a lab broken by hand (a
leaf's flows deleted, the starter's missing repair, a backbone link cut, the starter's
acceptance checks) fails the check that names it. Each lab is taken down at the end,
also when an assertion fails, and leaves nothing behind.

The host this runs on may be loaded: a check that fails while the fidelity monitor flags
the host grades RERUN (exit 3), with every check still shown "(not graded)"; a FAIL
asserted here is one no load explains (it fails for the lab's sake), and the assertions
read the check's line whether graded or not.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from .conftest import leftovers

pytestmark = [pytest.mark.ovs, pytest.mark.shares_host]

REPO = Path(__file__).resolve().parents[2]
LABS = REPO / "labs"
RERUN = 3


def run_testbed(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "testbed.core.cli", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=timeout)


@contextmanager
def lab_up(scenario: Path, variant: str | None, tmp: Path) -> Iterator[dict]:
    """A lab up (its record), taken down at the end whatever happens, nothing left."""
    name = f"lc{os.getpid() % 10000}{scenario.parent.parent.name[3:5]}"
    args = ["up", str(scenario), "--name", name, "--results", str(tmp)]
    up = run_testbed(*args, *(["--variant", variant] if variant else []))
    try:
        assert up.returncode == 0, up.stderr[-2000:]
        listed = json.loads(run_testbed("ls", "--json").stdout)
        yield next(r for r in listed if r["name"] == name)
    finally:
        listed = json.loads(run_testbed("ls", "--json").stdout or "[]")
        record = next((r for r in listed if r["name"] == name), None)
        if record is not None:
            down = run_testbed("down", name)
            assert down.returncode == 0, down.stderr
            assert leftovers(f"tb{record['run_id']}") == []


def check(lab: int, name: str, *options: str) -> tuple[int, dict[str, str]]:
    """``testbed check LAB --lab NAME [OPTIONS]``: its exit status and {check: 'PASS
    reason' | 'FAIL reason' | 'SKIP why'} (RERUN's checks read from their "(not graded)"
    lines)."""
    done = run_testbed("check", str(lab), "--lab", name, *options)
    lines = done.stdout.splitlines()
    assert done.returncode in (0, 1, RERUN), done.stderr + done.stdout
    if done.returncode == RERUN:
        assert lines[0].startswith("RERUN: the fidelity monitor flagged the host"), done.stdout
        assert ": RERUN (not graded; " in lines[-1], done.stdout
        lines = [ln.removeprefix("  (not graded) ") for ln in lines[1:]]
    assert f"live lab {name} (" in lines[-1] and "checks passed" in lines[-1], done.stdout
    verdicts = {}
    for line in lines[:-1]:
        word, rest = line.split(" ", 1)
        check_name, reason = rest.split(": ", 1)
        assert word in ("PASS", "FAIL", "SKIP") and reason, line
        verdicts[check_name] = f"{word} {reason}"
    failed = any(v.startswith("FAIL") for v in verdicts.values())
    assert done.returncode == (RERUN if done.returncode == RERUN else int(failed)), done.stdout
    return done.returncode, verdicts


def expect_pass(status: int, verdict: str, start: str) -> None:
    """A check the lab should pass: it does, or (on a host the monitor flagged, exit 3)
    it failed for the host's sake."""
    assert verdict.startswith(start) or (status == RERUN and verdict.startswith("FAIL")), \
        (status, verdict)


def test_lab3_placement_on_the_switches_and_a_leaf_emptied_by_hand(tmp_path) -> None:
    with lab_up(LABS / "lab03_hashing" / "solution" / "scenario.yaml", "placement-stride",
                tmp_path) as record:
        name = record["name"]
        status, v = check(3, name)
        assert status in (0, RERUN), v
        expect_pass(status, v["hosts-reach-across-leaves"],
                    "PASS 192 of 192 host pairs across leaves answered")
        expect_pass(status, v["leaves-use-every-spine"], "PASS each of 4 leaves")
        assert v["placement-app-loaded"].endswith("16 pinned flows on every leaf")
        assert v["placement-avoids-collisions"].startswith("PASS 16 pinned flows")
        # another lab's checks on it: one line, exit 2
        wrong = run_testbed("check", "5", "--lab", name)
        assert wrong.returncode == 2 and wrong.stdout == "", wrong.stdout
        assert wrong.stderr.strip().splitlines() == [
            f"testbed: error: --lab: lab {name} runs scenario 'lab03-hashing', not lab 5's "
            "'lab05-resilience' (testbed up labs/lab05_resilience/starter/... or "
            "solution/...)"]
        # a leaf's flows deleted by hand
        subprocess.run(["ovs-ofctl", "-O", "OpenFlow13", "del-flows",
                        record["ofctl"]["p0l1"]], check=True)
        status, v = check(3, name)
        assert status in (1, RERUN)
        assert v["hosts-reach-across-leaves"].startswith("FAIL 96 of 192 host pairs")
        assert v["leaves-use-every-spine"] == \
            "FAIL p0l1 never sends to port(s) 5, 6, 7, 8 of 5, 6, 7, 8"
        assert "12 pinned flows; none on p0l1" in v["placement-app-loaded"]


@pytest.mark.parametrize("step", ["starter", "solution"])
def test_lab5_a_cut_spine_link_on_the_running_lab(tmp_path, step) -> None:
    with lab_up(LABS / "lab05_resilience" / step / "scenario.yaml", "f2", tmp_path) as record:
        status, v = check(5, record["name"])
        expect_pass(status, v["hosts-reach-across-leaves"],
                    "PASS 32 of 32 host pairs across leaves answered")
        if step == "solution":
            assert status in (0, RERUN), v
            assert v["failover-groups-on-spines"] == \
                "PASS 4 spine downlinks each behind a fast-failover group with a backup"
            expect_pass(status, v["cut-link-repaired"], "PASS p0l0-p0s1 cut: all 32 pairs")
        else:  # no repair: the pairs whose replies hash over the cut spine stay dead
            assert status in (1, RERUN)
            assert v["failover-groups-on-spines"].startswith("SKIP variant f2 does not")
            assert v["cut-link-repaired"].startswith("FAIL p0l0-p0s1 cut: "), v
            assert "which layer repairs a dead port?" in v["cut-link-repaired"]
        # the cut was undone: the lab answers as before
        again = run_testbed("exec", record["name"], "n0", "--", "ping", "-c1", "-W2", "10.0.0.8")
        assert again.returncode == 0, again.stdout


def test_lab7_routes_sessions_paths_and_a_rerouted_risk_group(tmp_path) -> None:
    # the starter's FRR default timers: sessions that do not flap on a loaded host
    with lab_up(LABS / "lab07_backbone" / "starter" / "backbone.yaml", None,
                tmp_path) as record:
        name = record["name"]
        status, v = check(7, name)
        assert status in (0, RERUN), v
        expect_pass(status, v["every-router-routes-everywhere"],
                    "PASS each of 12 routers routes all 15 other destinations")
        expect_pass(status, v["sessions-on-every-link"], "PASS sessions up on all 29 links")
        expect_pass(status, v["separate-paths-in-sessions"], "PASS over the 29 links")
        expect_pass(status, v["risk-group-rerouted"],
                    "PASS tat-north (nyc-lon-1, nyc-lon-2) cut")
        assert v["macsec-counters-grow"].startswith("SKIP MACsec is off")
        # a link cut by hand: its session is gone, the check names it
        assert run_testbed("fault", name, "cut_link", "nyc-ams").returncode == 0
        status, v = check(7, name, "--checks", "sessions-on-every-link")
        assert list(v) == ["sessions-on-every-link"], v
        assert status in (1, RERUN)
        assert v["sessions-on-every-link"] == "FAIL no session on nyc-ams"


def test_lab10_the_starters_acceptance_misses_the_planted_faults(tmp_path) -> None:
    with lab_up(LABS / "lab10_acceptance" / "starter" / "scenario.yaml", "unaccepted",
                tmp_path) as record:
        status, v = check(10, record["name"])
        assert status in (1, RERUN)
        found = v["acceptance-finds-planted-faults"]
        assert found.startswith("FAIL checks cabling (variant accepted): 3 of 7 "), found
        planted = {f["action"] for f in record["acceptance"]["planted"]}
        assert planted == {"rate", "degrade", "swap_rails", "throttle"}
        for kind in ("rate", "degrade", "throttle"):  # cabling finds the swap alone
            assert f"{kind} " in found.split("missed ", 1)[1], found
