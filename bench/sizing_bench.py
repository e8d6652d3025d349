"""Benchmark: what the lab's parts cost one machine (the sizing model's costs), and the
model's estimate checked against whole runs it was not fitted on.

Fit (fabrics and loads that none of the checked runs has; the fidelity monitor's own
sampler reads the CPU, as it does in a run; the host's ovs-vswitchd, as by default):

* idle: two fabrics up, nothing sent, 8 s each: ``small`` (one plane, 2 leaves and 1
  spine, 4 nodes) and ``large`` (three planes of 2 leaves and 2 spines, 8 nodes); the
  switch processes' cores against their ports give the cost per port and per process,
  the lab's helpers' cores (the controller asking for statistics) the controller's
  cost per switch;
* forwarding: ``small`` with 4 paced UDP flows (8,000-byte datagrams, 10 Mb/s each,
  8 s): the switch cores above idle over the frames the switch ports received;
* chains: ``small`` with agent chains at concurrency 4, 8 s: the generators' cores
  above idle per chain in flight, and the frames per chain in flight;
* training: ``small`` with a ring of two ranks at 8 Mb/s, 8 s: the generators' cores
  per Mb/s a rank sends.

Check (fixed before any result): the default scenario's ``agents-only`` and
``training-1to1`` variants (two planes, 8 switches) and ``rack-expansion``'s
``steady`` variant (one plane, 4 switches; chains and training), one seed each, 15 s,
by ``testbed run``; from each run's fidelity samples (its measured window) the median
of the switch processes' cores and of the host's busy cores, and the monitor's
verdict. Targets (a miss exits 1): on every checked run, the estimate's verdict for one
machine of this one's cores is the monitor's, and its busy cores are within 25 % of
the measured median (where the run was flagged the host ran out of cores: the
estimate must then exceed what the monitor allows, which the verdict already checks).

    python -m bench.sizing_bench [--save] [--costs FILE] [--no-check] [--json FILE]

``--save`` writes the fitted costs where ``testbed calc --scenario`` reads them by
default (testbed/cluster/costs.json); ``--costs FILE`` writes them to FILE.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

import yaml

from testbed.cluster import sizing
from testbed.core.fidelity import Monitor
from testbed.core.scenario import parse
from testbed.fabric import drops
from testbed.fabric.bringup import bring_up
from testbed.host.capabilities import probe
from testbed.host.naming import new_run_id, run_prefix
from testbed.workloads import generators
from topologies.build import build_topology

ROOT = Path(__file__).resolve().parent.parent
TOOLS = str(ROOT / "tests" / "integration" / "udp_tools.py")
FABRICS = {
    "small": {"planes": 1, "nodes": 4, "leaves_per_plane": 2, "spines_per_plane": 1,
              "link_mbps": 20, "mtu": 9000, "queue_kb": 64},
    "large": {"planes": 3, "nodes": 8, "leaves_per_plane": 2, "spines_per_plane": 2,
              "link_mbps": 20, "mtu": 9000, "queue_kb": 64},
}
WINDOW_S = 8.0
FLOWS, FLOW_MBPS, DATAGRAM = 4, 10.0, 8000
CHAINS = 4
RANK_MBPS = 8.0
CHECKS = (("agents-vs-training", "agents-only"), ("agents-vs-training", "training-1to1"),
          ("rack-expansion", "steady"))
CHECK_S = 15
CORES_TOLERANCE = 0.25


def machine() -> str:
    """The CPU model and count, as the docs name the hardware a figure was measured on."""
    model = "unknown CPU"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    return f"{os.cpu_count()} cores of {model}, {platform.release()}"


def _median(samples: list[dict], key: str) -> float:
    values = [s[key] for s in samples if s.get(key) is not None]
    return statistics.median(values) if values else 0.0


def _window(monitor: Monitor, seconds: float, work=None) -> dict:
    """Median cores over ``seconds`` (while ``work`` runs, if given) and the frames the
    switches received."""
    r0 = drops.received([None]) or 0
    start = len(monitor.samples)
    if work is not None:
        work()
    else:
        time.sleep(seconds)
    r1 = drops.received([None]) or 0
    samples = monitor.samples[start + 1:]  # the first may straddle the start
    return {"ovs_cores": _median(samples, "ovs_cores"),
            "helpers_cores": _median(samples, "helpers_cores"),
            "frames": r1 - r0, "samples": len(samples)}


def _fabric(name: str, stack: ExitStack, tmp: Path):
    run_id = new_run_id()
    spec = build_topology(FABRICS[name], run_prefix(run_id))
    live = bring_up(spec, probe(run_id), run_id=run_id, out=tmp / name, stack=stack,
                    controller={"mode": "ecmp", "telemetry_ms": 100})
    time.sleep(1.0)  # past the bring-up's own traffic
    return live


def _variant(topology: dict, **sections) -> object:
    return parse({"name": "sizing", "topology": topology, **sections}).variants[0]


def fit(verbose: bool = True) -> tuple[sizing.Costs, dict]:
    raw: dict = {}
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        monitor = Monitor(tmp / "fidelity.jsonl").start()
        try:
            ports = {}
            for name in ("large", "small"):
                with ExitStack() as stack:
                    live = _fabric(name, stack, tmp)
                    ports[name] = len(live.spec.switch_ports())
                    raw[f"idle_{name}"] = {**_window(monitor, WINDOW_S),
                                           "ports": ports[name],
                                           "switches": len(live.spec.switches)}
                    if name == "small":
                        raw["forwarding"] = _window(monitor, WINDOW_S,
                                                    lambda lv=live: _udp(lv, WINDOW_S))
                        raw["chains"] = _window(monitor, WINDOW_S,
                                                lambda lv=live: _chains(lv, tmp, WINDOW_S))
                        raw["training"] = _window(monitor, WINDOW_S,
                                                  lambda lv=live: _training(lv, tmp, WINDOW_S))
                if verbose:
                    print(f"  {name}: {raw[f'idle_{name}']}", flush=True)
        finally:
            monitor.stop()
    small, large = raw["idle_small"], raw["idle_large"]
    port_cores = (large["ovs_cores"] - small["ovs_cores"]) / (large["ports"] - small["ports"])
    process_cores = max(0.0, small["ovs_cores"] - port_cores * small["ports"])
    controller = (large["helpers_cores"] + small["helpers_cores"]) / (
        large["switches"] + small["switches"])
    fwd = raw["forwarding"]
    forwarding_us = (fwd["ovs_cores"] - small["ovs_cores"]) * WINDOW_S / max(1, fwd["frames"]) * 1e6
    spec = build_topology(FABRICS["small"], "tbsz")
    chains = raw["chains"]
    agents = _agents_section()
    crossed = _chain_path_switches(spec, agents)
    chain_cores = max(0.0, chains["helpers_cores"] - small["helpers_cores"]) / CHAINS
    chain_fps = chains["frames"] / WINDOW_S / crossed / CHAINS
    train = raw["training"]
    mbps = sizing.rank_mbps(_training_section(), 1) * 2  # both ranks
    rank_cores = max(0.0, train["helpers_cores"] - small["helpers_cores"]) / mbps
    costs = sizing.Costs(measured_on=machine(), process_cores=round(process_cores, 4),
                         port_cores=round(port_cores, 5), forwarding_us=round(forwarding_us, 1),
                         controller_cores_per_switch=round(controller, 4),
                         chain_cores=round(chain_cores, 4), chain_fps=round(chain_fps, 1),
                         rank_cores_per_mbps=round(rank_cores, 4))
    return costs, raw


def _udp(live, seconds: float) -> None:
    hosts = live.spec.hosts
    pairs = [(hosts[i], hosts[(i + 2) % len(hosts)]) for i in range(FLOWS)]
    rx = [live.fabric.spawn(dst.name, f"rx{i}", [sys.executable, TOOLS, "recv", "--port",
                                                 str(7000 + i), "--seconds", str(seconds + 2)],
                            pid_dir=live.pid_dir, stdout_pipe=True)
          for i, (_, dst) in enumerate(pairs)]
    for p in rx:
        p.proc.stdout.readline()
    tx = [live.fabric.spawn(src.name, f"tx{i}", [
        sys.executable, TOOLS, "send", "--dst", dst.interface(0, 0).ip, "--port",
        str(7000 + i), "--mbps", f"{FLOW_MBPS:g}", "--seconds", f"{seconds:g}",
        "--size", str(DATAGRAM)], pid_dir=live.pid_dir) for i, (src, dst) in enumerate(pairs)]
    for p in tx:
        p.wait(seconds + 10)
    for p in rx + tx:
        p.stop()


def _agents_section() -> dict:
    return {"enabled": True, "driver": 0,
            "services": {"retriever": 3, "tool": 2, "model": 3, "agent": 2},
            "concurrency": CHAINS}


def _training_section() -> dict:
    return {"enabled": True, "ranks": [0, 3], "bytes": 500_000, "compute_ms": 40,
            "rate_mbps": RANK_MBPS, "payload": 4096}


def _chain_path_switches(spec, agents: dict) -> float:
    """The switches a chain's frame crosses on average (the model's own routing)."""
    driver = spec.hosts[agents["driver"]].name
    svcs = [spec.hosts[n].name for n in agents["services"].values()]
    return statistics.mean(sum(sizing.path_switches(spec, driver, s, 0).values())
                           for s in svcs)


def _run_generators(live, tmp: Path, seconds: float, **sections) -> None:
    variant = _variant(FABRICS["small"], **sections)
    out = tmp / f"work-{time.monotonic_ns()}"
    out.mkdir()
    with ExitStack() as stack:
        work = generators.start(live.fabric, variant, out=out, pid_dir=live.pid_dir,
                                duration_s=seconds, seed=1, stack=stack)
        generators.wait_done(work, seconds, lambda *_: None)


def _chains(live, tmp: Path, seconds: float) -> None:
    _run_generators(live, tmp, seconds, agents=_agents_section())


def _training(live, tmp: Path, seconds: float) -> None:
    _run_generators(live, tmp, seconds, agents={"enabled": False},
                    training=_training_section())


def check(costs: sizing.Costs, verbose: bool = True) -> list[dict]:
    """The checked runs, each beside the estimate for one machine of this one's cores."""
    rows = []
    cores = os.cpu_count() or 1
    for scenario_name, variant_name in CHECKS:
        data = yaml.safe_load((ROOT / "scenarios" / f"{scenario_name}.yaml").read_text())
        data["variants"] = [v for v in data["variants"] if v["name"] == variant_name]
        data["duration_s"] = CHECK_S
        with tempfile.TemporaryDirectory() as tmp_name:
            scenario, out = Path(tmp_name) / "check.yaml", Path(tmp_name) / "out"
            scenario.write_text(yaml.safe_dump(data))
            variant = parse(data).variants[0]
            est = sizing.estimate(variant.fabric("tbsz"), variant, costs, machines=1,
                                  cores=cores)
            done = subprocess.run([sys.executable, "-m", "testbed.core.cli", "run",
                                   str(scenario), "--out", str(out), "--seeds", "1"],
                                  capture_output=True, text=True)
            if done.returncode:
                rows.append({"run": f"{scenario_name}/{variant_name}",
                             "error": (done.stderr or done.stdout).strip()[-300:]})
                continue
            folder = next((out / "variants").iterdir())
            samples = [json.loads(ln) for ln in (folder / "fidelity.jsonl").read_text()
                       .splitlines() if ln.strip()]
            inside = [s for s in samples if s.get("measuring")] or samples
            run = json.loads((out / "summary.json").read_text())["runs"][0]
        busy = statistics.median(s["cpus"] * (1 - s["host_idle"]) for s in inside
                                 if s.get("host_idle") is not None)
        share = est.shares[0]
        row = {"run": f"{scenario_name}/{variant_name}", "switches": share.switches,
               "ports": share.ports,
               "estimate": {"switch_cores": share.switch_cores,
                            "cores": round(share.cores, 3), "holds": est.holds},
               "measured": {"switch_cores": round(_median(inside, "ovs_cores"), 3),
                            "busy_cores": round(busy, 3),
                            "monitor": "ok" if run["fidelity"]["ok"] else "FLAGGED",
                            "reasons": run["fidelity"].get("reasons", [])}}
        rows.append(row)
        if verbose:
            print(f"  {row['run']}: {row['estimate']} | {row['measured']}", flush=True)
    return rows


def verdicts(rows: list[dict]) -> list[tuple[str, str, bool]]:
    """(target, what was found, met) for each checked run.

    >>> rows = [{"run": "a/b", "estimate": {"cores": 1.0, "holds": True},
    ...          "measured": {"busy_cores": 1.1, "monitor": "ok"}},
    ...         {"run": "c/d", "estimate": {"cores": 2.5, "holds": False},
    ...          "measured": {"busy_cores": 1.9, "monitor": "ok"}}]
    >>> for v in verdicts(rows):
    ...     print(v)
    ('a/b: verdict', 'holds / ok', True)
    ('a/b: cores within 25 %', '1.00 / 1.10', True)
    ('c/d: verdict', 'does not hold / ok', False)
    ('c/d: cores within 25 %', '2.50 / 1.90', False)
    """
    out = []
    for r in rows:
        if "error" in r:
            out.append((f"{r['run']}: ran", r["error"], False))
            continue
        est, got = r["estimate"], r["measured"]
        holds = "holds" if est["holds"] else "does not hold"
        out.append((f"{r['run']}: verdict", f"{holds} / {got['monitor']}",
                    est["holds"] == (got["monitor"] == "ok")))
        flagged = got["monitor"] != "ok"
        near = abs(est["cores"] - got["busy_cores"]) <= CORES_TOLERANCE * got["busy_cores"]
        out.append((f"{r['run']}: cores within {CORES_TOLERANCE * 100:g} %",
                    f"{est['cores']:.2f} / {got['busy_cores']:.2f}",
                    near or (flagged and not est["holds"])))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.sizing_bench")
    ap.add_argument("--save", action="store_true",
                    help=f"write the costs to {sizing.COSTS_FILE.relative_to(ROOT)}")
    ap.add_argument("--costs", type=Path, help="write the costs to this file")
    ap.add_argument("--no-check", action="store_true", help="fit only")
    ap.add_argument("--json", type=Path, help="everything measured, as JSON")
    args = ap.parse_args(argv)
    if os.geteuid() != 0:
        print("sizing_bench: needs root (it builds fabrics)", file=sys.stderr)
        return 2
    print(f"fit on {machine()}", flush=True)
    costs, raw = fit()
    print(f"  costs: {costs}", flush=True)
    for path in ([sizing.COSTS_FILE] if args.save else []) + ([args.costs] if args.costs else []):
        costs.save(path)
        print(f"  written: {path}")
    rows = [] if args.no_check else check(costs)
    found = verdicts(rows)
    for target, what, met in found:
        print(f"  {'met   ' if met else 'MISSED'} {target}: {what}")
    if args.json:
        args.json.write_text(json.dumps({"costs": costs.__dict__, "fit": raw, "check": rows},
                                        indent=1))
    return 0 if all(met for _, _, met in found) else 1


if __name__ == "__main__":
    sys.exit(main())
