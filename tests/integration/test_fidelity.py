"""Root tests: the fidelity monitor reads a shaped queue inside a namespace from its thread
(and lets the namespace go); it flags a run whose host was starved (two CPU hogs beside a
short fabric run with saturated uplinks) and passes the same run on a quiet host; either
way only the traffic is judged, not the generators' start-up."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from testbed.core import fidelity, fidelity_verdict, layout
from testbed.core.runner import run
from testbed.core.scenario import parse
from testbed.host.naming import new_run_id, run_prefix

from .conftest import host_idle

# One plane, 4 nodes on 2 leaves, 4:1 oversubscribed: the ring's two flows per leaf (9 Mb/s
# each, 1 MB a step) overrun its 10 Mb/s uplink, so the uplink queues (1 MB deep) hold
# far more than a quarter second of the rate for most of each step: judged links
# (the monitor judges a link that owed half a second of its rate in a second)
SCENARIO = {
    "name": "fidelity-probe", "seed": 1, "duration_s": 6,
    "topology": {"planes": 1, "rails": 1, "nodes": 4, "leaves_per_plane": 2,
                 "spines_per_plane": 1, "link_mbps": 20, "mtu": 9000,
                 "oversubscription": 4, "queue_kb": 1024},
    "agents": {"enabled": False},
    "training": {"enabled": True, "ranks": [0, 2, 1, 3], "bytes": 4_000_000,
                 "compute_ms": 0, "rate_mbps": 9, "payload": 4096},
}


def run_probe(out: Path) -> tuple[dict, list[str]]:
    lines: list[str] = []
    summary = run(parse(dict(SCENARIO)), out, progress=lines.append)
    return summary, lines


def assert_judged_from_the_traffic_on(folder: Path) -> None:
    """Every judged sample's interval began once the training had (its ranks' common start
    time, less the 0.2 s between its writing and the start): the ranks' start-up, their
    Python and Scapy getting ready, is not judged."""
    first = min(json.loads(line)["start"] for path in folder.glob(layout.RANK_GLOB)
                for line in path.read_text().splitlines()[:1])
    samples = [json.loads(line) for line in (folder / layout.FIDELITY).read_text().splitlines()]
    judged = [s["t"] - s["interval_s"] for s in samples if s["measuring"]]
    assert judged and min(judged) >= first - 0.3, (first, samples)


def start_hog() -> int:
    """A busy loop outside the runner's process tree (as another user's work would be: the
    monitor counts the runner's descendants as the lab's own); returns its pid."""
    done = subprocess.run(["sh", "-c", f"{sys.executable} -c 'while True: pass' "
                           ">/dev/null 2>&1 & echo $!"], capture_output=True, text=True,
                          check=True)
    return int(done.stdout)


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


@pytest.mark.root
def test_monitor_reads_a_saturated_queue_in_a_namespace_and_lets_it_go(tmp_path):
    """A 2 Mb/s HTB veth in a namespace, flooded: saturated, delivered near its rate; the
    monitor thread enters the namespace itself (no forked child) and comes back."""
    ns = run_prefix(new_run_id()) + "fid"
    ip("netns", "add", ns)
    try:
        ip("-n", ns, "link", "add", "tbfidx0", "type", "veth", "peer", "name", "tbfidx1")
        ip("-n", ns, "addr", "add", "10.9.0.1/24", "dev", "tbfidx0")
        for dev in ("tbfidx0", "tbfidx1", "lo"):
            ip("-n", ns, "link", "set", dev, "up")
        for argv in (["qdisc", "add", "dev", "tbfidx0", "root", "handle", "1:", "htb",
                      "default", "10"],
                     ["class", "add", "dev", "tbfidx0", "parent", "1:", "classid", "1:10",
                      "htb", "rate", "2mbit", "ceil", "2mbit"],
                     ["qdisc", "add", "dev", "tbfidx0", "parent", "1:10", "bfifo", "limit",
                      "200000"]):
            subprocess.run(["tc", "-n", ns, *argv], check=True, capture_output=True)
        ip("-n", ns, "neigh", "add", "10.9.0.2", "lladdr", "02:00:00:00:00:02", "dev",
           "tbfidx0")
        flood = subprocess.Popen(["ip", "netns", "exec", ns, sys.executable, "-c",
                                  "import socket\ns = socket.socket(socket.AF_INET, "
                                  "socket.SOCK_DGRAM)\nwhile True:\n"
                                  "    try: s.sendto(b'x' * 1400, ('10.9.0.2', 9))\n"
                                  "    except OSError: pass"])
        try:
            fast = fidelity_verdict.Thresholds(interval_s=0.5)
            with fidelity.Monitor(tmp_path / "fidelity.jsonl", fast) as mon:
                with mon.watching([fidelity.WatchedLink(ns, "tbfidx0", 2)]):
                    time.sleep(5)
                    thread_ns = os.readlink(f"/proc/self/task/{mon._thread.native_id}/ns/net")
        finally:
            flood.kill()
            flood.wait()
        delivered = [lk["delivered"] for s in mon.samples for lk in s["saturated"]]
        assert len(delivered) >= 3, mon.samples
        assert all(0.8 < d < 1.2 for d in delivered), delivered
        assert thread_ns == os.readlink("/proc/self/ns/net")  # the thread came back
    finally:
        ip("netns", "del", ns)


@pytest.mark.ovs
def test_a_starved_host_is_flagged(tmp_path):
    hogs = [start_hog() for _ in range(2)]
    try:
        summary, lines = run_probe(tmp_path)
    finally:
        for pid in hogs:
            os.kill(pid, signal.SIGKILL)
    entry, = summary["runs"]
    verdict = entry["fidelity"]
    assert not verdict["ok"], verdict
    assert any("idle CPU" in r for r in verdict["reasons"])
    assert verdict["stats"]["other_cores"]["mean"] > 1.0  # the hogs, not the lab
    assert verdict["stats"]["delivery"]["link_samples"] > 0  # the uplinks were watched
    samples = (tmp_path / entry["dir"] / layout.FIDELITY).read_text().splitlines()
    assert len(samples) >= verdict["samples"] >= 4
    assert_judged_from_the_traffic_on(tmp_path / entry["dir"])
    assert any("warning: do not trust these numbers" in line for line in lines)
    report = (tmp_path / layout.REPORT).read_text()
    assert "**Do not trust the numbers of fidelity-probe:" in report
    assert "## Fidelity" in report
    manifest = json.loads((tmp_path / layout.MANIFEST).read_text())
    assert manifest["fidelity"]["ok"] is False
    assert manifest["fidelity"]["thresholds"] == fidelity_verdict.THRESHOLDS.to_dict()


@pytest.mark.ovs
def test_a_quiet_host_is_not_flagged(tmp_path):
    idle = host_idle()
    if idle < 0.5:
        pytest.skip(f"the host is busy with other work ({idle:.0%} idle): a quiet run "
                    "cannot be shown here")
    summary, _ = run_probe(tmp_path)
    verdict = summary["runs"][0]["fidelity"]
    assert verdict["ok"], verdict["reasons"]
    assert verdict["stats"]["delivery"]["link_samples"] > 0
    assert verdict["stats"]["delivery"]["p10"] > fidelity_verdict.THRESHOLDS.delivery_min
    assert_judged_from_the_traffic_on(tmp_path / summary["runs"][0]["dir"])
