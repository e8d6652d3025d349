"""The fabric kind: variants of one emulated fabric (Mininet + OVS + the controller),
with agent chains, training collectives and faults, side by side.

Sections: ``topology`` (a builder and its parameters), ``controller``, ``agents``,
``training``, ``faults`` and ``variants``, each variant deep-merging its overrides onto
the scenario's sections. Every variant gets a fresh run id and its own fabric; every
resource registers its undo step on an ExitStack right after it exists.

A variant's model and merge are :mod:`testbed.experiments.fabric.variant`, its checks
:mod:`testbed.experiments.fabric.checks`; this module holds the kind, the run of a
variant and its report.
"""

from __future__ import annotations

import dataclasses
import json
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, create_model

from testbed.acceptance import step as acceptance_step
from testbed.core import layout
from testbed.core.fidelity import WatchedLink
from testbed.core.results import agents_entry, training_entry
from testbed.errors import ConfigError
from testbed.experiments import base
from testbed.experiments.fabric.checks import check_congestion_control, check_variant
from testbed.experiments.fabric.report import report_lines
from testbed.experiments.fabric.schema import (
    SECTIONS,
    Agents,
    Controller,
    FaultEntry,
    Training,
    Workload,
)
from testbed.experiments.fabric.variant import Variant, VariantSection, merge, merge_topology
from testbed.fabric import drops, ovs_socket, phantom, qos
from testbed.fabric.bringup import bring_up, ecn_lacks, queue_summary
from testbed.fabric.net import OVS_SOCKET_BUFFER, Fabric
from testbed.fabric.qos import Qos, qos_entry
from testbed.fabric.switchd import SwitchSettings
from testbed.faults import run as fault_run
from testbed.faults.fabric import needs
from testbed.host.capabilities import Capabilities
from testbed.host.naming import new_run_id, run_prefix
from testbed.lab import capture
from testbed.monitor import launch as monitor
from testbed.operations import expand as expansion
from testbed.operations import replace
from testbed.reports import telemetry as telemetry_report
from testbed.workloads import generators
from testbed.workloads import kinds as workload_kinds
from topologies.build import BUILDERS, DEFAULT, SHIPPED


def watched_ports(fabric: Fabric) -> list[WatchedLink]:
    """Every shaped switch port on this machine, for the fidelity monitor (none when
    nothing is shaped; a fabric over several machines: this machine's part).
    With netem delay a queue also holds the packets in flight: up to the rate times the
    delay, which is not saturation."""
    if not fabric.caps.htb:
        return []
    spec = fabric.spec
    in_flight = spec.delay_ms / 1000 if fabric.delay_applied else 0.0
    return [WatchedLink(None, ifname, mbps,
                        int(mbps * 1e6 / 8 * in_flight) + 2 * spec.mtu if in_flight else 0)
            for ifname, mbps in ((p.ifname, p.mbps) for p in spec.switch_ports()
                                 if fabric.is_here(p.switch))]


def topology_section() -> dict:
    """The JSON Schema of ``topology``: one of the shipped builders' parameter models
    (each with its ``builder`` name), or a builder named by dotted path."""
    options: list[Any] = []
    for name in SHIPPED:
        model = BUILDERS[name].Params
        default = name if name in (DEFAULT, "explicit") else ...
        options.append(create_model(f"{model.__module__.rsplit('.', 1)[-1]}_topology",
                                    __base__=model,
                                    builder=(Literal[name], Field(  # type: ignore
                                        default, description=f"{name}: the builder whose "
                                                             "parameters follow"))))
    options.append({"type": "object", "required": ["builder"],
                    "properties": {"builder": {"type": "string",
                                               "pattern": r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$"}},
                    "description": "a builder of your own: package.module:Class"})
    return {"anyOf": options, "description": "the fabric's graph: a builder and its "
                                             "parameters (leaf-spine by default)"}


def _clip_repr(value: Any) -> str:
    text = repr(value) if isinstance(value, str | int | float | bool) else type(value).__name__
    return text[:40]


class FabricExperiment(base.Experiment):
    KIND = "fabric"
    LAB = "testbed.lab.fabric_lab:FabricLab"
    LAB_TRAFFIC = True
    LAB_SERVERS = True
    SOME_VARIANTS = True  # each variant its own fabric; comparisons are the report's
    SECTIONS = {"topology": topology_section(), "controller": Controller, "agents": Agents,
                "training": Training, "qos": Qos, "switches": SwitchSettings,
                "acceptance": SECTIONS["acceptance"], "replacement": SECTIONS["replacement"],
                "faults": {"type": "array", "items": FaultEntry},
                "workloads": list[Workload],
                "variants": {"type": "array", "items": VariantSection},
                "capture": {"type": "array", "items": {"type": "string"},
                            "description": "ports to capture (pcap per port), e.g. "
                                           "[p0l0e3, n0p0r0]"}}

    @classmethod
    def scale_rates(cls, data: dict, factor: float) -> dict:
        from testbed.experiments.fabric.rates import scale

        return scale(data, factor)

    def __init__(self, data: dict, **kw: Any) -> None:
        super().__init__(data, **kw)
        base_ = {s: {} if data.get(s) is None else data[s] for s in ("topology", *SECTIONS)}
        for s, v in base_.items():  # given empty or as a list, a string, false: not a default
            if not isinstance(v, dict):
                raise ConfigError(s, f"must be a mapping, got {type(v).__name__}")
        checked = {"seed": self.seed, "duration_s": self.duration_s}
        base_variant = check_variant(self.name, base_, "",  # base errors by path
                                     data.get("faults"), data.get("workloads"), **checked)
        raw_variants = data.get("variants")
        alone = raw_variants is None  # the one variant is the base, as checked
        if alone:
            raw_variants = [{"name": self.name}]
        if not isinstance(raw_variants, list) or not raw_variants:
            raise ConfigError("variants", "must be a list of one variant or more, got "
                                          f"{_clip_repr(raw_variants)}")
        variants, seen = [], set()
        for i, raw in enumerate(raw_variants):
            where = f"variants[{i}]"
            entry = self.section(VariantSection, raw, where)
            if entry.name in seen:
                raise ConfigError(f"{where}.name", f"repeats {entry.name!r}")
            seen.add(entry.name)
            merged = {s: (merge_topology if s == "topology" else merge)(
                base_[s], getattr(entry, s) or {}) for s in base_}
            faults = raw["faults"] if "faults" in raw else data.get("faults")
            loads = raw["workloads"] if "workloads" in raw else data.get("workloads")
            variant = (base_variant if alone else
                       check_variant(entry.name, merged, where, faults, loads, **checked))
            ports = raw["capture"] if "capture" in raw else data.get("capture")
            variants.append(dataclasses.replace(
                variant, reference=entry.reference,
                capture=capture.parse_ports(ports, variant.spec,
                                            f"{where}.capture" if "capture" in raw
                                            else "capture")))
        if variants[0].reference:
            raise ConfigError("variants[0].reference", "the first variant is the baseline; "
                                                        "put the reference after it")
        self._variants = tuple(variants)

    @property
    def variants(self) -> tuple[Variant, ...]:
        return self._variants

    def describe(self) -> str:
        return (f"{len(self.variants)} variants "
                f"({', '.join(v.name for v in self.variants)})")

    # -- validation (each variant's own: testbed.experiments.fabric.checks) ----------------
    def check_host(self, caps: Capabilities) -> None:
        """``ecn.mode: switch`` needs RED in the kernel, ``phantom`` needs nftables, a
        fault kind may need netem or HTB, ``agents.congestion_control`` its algorithm in
        the kernel (``dctcp``: tcp_dctcp); without them the run stops before anything is
        created (``auto`` falls back to controller marking instead)."""
        for i, variant in enumerate(self.variants):
            for feature, action in needs(variant.faults).items():
                if not getattr(caps, feature):
                    raise ConfigError(f"variants[{i}].faults",
                                      f"{action!r} needs {feature}, which this kernel lacks")
            classes = qos.classes_of(variant.qos)
            if classes and not caps.htb:
                raise ConfigError(f"variants[{i}].qos.classes", "traffic classes need HTB "
                                  "(sch_htb), which this kernel lacks")
            if classes and caps.netem and variant.topology.get("delay_ms"):
                raise ConfigError(f"variants[{i}].qos.classes", "traffic classes do not carry "
                                  "link delay yet (netem is one queue); use delay_ms: 0")
            if reason := ecn_lacks(variant.controller["ecn"]["mode"], caps):
                raise ConfigError(f"variants[{i}].controller.ecn.mode", reason)
            check_congestion_control(variant.agents["congestion_control"], caps,
                                     f"variants[{i}].agents.congestion_control")

    # -- running ---------------------------------------------------------------------------
    def start(self, ctx: base.RunContext) -> None:
        # the count of variants is the runner's line (testbed run --variant runs fewer)
        ctx.progress(f"{self.name}: switch datapath {ctx.caps.ovs_datapath}")

    def run_variant(self, variant: Variant, *, seed: int, out: Path, tag: str,
                    ctx: base.RunContext) -> dict:
        """Bring up, measure and tear down one variant; returns its ``runs`` entry."""
        caps, progress, duration_s = ctx.caps, ctx.progress, ctx.duration_s
        run_id = new_run_id()
        spec = variant.fabric(run_prefix(run_id))
        elephants = [e for e in variant.workloads if e["kind"] == "elephants"]
        entry: dict = {"name": variant.name, "run_id": run_id, "seed": seed,
                       "reference": variant.reference,
                       "pattern": (workload_kinds.elephant_label(elephants[0]) if elephants
                                   else variant.training["pattern"])}
        with ExitStack() as stack:
            progress(f"{tag}: starting fabric ({spec.planes} planes, {len(spec.switches)} "
                     f"switches, {len(spec.hosts)} hosts, {len(spec.links)} links)")
            entry["controller_mode"] = variant.controller["mode"]
            live = bring_up(spec, caps, run_id=run_id, controller=variant.controller, out=out,
                            stack=stack, seed=seed, qos=variant.qos,
                            switches=variant.switches, servers=ctx.servers)
            fabric, times = live.fabric, live.times
            if (out / layout.PLACEMENT).exists():  # spread over several machines
                entry["placement"] = json.loads((out / layout.PLACEMENT).read_text())
            accept = variant.acceptance
            if accept.get("enabled") or accept.get("plant"):  # before the measured window:
                # its own figures guard against a machine that falls behind
                entry["acceptance"], agents, training = acceptance_step.run_step(
                    live, accept, seed=seed, out=out, stack=stack, name=tag,
                    agents=variant.agents, training=variant.training, progress=progress)
                variant = dataclasses.replace(variant, agents=agents, training=training)
            progress(f"{tag}: fabric up in {times.start_s:.2f} s, every plane reachable; "
                     f"traffic for {duration_s:g} s")
            if live.metrics_url:
                progress(f"{tag}: Prometheus metrics at {live.metrics_url}")
                entry["metrics_url"] = live.metrics_url
            watched = monitor.watch_run(ctx, live, out=out, stack=stack, tag=tag)
            send_buffer = (ovs_socket.send_buffer_bytes(fabric.switch_pids())
                           if caps.ovs_datapath == "user" else None)
            if send_buffer is not None and send_buffer < OVS_SOCKET_BUFFER:
                progress(f"{tag}: warning: ovs-vswitchd's shared send socket has a "
                         f"{send_buffer // 1024} KB buffer, not {OVS_SOCKET_BUFFER >> 20} MB "
                         f"({fabric.send_socket_problem}): all switch queues together hold "
                         "at most that; more is dropped unseen by the queues")
            capture.start_all(fabric, variant.capture, out=out, pid_dir=live.pid_dir,
                              stack=stack)
            drops_before = fabric.unseen_drops()
            work = generators.start(fabric, variant, out=out, pid_dir=live.pid_dir,
                                   duration_s=duration_s, seed=seed, stack=stack)
            # the measured window: the traffic, from its common start time (the
            # generators' start-up, every rank's Python getting ready, is bring-up)
            stack.enter_context(ctx.watch(watched_ports(fabric)))
            # the other machines' monitors sample the window too (unless the run is not
            # monitored: testbed run --no-fidelity)
            on_servers = ctx.monitor is not None and ctx.monitor.enabled
            if on_servers:
                fabric.servers_watch()
            extra = None
            if variant.workloads:
                extra = workload_kinds.ExtraWorkloads(fabric, list(variant.workloads), out=out,
                                                 pid_dir=live.pid_dir, stack=stack,
                                                 seed=seed, duration_s=duration_s)
                extra.start(work.start_at)
            replacer = None
            if variant.replacement.get("enabled"):
                replacer = replace.Replacer(
                    fabric, spec, agents=variant.agents, training=variant.training,
                    work=work, spares=[  # not a node acceptance found faulty
                        n for n in variant.replacement["spares"]
                        if f"n{n}" not in entry.get("acceptance", {}).get("excluded_nodes", [])],
                    out=out,
                    pid_dir=live.pid_dir, stack=stack, end_at=work.start_at + duration_s,
                    seed=seed, progress=lambda m: progress(f"{tag}: {m}"))
                replacer.start()
            faults = (fault_run.start(live, variant.faults, out=out, t0=work.start_at,
                                      duration_s=duration_s, stack=stack, seed=seed)
                      if variant.faults else None)
            last = [0.0]

            def tick(elapsed: float, chains: int) -> None:
                if elapsed - last[0] >= 5:
                    last[0] = elapsed
                    running = (f"chains finished: {chains}" if variant.agents["enabled"]
                               else "training running")
                    progress(f"{tag}: {elapsed:4.0f} s  {running}")

            generators.wait_done(work, duration_s, tick)
            if extra:
                extra.wait(until=work.start_at + duration_s)
                entry["workloads"] = extra.stop()
                for rec in entry["workloads"]:
                    if rec.get("error"):
                        progress(f"{tag}: workloads[{rec['index']}] did not start: "
                                 f"{rec['error']}")
                if elephants:
                    entry["elephants"] = generators.elephants_summary(entry["workloads"],
                                                                     spec.link_mbps)
            if faults:
                faults.stop(end=time.time())
                grown = out / expansion.RECORD
                if grown.exists():  # a rack was added during the run (add_rack)
                    entry["expansion"] = json.loads(grown.read_text())
            if replacer is not None:
                record = replacer.record()
                replace.chains_after(record["events"], work.chains_file)
                entry["replacement"] = {k: v for k, v in record.items() if k != "windows"}
            if watched is not None:  # what watching cost, over the variant's traffic
                entry["monitor"] = {**watched.record(), "cpu": watched.cpu()}
            servers = fabric.servers_fidelity() if on_servers else []
            if servers:
                entry["servers"] = servers
            roles = fabric.port_roles()
            stats = fabric.queue_stats()
            unseen = drops.delta(drops_before, fabric.unseen_drops())
            queues = queue_summary(stats, roles)
            if live.phantom_table:  # the marks per port and class, before the table goes
                entry["ecn"] = phantom.summary(phantom.read_marks(live.phantom_table), roles,
                                               variant.controller["ecn"]["drain"], spec.prefix)
            stack.close()  # teardown now, so its time is measured
            entry["fabric"] = {**spec.counts(), "start_s": round(times.start_s, 3),
                               "build_s": round(times.build_s, 3),
                               "configure_s": round(times.configure_s, 3),
                               "stop_s": round(fabric.times.stop_s, 3),
                               "paths_installed_s": round(times.paths_s, 3),
                               "delay_ms": spec.delay_ms, "delay_applied": fabric.delay_applied,
                               "queue_kb": spec.queue_kb, "mtu": spec.mtu,
                               "queues": queues, "ovs_send_buffer_bytes": send_buffer,
                               "unseen_drops": unseen}
        entry["telemetry"] = telemetry_report.summarize(out / layout.TELEMETRY,
                                                        out / layout.CONTROLLER_EVENTS)
        if faults:
            entry["faults"] = faults.entries()
            progress(f"{tag}: " + "; ".join(
                f"{f['fault']} {f['target']}: repair {f['repair_ms']} ms, "
                f"lost {f['lost_packets']}, chains failed {f['chains_failed']}"
                for f in entry["faults"]))
        if (out / layout.PFC).exists():
            agents, training = variant.agents, variant.training
            names = {k: v[0] for k, v in qos.host_addresses(spec).items()}
            users = {"chains": [names[str(n)] for n in (agents["driver"],
                                                        *agents["services"].values())]
                     if agents["enabled"] else [],
                     "training": [names[str(n)] for n in training["ranks"]]
                     if training["enabled"] else []}
            record = json.loads((out / layout.PFC).read_text())
            entry["qos"] = qos_entry(record, variant.qos, roles, users, names)
            # the kick frames that restart resumed queues are dropped by design: not loss
            for port, kicks in record.get("kick_drops", {}).items():
                if port in stats:
                    stats[port]["drops"] -= kicks
            entry["fabric"]["queues"] = queue_summary(stats, roles)
            if entry["qos"]["agent_error"]:
                progress(f"{tag}: warning: the PFC agent failed: "
                         f"{entry['qos']['agent_error'][0]} (see {out / 'pfc.log'})")
        entry["agents"] = agents_entry(work.chains_file)
        entry["tcp_congestion_control"] = work.congestion_control
        entry["training"] = training_entry(
            [work.rank_file(r) for r in range(len(work.ranks or []))])
        return entry

    # -- reporting -------------------------------------------------------------------------
    @staticmethod
    def report_section(summary: dict, out: Path) -> list[str]:
        return report_lines(summary, out)


EXPERIMENT = FabricExperiment
