"""Root test: a plug-in experiment kind (examples/kinds/pingmesh.py) runs through
``testbed run`` like the built-in kinds, and leaves nothing behind.

Most tests here share the host (``shares_host``): what they assert is what a run does
(every ping answered, flows placed in turn, faults and failovers in their order, echoes
counted), with rates only as "more than 1 Mb/s"; each run's leftovers are looked for by
its own prefix, so another test's run beside it is not judged. Two run alone: the ring
example, whose training must lose no packet (a loaded host's senders fall behind the
step time-out), and the workloads list, whose iperf3 pair must end before the run does
(about 1.5 s to spare on a quiet host)."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from pathlib import Path

import pytest

from testbed.core import layout

from .conftest import leftovers

pytestmark = pytest.mark.root
REPO = Path(__file__).resolve().parents[2]


@pytest.mark.shares_host
def test_plugin_kind_runs_end_to_end(tmp_path):
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "testbed.core.cli", "run",
                           "examples/pingmesh.yaml", "--out", str(out)],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["kind"] == "examples.kinds.pingmesh"
    run, = summary["runs"]
    assert run["pairs"] == 6 and run["answered"] == 6
    assert run["dir"] == "variants/mesh"
    assert (out / "variants" / "mesh" / "rtts.json").exists()
    assert "## Ping mesh" in (out / "report.md").read_text()
    assert leftovers(f"tb{run['run_id']}") == []


def test_workloads_list_runs_every_entry(tmp_path):
    """examples/workloads.yaml: chains, a ping, an iperf3 pair, a replay and elephants,
    from one list; each entry's output is kept and its exit status reported. The run
    lasts 7.5 s: the iperf3 pair runs from 2 s for 4 s and then exchanges its results, so
    a 6 s run stopped it before it could exit in two CI rehearsals."""
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "testbed.core.cli", "run",
                           "examples/workloads.yaml", "--duration", "7.5", "--out",
                           str(out)],
                          cwd=REPO, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    run, = json.loads((out / "summary.json").read_text())["runs"]
    assert run["agents"]["chains_completed"] > 0
    ping, iperf, replay, elephants = run["workloads"]
    assert ping["exit_status"] == 0 and not ping["stopped_at_end"]
    assert "5 received" in (out / run["dir"] / ping["output"]).read_text()
    assert iperf["exit_status"] == 0 and iperf["goodput_mbps"] > 1
    assert replay["exit_status"] == 0 and replay["replay"]["packets"] == 20
    assert sorted(f["src"] for f in elephants["flows"]) == [0, 1, 2, 3]
    assert all(f["goodput_mbps"] > 1 for f in elephants["flows"]), elephants
    assert run["elephants"]["measured"] == 4 and run["pattern"] == "randbij"
    assert leftovers(f"tb{run['run_id']}") == []


@pytest.mark.shares_host
def test_a_routing_mode_of_ones_own_places_the_flows(tmp_path):
    """examples/routing-mode.yaml: the controller loads the round-robin mode named by its
    dotted path; n0's leaf puts the connections to n3 on its two uplinks in turn, and the
    packets take them (each uplink carries a share of the bytes)."""
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "testbed.core.cli", "run",
                           "examples/routing-mode.yaml", "--out", str(out)],
                          cwd=REPO, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    run, = json.loads((out / "summary.json").read_text())["runs"]
    assert run["workloads"][0]["goodput_mbps"] > 1
    events = [json.loads(line) for line in
              (out / run["dir"] / layout.CONTROLLER_EVENTS).read_text().splitlines()]
    started, = [e for e in events if e["event"] == "congestion_started"]
    assert started["mode"] == "round-robin"
    leaf = [e for e in events if e["event"] == "flow_placed" and e["switch"].endswith("l0")]
    ports = [e["port"] for e in leaf]
    assert len(ports) >= 8 and all(e["mode"] == "round-robin" for e in leaf), ports
    assert all(a != b for a, b in itertools.pairwise(ports)), ports  # in turn
    assert run["telemetry"]["controller"]["flows_placed"] >= len(ports)
    assert leftovers(f"tb{run['run_id']}") == []


#: shorter than the examples' own durations, where the check holds as well. The backbone
#: example's check reads only its two cuts (at 3 and 6 s), each judged in its window up
#: to the next action (the restore at 10 s): 14 s still holds the restore at 13 s (every
#: fault must fall inside the run) and leaves both cut windows as they were
DURATION = {"ring": 4, "backbone-topology": 14}


EXAMPLES = [
    ("controller-app", lambda run: run["workloads"][1]["goodput_mbps"] > 1),
    ("fault-kinds", lambda run: [f["fault"] for f in run["faults"]] ==
     ["rate", "rate_restore", "degrade", "restore", "blackhole", "restore"]
     and run["agents"]["chains_completed"] > 0),
    # a topology builder of one's own: its six-switch ring carries the training ring
    # (both variants: ECMP and adaptive)
    ("ring", lambda run: run["fabric"]["switches"] == 6 and run["fabric"]["hosts"] == 12
     and run["training"]["iterations"] > 0 and run["training"]["packets_lost"] == 0),
    # a backbone topology of one's own: OSPF routes round the span between lax and den,
    # the other way round the ring once both its links are cut
    ("backbone-topology", lambda run: [f["fault"] for f in run["failovers"]]
     == ["cut_link lax-den-1", "cut_link lax-den-2"]
     and all(f["detect_ms"] is not None and f["reachability_after"] == 1.0
             for f in run["failovers"])
     and not {"lax-den-1", "lax-den-2"} & {link for path in
                                            run["failovers"][1]["path_after"].values()
                                            for link in path["links"]}),
    # a workload kind of one's own: its server and client in the hosts, its record
    ("workload-kind", lambda run: run["workloads"][0]["kind"] == "udp_echo"
     and run["workloads"][0]["exit_status"] == 0
     and (echo := run["workloads"][0]["echo"])["sent"] == 100
     and echo["received"] + echo["lost"] == 100 and echo["received"] > 0
     and echo["rtt_ms"]["p50"] > 0),
]
#: the examples whose claims a loaded host breaks (the ring's: no packet lost), run alone
ALONE = {"ring"}


@pytest.mark.parametrize("example, check", [
    pytest.param(example, check, marks=() if example in ALONE else pytest.mark.shares_host)
    for example, check in EXAMPLES])
def test_examples_run(tmp_path, example, check):
    out = tmp_path / "out"
    shorter = ["--duration", str(DURATION[example])] if example in DURATION else []
    done = subprocess.run([sys.executable, "-m", "testbed.core.cli", "run",
                           f"examples/{example}.yaml", "--out", str(out), *shorter],
                          cwd=REPO, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    runs = json.loads((out / "summary.json").read_text())["runs"]
    assert runs and all(check(run) for run in runs), json.dumps(runs)[:2000]
    assert all(leftovers(f"tb{run['run_id']}") == [] for run in runs)
