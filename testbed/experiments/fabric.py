"""The fabric kind: variants of one emulated fabric (Mininet + OVS + the controller),
with agent chains, training collectives and faults, side by side.

Sections: ``topology`` (a builder and its parameters), ``controller``, ``agents``,
``training``, ``faults`` and ``variants``, each variant deep-merging its overrides onto
the scenario's sections. Every variant gets a fresh run id and its own fabric; every
resource registers its undo step on an ExitStack right after it exists.
"""

from __future__ import annotations

import copy
import dataclasses
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import Field

from testbed import fault_run, layout, ovs_socket, phantom, telemetry_report, workloads
from testbed.bringup import bring_up, queue_summary
from testbed.capabilities import Capabilities
from testbed.errors import ConfigError
from testbed.experiments import base
from testbed.experiments.fabric_report import report_lines
from testbed.experiments.fabric_schema import (
    SECTIONS,
    SERVICES,
    Agents,
    Controller,
    FaultEntry,
    Name,
    Training,
)
from testbed.fabric import OVS_SOCKET_BUFFER, Fabric
from testbed.fabric_faults import parse_faults
from testbed.faults import Fault
from testbed.fidelity import WatchedLink
from testbed.naming import new_run_id, run_prefix
from testbed.results import agents_entry, training_entry
from topologies.build import TOPOLOGY_SCHEMA, build_topology
from topologies.params import ParamError, Section, join
from topologies.spec import FabricSpec
from traffic.roce import OVERHEAD as ROCE_OVERHEAD

ETHERNET_HEADER = 14


class VariantSection(Section):
    """One entry of ``variants``: a name and overrides of the scenario's sections."""

    name: Name
    reference: bool = Field(False, description="the non-blocking reference to compare with")
    topology: dict[str, Any] | None = None
    controller: dict[str, Any] | None = None
    agents: dict[str, Any] | None = None
    training: dict[str, Any] | None = None
    faults: list[dict[str, Any]] | None = None


@dataclass(frozen=True)
class Variant:
    """One side of a comparison: fully resolved sections plus the topology it builds."""

    name: str
    topology: dict[str, Any]
    controller: dict[str, Any]
    agents: dict[str, Any]
    training: dict[str, Any]
    reference: bool = False  # the non-blocking reference the report compares against
    faults: tuple[Fault, ...] = ()

    def fabric(self, prefix: str) -> FabricSpec:
        return build_topology(self.topology, prefix)


def _merge(base_: dict, override: dict) -> dict:
    out = copy.deepcopy(base_)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def watched_ports(fabric: Fabric) -> list[WatchedLink]:
    """Every shaped switch port, for the fidelity monitor (none when nothing is shaped).
    With netem delay a queue also holds the packets in flight: up to the rate times the
    delay, which is not saturation."""
    if not fabric.caps.htb:
        return []
    spec = fabric.spec
    in_flight = spec.delay_ms / 1000 if fabric.delay_applied else 0.0
    return [WatchedLink(None, ifname, mbps,
                        int(mbps * 1e6 / 8 * in_flight) + 2 * spec.mtu if in_flight else 0)
            for ifname, mbps in fabric.switch_ports()]


def _check_node(where: str, value: int, nodes: int) -> None:
    if not 0 <= value < nodes:
        raise ConfigError(where, f"must be a node index 0..{nodes - 1}, got {value!r}")


class FabricExperiment(base.Experiment):
    KIND = "fabric"
    SECTIONS = {"topology": TOPOLOGY_SCHEMA, "controller": Controller, "agents": Agents,
                "training": Training, "faults": {"type": "array", "items": FaultEntry},
                "variants": {"type": "array", "items": VariantSection}}

    def __init__(self, data: dict, **kw: Any) -> None:
        super().__init__(data, **kw)
        base_ = {s: data.get(s) or {} for s in ("topology", *SECTIONS)}
        for s, v in base_.items():
            if not isinstance(v, dict):
                raise ConfigError(s, "must be a mapping")
        self._check_variant(self.name, base_, "", data.get("faults"))  # base errors by path
        raw_variants = data.get("variants") or [{"name": self.name}]
        if not isinstance(raw_variants, list):
            raise ConfigError("variants", "must be a list")
        variants, seen = [], set()
        for i, raw in enumerate(raw_variants):
            where = f"variants[{i}]"
            entry = self.section(VariantSection, raw, where)
            if entry.name in seen:
                raise ConfigError(f"{where}.name", f"repeats {entry.name!r}")
            seen.add(entry.name)
            merged = {s: _merge(base_[s], getattr(entry, s) or {}) for s in base_}
            faults = raw["faults"] if "faults" in raw else data.get("faults")
            variants.append(dataclasses.replace(
                self._check_variant(entry.name, merged, where, faults),
                reference=entry.reference))
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

    # -- validation ------------------------------------------------------------------------
    def _check_variant(self, name: str, sections: dict, where: str, faults: Any) -> Variant:
        prefix = f"{where}." if where else ""
        resolved = {s: self.section(model, sections.get(s), f"{prefix}{s}").model_dump()
                    for s, model in SECTIONS.items()}
        try:
            spec = build_topology(sections.get("topology") or {}, "tb0000")
        except ParamError as exc:
            raise ConfigError(join(f"{prefix}topology", tuple(exc.field.split("."))),
                              exc.reason) from None
        if faults is not None:
            if not isinstance(faults, list):
                raise ConfigError(f"{prefix}faults", "must be a list of faults")
            for i, fault in enumerate(faults):
                self.section(FaultEntry, fault, f"{prefix}faults[{i}]")
        fault_list = parse_faults(faults, spec, f"{prefix}faults")
        for cls, c in resolved["controller"]["ecn"]["classes"].items():
            if c["min_kb"] >= c["max_kb"]:
                raise ConfigError(f"{prefix}controller.ecn.classes.{cls}.min_kb",
                                  f"must be less than max_kb ({c['max_kb']:g}), "
                                  f"got {c['min_kb']:g}")
        nodes = len(spec.hosts)
        agents, training = resolved["agents"], resolved["training"]
        if agents["enabled"] or agents["services"]:
            _check_node(f"{prefix}agents.driver", agents["driver"], nodes)
            for svc in SERVICES:
                if svc not in agents["services"]:
                    raise ConfigError(f"{prefix}agents.services.{svc}",
                                      "missing: give its node index")
                _check_node(f"{prefix}agents.services.{svc}", agents["services"][svc], nodes)
        if training["enabled"] or training["ranks"]:
            self._check_training(training, spec, prefix)
        return Variant(name=name, topology=sections.get("topology") or {}, **resolved,
                       faults=fault_list)

    @staticmethod
    def _check_training(training: dict, spec: FabricSpec, prefix: str) -> None:
        ranks = training["ranks"]
        if len(ranks) < 2:
            raise ConfigError(f"{prefix}training.ranks", "needs at least 2 node indices")
        for i, node in enumerate(ranks):
            _check_node(f"{prefix}training.ranks[{i}]", node, len(spec.hosts))
        if len(set(ranks)) != len(ranks):
            raise ConfigError(f"{prefix}training.ranks", f"node indices repeat: {ranks}")
        if training["stride"] and training["stride"] % len(ranks) == 0:
            raise ConfigError(f"{prefix}training.stride",
                              f"{training['stride']} sends every rank to itself with "
                              f"{len(ranks)} ranks")
        if training["dcqcn"]["min_rate_mbps"] > training["rate_mbps"]:
            raise ConfigError(f"{prefix}training.dcqcn.min_rate_mbps",
                              f"must not exceed rate_mbps ({training['rate_mbps']:g})")
        frame = training["payload"] + ROCE_OVERHEAD - ETHERNET_HEADER
        if frame > spec.mtu:
            raise ConfigError(f"{prefix}training.payload",
                              f"{training['payload']} bytes make {frame}-byte IP packets, "
                              f"over the MTU of {spec.mtu}")

    def check_host(self, caps: Capabilities) -> None:
        """``ecn.mode: switch`` needs RED in the kernel, ``phantom`` needs nftables; without
        them the run stops before anything is created (``auto`` falls back to controller
        marking instead)."""
        for i, variant in enumerate(self.variants):
            mode = variant.controller["ecn"]["mode"]
            if mode == "switch" and not caps.red:
                raise ConfigError(f"variants[{i}].controller.ecn.mode",
                                  "'switch' marking needs the RED qdisc, which this kernel "
                                  "lacks; use 'auto' (RED where present, else the "
                                  "controller marks)")
            if mode == "phantom" and not caps.nftables:
                raise ConfigError(f"variants[{i}].controller.ecn.mode",
                                  "'phantom' marking needs nftables (the nft command and "
                                  "nf_tables in the kernel), which this host lacks")

    # -- running ---------------------------------------------------------------------------
    def start(self, ctx: base.RunContext) -> None:
        ctx.progress(f"{self.name}: {len(self.variants)} variants, switch datapath "
                     f"{ctx.caps.ovs_datapath}")

    def run_variant(self, variant: Variant, *, seed: int, out: Path, tag: str,
                    ctx: base.RunContext) -> dict:
        """Bring up, measure and tear down one variant; returns its ``runs`` entry."""
        caps, progress, duration_s = ctx.caps, ctx.progress, ctx.duration_s
        run_id = new_run_id()
        spec = variant.fabric(run_prefix(run_id))
        entry: dict = {"name": variant.name, "run_id": run_id, "seed": seed,
                       "reference": variant.reference, "pattern": variant.training["pattern"]}
        with ExitStack() as stack:
            progress(f"{tag}: starting fabric ({spec.planes} planes, {len(spec.switches)} "
                     f"switches, {len(spec.hosts)} hosts, {len(spec.links)} links)")
            entry["controller_mode"] = variant.controller["mode"]
            live = bring_up(spec, caps, run_id=run_id, controller=variant.controller, out=out,
                            stack=stack, seed=seed,
                            controller_args=fault_run.controller_args(variant.controller))
            fabric, times = live.fabric, live.times
            stack.enter_context(ctx.watch(watched_ports(fabric)))  # the measured window
            progress(f"{tag}: fabric up in {times.start_s:.2f} s, every plane reachable; "
                     f"traffic for {duration_s:g} s")
            send_buffer = ovs_socket.send_buffer_bytes() if caps.ovs_datapath == "user" else None
            if send_buffer is not None and send_buffer < OVS_SOCKET_BUFFER:
                progress(f"{tag}: warning: ovs-vswitchd's shared send socket has a "
                         f"{send_buffer // 1024} KB buffer, not {OVS_SOCKET_BUFFER >> 20} MB "
                         f"({fabric.send_socket_problem}): all switch queues together hold "
                         "at most that; more is dropped unseen by the queues")
            work = workloads.start(fabric, variant, out=out, pid_dir=live.pid_dir,
                                   duration_s=duration_s, seed=seed, stack=stack)
            faults = (fault_run.start(live, variant.faults, out=out, t0=work.start_at,
                                      duration_s=duration_s, stack=stack)
                      if variant.faults else None)
            last = [0.0]

            def tick(elapsed: float, chains: int) -> None:
                if elapsed - last[0] >= 5:
                    last[0] = elapsed
                    running = (f"chains finished: {chains}" if variant.agents["enabled"]
                               else "training running")
                    progress(f"{tag}: {elapsed:4.0f} s  {running}")

            workloads.wait_done(work, duration_s, tick)
            if faults:
                faults.stop(end=time.time())
            roles = fabric.port_roles()
            queues = queue_summary(fabric.queue_stats(), roles)
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
                               "queues": queues, "ovs_send_buffer_bytes": send_buffer}
        entry["telemetry"] = telemetry_report.summarize(out / layout.TELEMETRY,
                                                        out / layout.CONTROLLER_EVENTS)
        if faults:
            entry["faults"] = faults.entries()
            progress(f"{tag}: " + "; ".join(
                f"{f['fault']} {f['target']}: repair {f['repair_ms']} ms, "
                f"lost {f['lost_packets']}, chains failed {f['chains_failed']}"
                for f in entry["faults"]))
        entry["agents"] = agents_entry(work.chains_file)
        entry["training"] = training_entry(
            [work.rank_file(r) for r in range(len(work.ranks or []))])
        return entry

    # -- reporting -------------------------------------------------------------------------
    @staticmethod
    def report_section(summary: dict, out: Path) -> list[str]:
        return report_lines(summary, out)


EXPERIMENT = FabricExperiment
