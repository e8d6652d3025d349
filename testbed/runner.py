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
from dataclasses import asdict, dataclass
from pathlib import Path

from controllers.config import ControllerConfig, ecn_backend
from testbed import fault_run, ovs_socket, phantom, report, telemetry_report, workloads
from testbed.capabilities import Capabilities, probe
from testbed.errors import BringUpError, ConfigError
from testbed.fabric import OVS_SOCKET_BUFFER, Fabric, FabricTimes
from testbed.naming import claim, new_run_id, run_prefix
from testbed.procs import Helper, sigterm_as_interrupt, wait_for
from testbed.results import agents_entry, read_jsonl, training_entry, write_json
from testbed.scenario import Scenario, Variant
from testbed.seeds import combine
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
    #: nftables table of the phantom-queue marker (ECN backend ``phantom``), else None
    phantom_table: str | None = None

    @property
    def spec(self) -> FabricSpec:
        return self.fabric.spec


def controller_config(controller: dict, spec: FabricSpec, caps: Capabilities) -> dict:
    """The controller section as the controller reads it: plus the link rate and who marks
    CE (``ecn.mode: auto`` resolved from the host's RED); BringUpError if impossible."""
    config = {**controller, "link_mbps": spec.link_mbps}
    ecn_mode = (controller.get("ecn") or {}).get("mode", "off")
    if ecn_mode == "switch" and not caps.red:
        raise BringUpError("controller.ecn.mode: 'switch' needs RED, which this kernel lacks "
                           "(use 'auto' or 'controller')")
    if ecn_mode == "phantom" and not caps.nftables:
        raise BringUpError("controller.ecn.mode: 'phantom' needs nftables (the nft command "
                           "and nf_tables in the kernel)")
    config["ecn_backend"] = ecn_backend(ecn_mode, red=caps.red)
    return config


def bring_up(spec: FabricSpec, caps: Capabilities, *, run_id: str, out: Path,
             stack: ExitStack, mode: str | None = None,
             controller: dict | None = None, telemetry: bool = True,
             controller_args: Sequence[str] = ()) -> LiveFabric:
    """Start the controller and the fabric for ``spec``; every undo step goes on ``stack``.

    ``controller`` is the variant's resolved controller section (``mode`` alone is the
    older form). Returns once the controller has installed the paths on every switch and
    the first and last host reach each other on every plane.
    """
    out.mkdir(parents=True, exist_ok=True)
    spec_file = out / "spec.json"
    spec.to_json(spec_file)
    config = controller_config(controller or {"mode": mode or "ecmp"}, spec, caps)
    config_file = out / "controller.json"
    write_json(config_file, config)
    pids = claim(run_id)
    stack.callback(shutil.rmtree, pids, ignore_errors=True)

    port = free_port()
    status = out / "controller-events.jsonl"
    controller_proc = Helper(
        "controller",
        [sys.executable, "-m", "controllers", "--spec", str(spec_file), "--port", str(port),
         "--status", str(status), "--config", str(config_file),
         *(["--telemetry", str(out / "telemetry.jsonl")] if telemetry else []),
         *controller_args],
        pid_dir=pids, log=out / "controller.log",
    )
    stack.callback(controller_proc.stop)
    if not wait_for(lambda: _events(status, "started"), 30):
        raise BringUpError(f"controller did not start (see {out / 'controller.log'})")

    red = None
    if config["ecn_backend"] == "switch":  # the class that marks earliest sets the queue
        classes = ControllerConfig.from_dict(config).ecn.classes.values()
        red = asdict(min(classes, key=lambda c: c.min_kb))
    fabric = Fabric(spec, caps, run_id=run_id, controller_port=port, red=red)
    stack.callback(fabric.stop)
    n = len(spec.switches)

    def await_paths() -> None:
        installed = lambda: {e["dpid"] for e in _events(status, "installed")}  # noqa: E731
        if not wait_for(lambda: len(installed()) >= n, 30):
            raise BringUpError(
                f"controller installed paths on {len(installed())} of {n} switches in 30 s")

    times = fabric.start(await_paths)
    table = None
    if config["ecn_backend"] == "phantom":  # per-packet marking in the ports' egress path
        ecn = ControllerConfig.from_dict(config).ecn
        table = phantom.install(spec, ecn.classes, ecn.drain, stack)
    return LiveFabric(fabric=fabric, controller=controller_proc, status=status, pid_dir=pids,
                      times=times, phantom_table=table)


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
                        stack=stack,
                        controller_args=fault_run.controller_args(variant.controller))
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
