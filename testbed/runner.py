"""Run a scenario: every variant on its own fabric, side by side, then the report.

Each variant gets a fresh run id; every resource it creates registers its undo step on
an ExitStack right after it exists, so success, an error, Ctrl-C and SIGTERM all unwind
the same way, in reverse order.
"""

from __future__ import annotations

import shutil
import socket
import sys
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from testbed import fault_run, report, workloads
from testbed.capabilities import Capabilities, probe
from testbed.errors import BringUpError
from testbed.fabric import Fabric, FabricTimes
from testbed.naming import claim, new_run_id, run_prefix
from testbed.procs import Helper, sigterm_as_interrupt, wait_for
from testbed.results import agents_entry, read_jsonl, training_entry, write_json
from testbed.scenario import Scenario, Variant
from topologies.spec import FabricSpec

Progress = Callable[[str], None]


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _events(path: Path, event: str) -> list[dict]:
    return [e for e in read_jsonl(path) if e.get("event") == event]


@dataclass
class LiveFabric:
    """A fabric with its controller, up and checked; torn down by the stack it was given."""

    fabric: Fabric
    controller: Helper
    status: Path
    pid_dir: Path
    times: FabricTimes

    @property
    def spec(self) -> FabricSpec:
        return self.fabric.spec


def bring_up(spec: FabricSpec, caps: Capabilities, *, run_id: str, mode: str, out: Path,
             stack: ExitStack, controller_args: Sequence[str] = ()) -> LiveFabric:
    """Start the controller and the fabric for ``spec``; every undo step goes on ``stack``.

    Returns once the controller has installed the paths on every switch and the first
    and last host reach each other on every plane.
    """
    out.mkdir(parents=True, exist_ok=True)
    spec_file = out / "spec.json"
    spec.to_json(spec_file)
    pids = claim(run_id)
    stack.callback(shutil.rmtree, pids, ignore_errors=True)

    port = free_port()
    status = out / "controller-events.jsonl"
    controller = Helper(
        "controller",
        [sys.executable, "-m", "controllers", "--spec", str(spec_file), "--port", str(port),
         "--status", str(status), "--mode", mode, *controller_args],
        pid_dir=pids, log=out / "controller.log",
    )
    stack.callback(controller.stop)
    if not wait_for(lambda: _events(status, "started"), 30):
        raise BringUpError(f"controller did not start (see {out / 'controller.log'})")

    fabric = Fabric(spec, caps, run_id=run_id, controller_port=port)
    stack.callback(fabric.stop)
    n = len(spec.switches)

    def await_paths() -> None:
        installed = lambda: {e["dpid"] for e in _events(status, "installed")}  # noqa: E731
        if not wait_for(lambda: len(installed()) >= n, 30):
            raise BringUpError(
                f"controller installed paths on {len(installed())} of {n} switches in 30 s")

    times = fabric.start(await_paths)
    return LiveFabric(fabric=fabric, controller=controller, status=status, pid_dir=pids,
                      times=times)


def queue_summary(stats: dict[str, dict[str, int]], roles: dict[str, str]) -> dict:
    """Egress bytes and drops summed by port role, plus the port that dropped most."""
    out: dict = {role: {"ports": 0, "bytes": 0, "drops": 0} for role in sorted(set(roles.values()))}
    for ifname, counters in stats.items():
        agg = out[roles[ifname]]
        agg["ports"] += 1
        agg["bytes"] += counters["bytes"]
        agg["drops"] += counters["drops"]
    worst = max(stats.items(), key=lambda kv: kv[1]["drops"], default=None)
    out["most_drops"] = ({"port": worst[0], "role": roles[worst[0]], **worst[1]}
                         if worst and worst[1]["drops"] else None)
    return out


def run_variant(variant: Variant, *, index: int, total: int, scenario: Scenario,
                caps: Capabilities, out: Path, progress: Progress) -> dict:
    """Bring up, measure and tear down one variant; returns its ``runs`` entry."""
    run_id = new_run_id()
    tag = f"[{index}/{total}] {variant.name}"
    spec = variant.fabric(run_prefix(run_id))
    entry: dict = {"name": variant.name, "run_id": run_id}
    with ExitStack() as stack:
        progress(f"{tag}: starting fabric ({spec.planes} planes, {len(spec.switches)} switches, "
                 f"{len(spec.hosts)} hosts, {len(spec.links)} links)")
        live = bring_up(spec, caps, run_id=run_id, mode=variant.controller["mode"], out=out,
                        stack=stack,
                        controller_args=fault_run.controller_args(variant.controller))
        fabric, times = live.fabric, live.times
        progress(f"{tag}: fabric up in {times.start_s:.2f} s, every plane reachable; "
                 f"traffic for {scenario.duration_s:g} s")

        work = workloads.start(fabric, variant, out=out, pid_dir=live.pid_dir,
                               duration_s=scenario.duration_s, seed=scenario.seed, stack=stack)
        faults = (fault_run.start(live, variant.faults, out=out, t0=work.start_at,
                                  duration_s=scenario.duration_s, stack=stack)
                  if variant.faults else None)
        last = [0.0]

        def tick(elapsed: float, chains: int) -> None:
            if elapsed - last[0] >= 5:
                last[0] = elapsed
                progress(f"{tag}: {elapsed:4.0f} s  chains finished: {chains}")

        workloads.wait_done(work, scenario.duration_s, tick)
        if faults:
            faults.stop(end=time.time())
        queues = queue_summary(fabric.queue_stats(), fabric.port_roles())
        stack.close()  # teardown now, so its time is measured
        entry["fabric"] = {**spec.counts(), "start_s": round(times.start_s, 3),
                           "build_s": round(times.build_s, 3),
                           "configure_s": round(times.configure_s, 3),
                           "stop_s": round(fabric.times.stop_s, 3),
                           "paths_installed_s": round(times.paths_s, 3),
                           "delay_ms": spec.delay_ms, "delay_applied": fabric.delay_applied,
                           "queue_kb": spec.queue_kb, "mtu": spec.mtu,
                           "queues": queues}
    if faults:
        entry["faults"] = faults.entries()
        progress(f"{tag}: " + "; ".join(
            f"{f['fault']} {f['target']}: repair {f['repair_ms']} ms, "
            f"lost {f['lost_packets']}, chains failed {f['chains_failed']}"
            for f in entry["faults"]))
    entry["agents"] = agents_entry(work.chains_file)
    entry["training"] = training_entry(
        [work.rank_file(r) for r in range(len(work.ranks or []))])
    a, t = entry["agents"], entry["training"]
    lat = a["latency_ms"]
    line = f"{tag}: done; chains {a['chains_completed']}/{a['chains_started']}"
    if lat["p50"] is not None:
        line += f", p50 {lat['p50']:.1f} ms, p99 {lat['p99']:.1f} ms"
    if t["iterations"]:
        line += f"; training {t['goodput_mbps']:.1f} Mb/s"
    progress(line)
    return entry


def run(scenario: Scenario, out: Path, progress: Progress = _stderr) -> dict:
    """Run every variant of ``scenario`` into ``out``; returns the summary."""
    out.mkdir(parents=True, exist_ok=True)
    with sigterm_as_interrupt():
        caps = probe(new_run_id())
        what = (f"{len(scenario.variants)} variants" if scenario.kind == "fabric"
                else f"{scenario.kind} experiment")
        progress(f"{scenario.name}: {what}, switch datapath {caps.ovs_datapath}; "
                 f"results in {out}")
        summary = {
            "scenario": scenario.name,
            "kind": scenario.kind,
            "description": scenario.description,
            "seed": scenario.seed,
            "duration_s": scenario.duration_s,
            "capabilities": caps.to_dict(),
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "runs": [],
        }
        write_json(out / "manifest.json", {**summary, "scenario_source": scenario.source})
        if scenario.kind != "fabric":
            result = scenario.experiment().run(  # run() validates the section itself
                scenario.source[scenario.kind], out=out, duration_s=scenario.duration_s,
                seed=scenario.seed, run_id=new_run_id(), progress=progress)
            summary["runs"] = result["runs"]
            summary[scenario.kind] = result[scenario.kind]
            # the experiment's own record (MACsec: the lab keys that decrypt wire.pcap)
            write_json(out / "manifest.json", {**summary, "scenario_source": scenario.source})
        total = len(scenario.variants)
        for i, variant in enumerate(scenario.variants, 1):
            entry = run_variant(variant, index=i, total=total, scenario=scenario, caps=caps,
                                out=out / "variants" / variant.name, progress=progress)
            summary["runs"].append(entry)
            write_json(out / "summary.json", summary)
    fault_list = [{"variant": r["name"], **f} for r in summary["runs"] for f in r.get("faults", [])]
    if fault_list:
        summary["faults"] = fault_list
    summary["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    write_json(out / "summary.json", summary)
    report.write(summary, out)
    return summary


def default_out(results_root: Path, name: str) -> Path:
    """``results/NAME/TIMESTAMP``; ``results/latest`` will point there."""
    return results_root / name / time.strftime("%Y%m%d-%H%M%S")


def link_latest(results_root: Path, out: Path) -> None:
    latest = results_root / "latest"
    if latest.is_symlink() or latest.exists():
        latest.unlink()
    latest.symlink_to(out.resolve())
