"""Run a scenario: every variant on its own fabric, side by side, then the report.

Each variant gets a fresh run id; every resource it creates registers its undo step on
an ExitStack right after it exists, so success, an error, Ctrl-C and SIGTERM all unwind
the same way, in reverse order.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path

from testbed import fault_run, ovs_socket, phantom, report, telemetry_report, workloads
from testbed.bringup import bring_up, queue_summary
from testbed.capabilities import Capabilities, probe
from testbed.errors import ConfigError
from testbed.fabric import OVS_SOCKET_BUFFER
from testbed.naming import new_run_id, run_prefix
from testbed.procs import sigterm_as_interrupt
from testbed.results import agents_entry, training_entry, write_json
from testbed.scenario import Scenario, Variant
from testbed.seeds import combine

Progress = Callable[[str], None]


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def run_variant(variant: Variant, *, index: int, total: int, scenario: Scenario,
                caps: Capabilities, out: Path, progress: Progress,
                seed: int | None = None) -> dict:
    """Bring up, measure and tear down one variant; returns its ``runs`` entry."""
    run_id = new_run_id()
    seed = scenario.seed if seed is None else seed
    tag = f"[{index}/{total}] {variant.name}"
    spec = variant.fabric(run_prefix(run_id))
    entry: dict = {"name": variant.name, "run_id": run_id, "seed": seed,
                   "reference": variant.reference, "pattern": variant.training["pattern"]}
    with ExitStack() as stack:
        progress(f"{tag}: starting fabric ({spec.planes} planes, {len(spec.switches)} switches, "
                 f"{len(spec.hosts)} hosts, {len(spec.links)} links)")
        entry["controller_mode"] = variant.controller["mode"]
        live = bring_up(spec, caps, run_id=run_id, controller=variant.controller, out=out,
                        stack=stack, seed=seed)
        fabric, times = live.fabric, live.times
        progress(f"{tag}: fabric up in {times.start_s:.2f} s, every plane reachable; "
                 f"traffic for {scenario.duration_s:g} s")
        send_buffer = ovs_socket.send_buffer_bytes() if caps.ovs_datapath == "user" else None
        if send_buffer is not None and send_buffer < OVS_SOCKET_BUFFER:
            progress(f"{tag}: warning: ovs-vswitchd's shared send socket has a "
                     f"{send_buffer // 1024} KB buffer, not {OVS_SOCKET_BUFFER >> 20} MB "
                     f"({fabric.send_socket_problem}): all switch queues together hold at "
                     "most that; more is dropped unseen by the queues")

        work = workloads.start(fabric, variant, out=out, pid_dir=live.pid_dir,
                               duration_s=scenario.duration_s, seed=seed, stack=stack)
        faults = (fault_run.start(live, variant.faults, out=out, t0=work.start_at,
                                  duration_s=scenario.duration_s, stack=stack)
                  if variant.faults else None)
        last = [0.0]

        def tick(elapsed: float, chains: int) -> None:
            if elapsed - last[0] >= 5:
                last[0] = elapsed
                running = (f"chains finished: {chains}" if variant.agents["enabled"]
                           else "training running")
                progress(f"{tag}: {elapsed:4.0f} s  {running}")

        workloads.wait_done(work, scenario.duration_s, tick)
        if faults:
            faults.stop(end=time.time())
        queues = queue_summary(fabric.queue_stats(), fabric.port_roles())
        if live.phantom_table:  # the marks per port and class, before the table goes
            entry["ecn"] = phantom.summary(phantom.read_marks(live.phantom_table),
                                           fabric.port_roles(),
                                           variant.controller["ecn"]["drain"], spec.prefix)
        stack.close()  # teardown now, so its time is measured
        entry["fabric"] = {**spec.counts(), "start_s": round(times.start_s, 3),
                           "build_s": round(times.build_s, 3),
                           "configure_s": round(times.configure_s, 3),
                           "stop_s": round(fabric.times.stop_s, 3),
                           "paths_installed_s": round(times.paths_s, 3),
                           "delay_ms": spec.delay_ms, "delay_applied": fabric.delay_applied,
                           "queue_kb": spec.queue_kb, "mtu": spec.mtu,
                           "queues": queues, "ovs_send_buffer_bytes": send_buffer}
    entry["telemetry"] = telemetry_report.summarize(out / "telemetry.jsonl",
                                                    out / "controller-events.jsonl")
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
        check_ecn_backend(scenario, caps)
        seeds = scenario.run_seeds if scenario.kind == "fabric" else ()
        summary["seeds"] = list(seeds)
        total = len(scenario.variants) * len(seeds)
        per_seed: dict[str, list[dict]] = {}
        index = 0
        for seed in seeds:  # variants interleaved per seed: noise touches them alike
            for variant in scenario.variants:
                index += 1
                folder = Path("variants") / variant.name
                if len(seeds) > 1:
                    folder = folder / f"seed{seed}"
                entry = run_variant(variant, index=index, total=total, scenario=scenario,
                                    caps=caps, out=out / folder, progress=progress, seed=seed)
                entry["dir"] = str(folder)
                per_seed.setdefault(variant.name, []).append(entry)
                summary["runs"] = [combine(name, entries) for name, entries in per_seed.items()]
                write_json(out / "summary.json", summary)
    fault_list = [{"variant": r["name"], **({"seed": r["seed"]} if "seed" in r else {}), **f}
                  for entries in per_seed.values() for r in entries
                  for f in r.get("faults", [])]
    if fault_list:
        summary["faults"] = fault_list
    summary["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    write_json(out / "summary.json", summary)
    report.write(summary, out)
    return summary


def check_ecn_backend(scenario: Scenario, caps: Capabilities) -> None:
    """``ecn.mode: switch`` needs RED in the kernel, ``phantom`` needs nftables; without
    them the run stops before anything is created (``auto`` falls back to controller
    marking instead)."""
    for i, variant in enumerate(scenario.variants):
        mode = variant.controller["ecn"]["mode"]
        if mode == "switch" and not caps.red:
            raise ConfigError(f"variants[{i}].controller.ecn.mode",
                              "'switch' marking needs the RED qdisc, which this kernel lacks; "
                              "use 'auto' (RED where present, else the controller marks)")
        if mode == "phantom" and not caps.nftables:
            raise ConfigError(f"variants[{i}].controller.ecn.mode",
                              "'phantom' marking needs nftables (the nft command and "
                              "nf_tables in the kernel), which this host lacks")


def default_out(results_root: Path, name: str) -> Path:
    """``results/NAME/TIMESTAMP``; ``results/latest`` will point there."""
    return results_root / name / time.strftime("%Y%m%d-%H%M%S")


def link_latest(results_root: Path, out: Path) -> None:
    latest = results_root / "latest"
    if latest.is_symlink() or latest.exists():
        latest.unlink()
    latest.symlink_to(out.resolve())
