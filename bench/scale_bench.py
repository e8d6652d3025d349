"""Benchmark: what a whole run costs as the fabric grows, against plain Mininet.

A new user's first try at scale: the default scenario's agent chains (its ``agents-only``
variant, ``scenarios/agents-vs-training.yaml``) for 5 s on eight-plane leaf-spines of
16, 64 and 128 switches (64, 128 and 256 host ports), each a whole ``testbed run`` in
its own process: bring-up, traffic, teardown, summary and report. Beside each, plain
Mininet builds the same topology (same switches, hosts and links, Open vSwitch with the
same datapath, no controller: Mininet's ``Topo`` and plain ``Link``, then ``start()``,
idle as long as the lab's traffic, ``stop()``), also in a process of its own. Its links
are not shaped: with ``TCLink(bw=...)`` plain Mininet took 349 s to start 128 switches
(402 s in all), which would make this bench take 10 minutes; unshaped it does less
than the lab (which shapes every port, turns offloads off, sets addresses and MTUs), so
the ratios are conservative.

For both: start and stop seconds (ours: the run's ``fabric.start_s`` and ``stop_s``;
Mininet's: its constructor to ``start()`` returned, and ``stop()``), the whole process's
wall time, and its peak memory: the largest sum of the resident sets of the process and
all its descendants, sampled every 0.2 s from /proc (ovs-vswitchd, a system daemon that
both share, is not counted), and the largest resident set of any one of them
(``ru_maxrss``, what ``/usr/bin/time -v`` reports). The lab's progress lines are timed
too, so the output shows where a run's time goes.

Target (the issue's, fixed before any result): at the largest size (128 switches, 256
host ports) the whole run with 5 s of traffic ends within 120 s; exit status 1 when
missed, or when a run fails.

    python -m bench.scale_bench [--sizes 16,64,128] [--duration 5] [--no-plain]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from bench import fabric_bench
from testbed.host.capabilities import probe
from testbed.host.naming import new_run_id, run_prefix
from topologies.leafspine import build_fabric

ROOT = Path(__file__).resolve().parent.parent
SCENARIO = ROOT / "scenarios" / "agents-vs-training.yaml"
#: the largest size's whole run with DURATION_S of traffic ends within this (seconds)
TARGET_S = 120.0
DURATION_S = 5.0
#: switches -> eight-plane leaf-spine: leaves and spines per plane, nodes (one rail)
SIZES = {
    16: dict(planes=8, leaves_per_plane=1, spines_per_plane=1, nodes=8),
    64: dict(planes=8, leaves_per_plane=4, spines_per_plane=4, nodes=16),
    128: dict(planes=8, leaves_per_plane=8, spines_per_plane=8, nodes=32),
}
SAMPLE_S = 0.2


def scenario(size: dict, duration_s: float, switches: str = "host",
             shards: int | str = "auto") -> dict:
    """The default scenario's agents-only variant on a fabric of ``size``.

    >>> s = scenario(SIZES[128], 5)
    >>> s["topology"]["planes"], s["topology"]["nodes"], s["variants"], s["duration_s"]
    (8, 32, [{'name': 'agents-only'}], 5)
    >>> s["agents"]["enabled"], s["training"]["enabled"]
    (True, False)
    """
    base = yaml.safe_load(SCENARIO.read_text())
    return {**base, "name": f"scale-{size['planes']}x{size['leaves_per_plane']}"
                            f"-{size['spines_per_plane']}",
            "duration_s": duration_s,
            "topology": {**base["topology"], **size},
            "variants": [{"name": "agents-only"}],
            "switches": {"daemon": switches, "shards": shards}}


def tree_rss(pid: int) -> int:
    """Resident bytes of ``pid`` and all its descendants (0 once it is gone)."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    page = os.sysconf("SC_PAGE_SIZE")
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry.name}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        child = int(entry.name)
        children.setdefault(int(fields[1]), []).append(child)  # ppid
        rss[child] = int(fields[21]) * page
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        total += rss.get(p, 0)
        todo += children.get(p, [])
    return total


@dataclass
class Measured:
    """One process, measured from outside: wall time, peak memory, timed stderr lines."""

    rc: int = 0
    wall_s: float = 0.0
    #: the largest sum of the resident sets of the process and its descendants
    peak_bytes: int = 0
    #: the largest resident set of any one of them (``ru_maxrss``, as ``time -v`` shows)
    max_process_bytes: int = 0
    lines: list[tuple[float, str]] = field(default_factory=list)
    stdout: str = ""


def measure(argv: list[str], *, cwd: Path | None = None) -> Measured:
    """Run ``argv`` to its end; sample its process tree's memory; time its stderr lines."""
    m = Measured()
    t0 = time.monotonic()
    proc = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)

    def read_stderr() -> None:
        for line in proc.stderr:
            m.lines.append((time.monotonic() - t0, line.rstrip()))

    reader = threading.Thread(target=read_stderr, daemon=True)
    reader.start()
    out: list[str] = []
    stdout = threading.Thread(target=lambda: out.append(proc.stdout.read()), daemon=True)
    stdout.start()
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        m.peak_bytes = max(m.peak_bytes, tree_rss(proc.pid))
        time.sleep(SAMPLE_S)
    m.wall_s = time.monotonic() - t0
    m.rc = proc.returncode = os.waitstatus_to_exitcode(status)
    m.max_process_bytes = usage.ru_maxrss * 1024
    reader.join(5)
    stdout.join(5)
    m.stdout = "".join(out)
    return m


def phases(lines: list[tuple[float, str]], end: float) -> dict[str, float]:
    """Where a lab run's time went, from its timed progress lines: until the fabric was
    up (controller, bring-up, paths, reachability), then traffic and teardown (with the
    variant's summary) until its done line, then until the process ended ``end`` (the
    report).

    >>> phases([(1.0, "[1/1] a: starting fabric (...)"), (9.0, "[1/1] a: fabric up in 6 s"),
    ...         (20.0, "[1/1] a: done; chains 9/9")], end=22.5)
    {'bring_up_s': 9.0, 'traffic_teardown_s': 11.0, 'report_s': 2.5}
    """
    def at(word: str) -> float | None:
        return next((t for t, line in lines if word in line), None)

    up, done = at("fabric up in"), at(": done;")
    out = {}
    if up is not None:
        out["bring_up_s"] = round(up, 1)
        if done is not None:
            out["traffic_teardown_s"] = round(done - up, 1)
            out["report_s"] = round(end - done, 1)
    return out


def lab_run(size: dict, duration_s: float, work: Path, switches: str = "host",
            shards: int | str = "auto") -> dict:
    """One whole ``testbed run`` of the scale scenario, measured from outside."""
    work.mkdir(parents=True, exist_ok=True)
    path = work / "scenario.yaml"
    path.write_text(yaml.safe_dump(scenario(size, duration_s, switches, shards),
                                   sort_keys=False))
    out = work / "results"
    m = measure([sys.executable, "-m", "testbed.core.cli", "run", str(path), "--out", str(out)],
                cwd=ROOT)
    result = {"rc": m.rc, "whole_s": round(m.wall_s, 1), "peak_bytes": m.peak_bytes,
              "max_process_bytes": m.max_process_bytes,
              "phases": phases(m.lines, m.wall_s), "out": str(out)}
    summary = out / "summary.json"
    if m.rc == 0 and summary.exists():
        run = json.loads(summary.read_text())["runs"][0]
        f = run["fabric"]
        result |= {"start_s": f["start_s"], "stop_s": f["stop_s"],
                   "paths_s": f.get("paths_installed_s"),
                   "chains": run["agents"]["chains_completed"],
                   "chains_started": run["agents"]["chains_started"],
                   "fidelity_ok": (run.get("fidelity") or {}).get("ok"),
                   "telemetry_bytes": sum(p.stat().st_size
                                          for p in out.glob("variants/*/telemetry.jsonl"))}
    else:
        result["error"] = "\n".join(line for _, line in m.lines[-5:])
    return result


def plain_run(size_key: int, duration_s: float) -> dict:
    """Plain Mininet of the same size in a process of its own, measured from outside."""
    m = measure([sys.executable, "-m", "bench.scale_bench", "--plain-child", str(size_key),
                 "--duration", f"{duration_s:g}"], cwd=ROOT)
    result = {"rc": m.rc, "whole_s": round(m.wall_s, 1), "peak_bytes": m.peak_bytes,
              "max_process_bytes": m.max_process_bytes}
    try:
        result |= json.loads(m.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        result["error"] = "\n".join(line for _, line in m.lines[-5:])
    return result


def plain_child(size_key: int, duration_s: float) -> int:
    """Inside the child: plain Mininet up, idle for the traffic's seconds, down."""
    caps = probe(new_run_id())
    spec = build_fabric(prefix=run_prefix(new_run_id()), link_mbps=20, rails=1,
                        **SIZES[size_key])
    up, down = fabric_bench.plain_mininet(spec, caps, run_prefix(new_run_id()),
                                          hold_s=duration_s, shaped=False)
    print(json.dumps({"start_s": round(up, 3), "stop_s": round(down, 3)}))
    return 0


def verdict(whole_s: float | None, target: float = TARGET_S) -> bool:
    """Whether the largest size's whole run ended within ``target`` seconds.

    >>> verdict(95.0), verdict(121.0), verdict(None)
    (True, False, False)
    """
    return whole_s is not None and whole_s <= target


def _gb(n: int) -> str:
    return f"{n / 1e9:.2f} GB"


def _ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}" if a is not None and b else "-"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default=",".join(map(str, SIZES)),
                    help=f"switch counts, of {sorted(SIZES)} (default: all)")
    ap.add_argument("--duration", type=float, default=DURATION_S,
                    help="seconds of traffic (default 5)")
    ap.add_argument("--no-plain", action="store_true", help="skip plain Mininet")
    ap.add_argument("--switches", choices=("host", "lab"), default="host",
                    help="the lab's switch processes (switches.daemon; default host)")
    ap.add_argument("--shards", default="auto",
                    help="with --switches lab: switches.shards (switch, pod, N, auto)")
    ap.add_argument("--plain-child", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.plain_child:
        return plain_child(args.plain_child, args.duration)
    try:
        sizes = [int(s) for s in args.sizes.split(",")]
    except ValueError:
        ap.error(f"--sizes: switch counts separated by commas, got {args.sizes!r}")
    unknown = [s for s in sizes if s not in SIZES]
    if unknown:
        ap.error(f"--sizes: {unknown} not among {sorted(SIZES)}")
    print(f"whole runs of the default scenario's agents ({args.duration:g} s of traffic) "
          f"against plain Mininet of the same topology (unshaped links, idle as long); "
          f"peak memory: the process tree's resident sets summed, sampled every "
          f"{SAMPLE_S:g} s")
    ok, largest = True, None
    with tempfile.TemporaryDirectory(prefix="scale-bench-") as tmp:
        for key in sizes:
            size = SIZES[key]
            spec = build_fabric(prefix="tb0000", link_mbps=20, rails=1, **size)
            counts = spec.counts()
            host_ports = sum(len(h.interfaces) for h in spec.hosts)
            print(f"  {size['planes']} planes x ({size['leaves_per_plane']} leaves + "
                  f"{size['spines_per_plane']} spines): {counts['switches']} switches, "
                  f"{host_ports} host ports, {counts['links']} links", flush=True)
            shards = int(args.shards) if args.shards.isdigit() else args.shards
            lab = lab_run(size, args.duration, Path(tmp) / f"lab{key}", args.switches, shards)
            plain = None if args.no_plain else plain_run(key, args.duration)
            for label, r in (("lab", lab), ("plain", plain)):
                if r is None:
                    continue
                if r["rc"] or "error" in r:
                    ok = False
                    print(f"    {label:5} FAILED (exit {r['rc']}): {r.get('error', '')}")
                    continue
                print(f"    {label:5} start {r['start_s']:6.2f} s  stop {r['stop_s']:6.2f} s  "
                      f"whole {r['whole_s']:6.1f} s  peak {_gb(r['peak_bytes'])} "
                      f"(largest process {_gb(r['max_process_bytes'])})")
                if label == "lab":
                    print(f"          chains {r['chains']}/{r['chains_started']}, telemetry "
                          f"{r['telemetry_bytes'] / 1e6:.1f} MB, fidelity "
                          f"{'ok' if r['fidelity_ok'] else 'FLAGGED'}; time: "
                          + ", ".join(f"{k[:-2].replace('_', ' ')} {v:.1f} s"
                                      for k, v in r["phases"].items()))
            if plain and "start_s" in lab and "start_s" in plain:
                print(f"    ratio lab/plain  start {_ratio(lab['start_s'], plain['start_s'])}  "
                      f"stop {_ratio(lab['stop_s'], plain['stop_s'])}  "
                      f"whole {_ratio(lab['whole_s'], plain['whole_s'])}  "
                      f"peak {_ratio(lab['peak_bytes'], plain['peak_bytes'])}", flush=True)
            largest = (key, lab)
    key, lab = largest
    whole = lab["whole_s"] if not lab["rc"] and "error" not in lab else None
    judged = key == max(SIZES) and args.duration == DURATION_S
    passed = verdict(whole) if judged else None
    if passed is None:
        print(f"target (whole run at {max(SIZES)} switches with {DURATION_S:g} s of traffic "
              f"within {TARGET_S:g} s): not judged by this selection")
    else:
        print(f"whole run at {key} switches, {args.duration:g} s of traffic: "
              f"{whole if whole is not None else 'failed'} s, target <= {TARGET_S:g} s: "
              f"{'PASS' if passed else 'MISS'}")
    return 0 if ok and passed is not False else 1


if __name__ == "__main__":
    raise SystemExit(main())
