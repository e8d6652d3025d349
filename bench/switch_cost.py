"""Benchmark: what the userspace switch costs per forwarding, today's way against the new.

Both ways side by side in one run, each on a fresh fabric (``switches.daemon``):

* ``host``: every switch on the host's ovs-vswitchd (its packet ports, ``--mlockall`` as
  the distribution starts it), as every userspace fabric ran before the lab had its own
  switch processes;
* ``lab``: the lab's own processes (:mod:`testbed.fabric.switchd`), as the scenario's
  ``switches`` section sets them by default (shards, glibc's allocator tuned).

On two fabrics: the default scenario's (two-plane leaf-spine, 8 switches) and the k=4
three-tier fat-tree (20 switches, 112 switch ports). At two loads, fixed before any
result:

* light: the first host pings the last (across the spines or the core) 100 times a
  second for 5 s;
* heavy: 8 paced UDP flows of 8,000-byte datagrams at 15 Mb/s each (the stride pattern
  of the fat-tree scenario: host i to host i + n/2) for 5 s.

Measured over each window: the CPU (user + system, ``/proc/PID/stat``) of every switch
process of the way (the host's ovs-vswitchd, or every lab ovs-vswitchd), the packets
their ports received (``packets received`` of ``dpif-netdev/pmd-stats-show``, summed over
the processes: one forwarding each; the coverage counter ``netdev_received`` counts
receive calls, several frames each under load) and their allocations
(``util_xalloc``). A forwarding's CPU is the one over the other; the background work of
the processes (statistics the controller asks for every 100 ms, database updates) is in
it, as it is in a run.

Then the default scenario's ``agents-only`` variant, 15 s, both ways: the switch
processes' cores and their busiest thread at p90 (the fidelity monitor's record) and
the monitor's verdict.

Targets (the issue's, fixed before any result; a miss exits 1):

* fat-tree, light load: the lab's CPU per forwarding at least 10x lower than the host's;
* heavy load (both fabrics): the lab's CPU per forwarding no higher than the host's.

    python -m bench.switch_cost [--seconds 5] [--no-scenario] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

import yaml

from testbed.fabric import drops
from testbed.fabric.bringup import bring_up
from testbed.host.capabilities import probe
from testbed.host.naming import new_run_id, run_prefix
from topologies.build import build_topology

ROOT = Path(__file__).resolve().parent.parent
TOOLS = str(ROOT / "tests" / "integration" / "udp_tools.py")
SCENARIO = ROOT / "scenarios" / "agents-vs-training.yaml"
FABRICS = {
    "default": {"planes": 2, "rails": 1, "nodes": 8, "leaves_per_plane": 2,
                "spines_per_plane": 2, "link_mbps": 20, "mtu": 9000, "queue_kb": 64},
    "fat-tree": {"builder": "fat-tree", "k": 4, "planes": 1, "link_mbps": 20, "mtu": 9000,
                 "queue_kb": 64},
}
WAYS = ("host", "lab")
PING_RATE = 100
FLOWS, FLOW_MBPS, DATAGRAM = 8, 15.0, 8000
#: fat-tree light load: host / lab CPU per forwarding at least this
LIGHT_RATIO_MIN = 10.0
HZ = os.sysconf("SC_CLK_TCK")


class Counters:
    """CPU seconds, packets received and allocations of a way's switch processes."""

    def __init__(self, fabric) -> None:
        self.pids = fabric.switch_pids()
        self.ctls = ([None] if fabric.daemons is None  # the host's ovs-vswitchd
                     else [str(i.ctl) for i in fabric.daemons.instances])

    def read(self) -> tuple[float, int, int]:
        cpu = 0
        for pid in self.pids:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            cpu += int(fields[11]) + int(fields[12])
        # frames from pmd-stats-show: coverage's netdev_received counts receive calls
        frames = drops.received(self.ctls)
        if frames is None:
            raise RuntimeError("switch_cost: dpif-netdev/pmd-stats-show did not answer")
        return cpu / HZ, frames, self._counter("util_xalloc")

    def _counter(self, name: str) -> int:
        total = 0
        for ctl in self.ctls:
            argv = ["ovs-appctl"] + (["-t", ctl] if ctl else []) + ["coverage/read-counter",
                                                                   name]
            done = subprocess.run(argv, capture_output=True, text=True, timeout=10)
            total += int(done.stdout.strip() or 0)
        return total


def _window(counters: Counters, load) -> dict:
    c0, r0, a0 = counters.read()
    t0 = time.monotonic()
    load()
    c1, r1, a1 = counters.read()
    wall = time.monotonic() - t0
    received = max(1, r1 - r0)
    return {"cpu_s": round(c1 - c0, 3), "forwardings": r1 - r0, "wall_s": round(wall, 2),
            "cores": round((c1 - c0) / wall, 3),
            "us_per_forwarding": round((c1 - c0) / received * 1e6, 1),
            "allocs_per_forwarding": round((a1 - a0) / received, 1)}


def measure(fabric_name: str, way: str, seconds: float) -> dict:
    """Both loads on one fresh fabric of ``fabric_name``, switched ``way``."""
    run_id = new_run_id()
    spec = build_topology(FABRICS[fabric_name], run_prefix(run_id))
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        live = bring_up(spec, probe(run_id), run_id=run_id, out=Path(tmp), stack=stack,
                        controller={"mode": "ecmp", "telemetry_ms": 100},
                        switches={"daemon": way})
        fabric, hosts = live.fabric, spec.hosts
        counters = Counters(fabric)
        a, b = hosts[0], hosts[-1]

        def light() -> None:
            fabric.run(a.name, ["ping", "-q", "-i", f"{1 / PING_RATE:g}", "-c",
                                str(int(PING_RATE * seconds)), b.interface(0, 0).ip],
                       timeout=seconds * 3 + 10)

        def heavy() -> None:
            half = len(hosts) // 2
            pairs = [(hosts[i], hosts[(i + half) % len(hosts)]) for i in range(FLOWS)]
            rx = [fabric.spawn(dst.name, f"rx{i}", [sys.executable, TOOLS, "recv", "--port",
                                                   str(7000 + i), "--seconds",
                                                   str(seconds + 2)],
                               pid_dir=live.pid_dir, stdout_pipe=True)
                  for i, (_, dst) in enumerate(pairs)]
            for p in rx:
                p.proc.stdout.readline()
            tx = [fabric.spawn(src.name, f"tx{i}", [
                sys.executable, TOOLS, "send", "--dst", dst.interface(0, 0).ip, "--port",
                str(7000 + i), "--mbps", f"{FLOW_MBPS:g}", "--seconds", f"{seconds:g}",
                "--size", str(DATAGRAM)], pid_dir=live.pid_dir)
                for i, (src, dst) in enumerate(pairs)]
            for p in tx:
                p.wait(seconds + 10)
            for p in rx + tx:
                p.stop()

        time.sleep(1.0)  # past the bring-up's own traffic
        row = {"fabric": fabric_name, "way": way, "switches": len(spec.switches),
               "processes": len(counters.pids), "light": _window(counters, light),
               "heavy": _window(counters, heavy)}
    return row


def scenario_row(way: str, seconds: float) -> dict:
    """The default scenario's agents-only variant, switched ``way``: the switch
    processes' cores and the fidelity verdict."""
    data = yaml.safe_load(SCENARIO.read_text())
    data["variants"] = [v for v in data["variants"] if v["name"] == "agents-only"]
    data["switches"] = {"daemon": way}
    data["duration_s"] = seconds
    with tempfile.TemporaryDirectory() as tmp:
        scenario, out = Path(tmp) / "agents-only.yaml", Path(tmp) / "out"
        scenario.write_text(yaml.safe_dump(data))
        done = subprocess.run([sys.executable, "-m", "testbed.core.cli", "run", str(scenario),
                               "--out", str(out)], capture_output=True, text=True)
        if done.returncode:
            return {"way": way, "error": (done.stderr or done.stdout).strip()[-300:]}
        run = json.loads((out / "summary.json").read_text())["runs"][0]
    fid = run.get("fidelity") or {}
    stats = fid.get("stats") or {}
    return {"way": way, "verdict": "ok" if fid.get("ok") else "FLAGGED",
            "ovs_cores_p90": (stats.get("ovs_cores") or {}).get("p90"),
            "ovs_thread_cores_p90": (stats.get("ovs_thread_cores") or {}).get("p90"),
            "chains_completed": run["agents"]["chains_completed"],
            "p99_ms": run["agents"]["latency_ms"]["p99"]}


def verdicts(rows: list[dict]) -> list[tuple[str, float, bool]]:
    """(target, measured, met) from the measured rows.

    >>> rows = [{"fabric": "fat-tree", "way": w, "light": {"us_per_forwarding": l},
    ...          "heavy": {"us_per_forwarding": h}} for w, l, h in
    ...         (("host", 600, 50), ("lab", 50, 60))]
    >>> for target in verdicts(rows):
    ...     print(target)
    ('fat-tree light: host / lab >= 10', 12.0, True)
    ('fat-tree heavy: lab / host <= 1', 1.2, False)
    """
    by = {(r["fabric"], r["way"]): r for r in rows}
    out = []
    for fabric in FABRICS:
        host, lab = by.get((fabric, "host")), by.get((fabric, "lab"))
        if not host or not lab:
            continue
        if fabric == "fat-tree":
            ratio = host["light"]["us_per_forwarding"] / lab["light"]["us_per_forwarding"]
            out.append((f"{fabric} light: host / lab >= {LIGHT_RATIO_MIN:g}", round(ratio, 2),
                        ratio >= LIGHT_RATIO_MIN))
        worse = lab["heavy"]["us_per_forwarding"] / host["heavy"]["us_per_forwarding"]
        out.append((f"{fabric} heavy: lab / host <= 1", round(worse, 2), worse <= 1.0))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--no-scenario", action="store_true",
                    help="skip the default scenario's agents-only runs")
    ap.add_argument("--json", type=Path, help="write the rows here")
    args = ap.parse_args(argv)
    if os.geteuid() != 0:
        print("switch_cost: needs root (fabrics)", file=sys.stderr)
        return 2
    caps = probe(new_run_id())
    if caps.ovs_kernel_datapath:
        print("switch_cost: this host has Open vSwitch's kernel module: its fabrics use the "
              "kernel datapath, not the userspace one this bench compares; nothing measured")
        return 0
    rows = []
    print(f"{'fabric':9} {'way':5} {'procs':>5} | {'light us/fwd':>12} {'allocs':>7} "
          f"{'cores':>6} | {'heavy us/fwd':>12} {'allocs':>7} {'cores':>6} {'fwd/s':>7}")
    for fabric in FABRICS:
        for way in WAYS:
            row = measure(fabric, way, args.seconds)
            rows.append(row)
            lt, hv = row["light"], row["heavy"]
            print(f"{fabric:9} {way:5} {row['processes']:>5} | "
                  f"{lt['us_per_forwarding']:>12} {lt['allocs_per_forwarding']:>7} "
                  f"{lt['cores']:>6} | {hv['us_per_forwarding']:>12} "
                  f"{hv['allocs_per_forwarding']:>7} {hv['cores']:>6} "
                  f"{hv['forwardings'] / hv['wall_s']:>7.0f}", flush=True)
    scenario = [] if args.no_scenario else [scenario_row(w, 15.0) for w in WAYS]
    for row in scenario:
        print(f"default scenario, agents-only, {row['way']}: " + (
            row["error"] if "error" in row else
            f"switch processes {row['ovs_cores_p90']} cores (p90), busiest thread "
            f"{row['ovs_thread_cores_p90']} at p90, fidelity {row['verdict']}, "
            f"chains {row['chains_completed']}, p99 {row['p99_ms']} ms"))
    failed = False
    for target, measured, met in verdicts(rows):
        print(f"{'PASS' if met else 'MISS'}  {target}: {measured:g}")
        failed |= not met
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "scenario": scenario}, indent=1))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
