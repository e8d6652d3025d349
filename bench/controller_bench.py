"""Benchmark the congestion controller on real switches: reaction time, marking, overhead.

Three measurements, each on a fresh fabric:

1. ``move``: two 7 Mb/s elephants from one leaf, forced onto the same uplink (a bad
   hash); time from the collision to the controller's ``flow_moved``, repeated.
2. ``marking``: ECT RoCE traffic (two senders, constant rate: they do not react) into one
   20 Mb/s host port at rising offered load; per step the telemetry's mean and peak
   backlog of that port and the share of packets that arrived with CE.
3. ``overhead``: controller CPU (user + system, from /proc) per second of an idle
   default-size fabric (2 planes, 8 nodes, 2 leaves and 2 spines per plane), telemetry
   at 100 ms against telemetry off.

    python -m bench.controller_bench [--only move|marking|overhead] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from contextlib import ExitStack
from pathlib import Path
from tempfile import TemporaryDirectory

from testbed.fabric.bringup import bring_up
from testbed.host.capabilities import probe
from testbed.host.files import read_jsonl
from testbed.host.naming import new_run_id, run_prefix
from testbed.host.procs import wait_for
from testbed.reports.telemetry import port_samples
from topologies.leafspine import build_fabric

TOOLS = str(Path(__file__).resolve().parents[1] / "tests" / "integration" / "udp_tools.py")
SMALL = dict(planes=1, rails=1, nodes=4, leaves_per_plane=2, spines_per_plane=2,
             link_mbps=20)
DEFAULT = dict(planes=2, rails=1, nodes=8, leaves_per_plane=2, spines_per_plane=2,
               link_mbps=20)


def _up(stack: ExitStack, out: Path, size: dict, controller: dict, telemetry: bool = True):
    run_id = new_run_id()
    spec = build_fabric(prefix=run_prefix(run_id), **size)
    return bring_up(spec, probe(run_id), run_id=run_id, controller=controller, out=out,
                    stack=stack, telemetry=telemetry)


def _spawn(live, host: str, name: str, args: list[str], pipe: bool = True):
    return live.fabric.spawn(host, name, [sys.executable, TOOLS, *args],
                             pid_dir=live.pid_dir, stdout_pipe=pipe)


def _events(live, name: str) -> list[dict]:
    return [e for e in read_jsonl(live.status) if e.get("event") == name]


def bench_move(rounds: int, keep: Path | None = None) -> dict:
    ctl = {"mode": "adaptive", "telemetry_ms": 100}
    delays = []
    with TemporaryDirectory() as tmp, ExitStack() as stack:
        tmp = str(keep) if keep else tmp
        live = _up(stack, Path(tmp), SMALL, ctl)
        spec = live.spec
        h0, h2, h3 = spec.hosts[0], spec.hosts[2], spec.hosts[3]
        leaf = h0.interface(0, 0).switch
        uplinks = spec.uplink_ports(leaf)
        for r in range(rounds):
            port = 6000 + r
            rx = [_spawn(live, h.name, f"rx{h.name}", ["recv", "--port", str(port),
                                                       "--seconds", "6"])
                  for h in (h2, h3)]
            for p in rx:
                p.proc.stdout.readline()
            tx = [_spawn(live, h0.name, f"tx{i}", ["send", "--dst", h.interface(0, 0).ip,
                                                   "--port", str(port), "--mbps", "7",
                                                   "--seconds", "5"])
                  for i, h in enumerate((h2, h3))]
            suffix = f":{port}"
            wait_for(lambda: len([e for e in _events(live, "flow_placed")  # noqa: B023
                                  if e["flow"].endswith(suffix)]) >= 2, 5)  # noqa: B023
            time.sleep(1.0)  # both flows measured on their own uplinks
            for e in [e for e in _events(live, "flow_placed") if e["flow"].endswith(suffix)]:
                src, dst = e["flow"].split()[1].split(">")
                (sip, sport), (dip, dport) = src.split(":"), dst.split(":")
                subprocess.run(["ovs-ofctl", "-O", "OpenFlow13", "--strict", "mod-flows", leaf,
                                f"priority=200,udp,nw_src={sip},nw_dst={dip},tp_src={sport},"
                                f"tp_dst={dport},actions=output:{uplinks[0]}"], check=True)
            t0 = time.time()
            ok = wait_for(lambda: any(m["t"] > t0 for m in _events(live, "flow_moved")), 3)  # noqa: B023
            if ok:
                move = next(m for m in _events(live, "flow_moved") if m["t"] > t0)
                delays.append(1000 * (move["t"] - t0))
            for p in tx + rx:
                p.stop()
            time.sleep(0.5)
    return {"rounds": rounds, "moved": len(delays),
            "move_ms": [round(d, 1) for d in delays],
            "median_ms": round(statistics.median(delays), 1) if delays else None,
            "telemetry_ms": 100}


def bench_marking(steps: list[float], thresholds: dict) -> list[dict]:
    ctl = {"mode": "ecmp", "telemetry_ms": 100,
           "ecn": {"mode": "controller", "classes": {"collective": thresholds}}}
    rows = []
    with TemporaryDirectory() as tmp, ExitStack() as stack:
        live = _up(stack, Path(tmp), SMALL, ctl)
        spec = live.spec
        h0, h2, h3 = spec.hosts[0], spec.hosts[2], spec.hosts[3]
        dst = h3.interface(0, 0)
        ifname = f"{dst.switch}e{dst.switch_port}"
        telemetry = Path(tmp) / "telemetry.jsonl"
        for load in steps:  # offered load as a fraction of the 20 Mb/s port
            rx = _spawn(live, h3.name, "rx", ["recv", "--port", "4791", "--seconds", "6"])
            rx.proc.stdout.readline()
            t0 = time.time()
            each = f"{load * 20 / 2:g}"
            tx = [_spawn(live, h.name, f"tx{h.name}", ["send", "--dst", dst.ip, "--port",
                                                       "4791", "--mbps", each, "--seconds",
                                                       "5", "--tos", "2"])
                  for h in (h0, h2)]
            for p in tx:
                p.wait(15)
                p.stop()
            got = json.loads(rx.proc.stdout.readline())
            rx.stop()
            backlog = [s["backlog_bytes"] for s in port_samples(telemetry)
                       if s["ifname"] == ifname and t0 + 1 <= s["t"] <= t0 + 5]
            rows.append({"offered": load, "packets": got["packets"],
                         "ce_share": round(got["ce"] / max(1, got["packets"]), 3),
                         "mean_backlog_kb": round(statistics.mean(backlog) / 1000, 1),
                         "peak_backlog_kb": round(max(backlog) / 1000, 1)})
            time.sleep(1.0)
    return rows


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100  # utime + stime, clock ticks


def bench_overhead(seconds: float) -> dict:
    out = {}
    for label, telemetry in (("telemetry_100ms", True), ("telemetry_off", False)):
        with TemporaryDirectory() as tmp, ExitStack() as stack:
            live = _up(stack, Path(tmp), DEFAULT, {"mode": "ecmp", "telemetry_ms": 100},
                       telemetry=telemetry)
            time.sleep(2)
            c0, t0 = _cpu_s(live.controller.pid), time.monotonic()
            time.sleep(seconds)
            c1, t1 = _cpu_s(live.controller.pid), time.monotonic()
            lines = sum(1 for _ in read_jsonl(Path(tmp) / "telemetry.jsonl"))
            samples = sum(1 for _ in port_samples(Path(tmp) / "telemetry.jsonl"))
            out[label] = {"cpu_percent": round(100 * (c1 - c0) / (t1 - t0), 1),
                          "telemetry_lines": lines, "port_samples": samples}
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.controller_bench")
    p.add_argument("--only", choices=("move", "marking", "overhead"))
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--seconds", type=float, default=20)
    p.add_argument("--keep", type=Path, help="keep the move run's files here")
    p.add_argument("--min-kb", type=float, default=20, help="marking: collective min_kb")
    p.add_argument("--max-kb", type=float, default=60, help="marking: collective max_kb")
    p.add_argument("--probability", type=float, default=0.1, help="marking: probability")
    args = p.parse_args(argv)
    results = {}
    if args.only in (None, "move"):
        results["move"] = bench_move(args.rounds, args.keep)
        print(json.dumps({"move": results["move"]}), flush=True)
    if args.only in (None, "marking"):
        th = {"min_kb": args.min_kb, "max_kb": args.max_kb, "probability": args.probability}
        results["marking"] = {"thresholds": th,
                              "steps": bench_marking([0.5, 0.9, 1.1, 1.3, 1.6], th)}
        print(json.dumps({"marking": results["marking"]}), flush=True)
    if args.only in (None, "overhead"):
        results["overhead"] = bench_overhead(args.seconds)
        print(json.dumps({"overhead": results["overhead"]}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
