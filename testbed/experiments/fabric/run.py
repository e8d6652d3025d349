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
import json
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, create_model

from testbed.acceptance import step as acceptance_step
from testbed.core import layout
from testbed.core.fidelity import WatchedLink
from testbed.core.results import agents_entry, training_entry
from testbed.errors import ConfigError
from testbed.experiments import base
from testbed.experiments.fabric.report import report_lines
from testbed.experiments.fabric.schema import (
    SECTIONS,
    SERVICES,
    Agents,
    Controller,
    FaultEntry,
    Name,
    Training,
    Workload,
    Workloads,
)
from testbed.fabric import drops, ovs_socket, phantom, qos
from testbed.fabric.bringup import bring_up, ecn_lacks, queue_summary
from testbed.fabric.net import OVS_SOCKET_BUFFER, Fabric
from testbed.fabric.qos import Qos, qos_entry
from testbed.fabric.switchd import SwitchSettings
from testbed.faults import run as fault_run
from testbed.faults.fabric import needs, parse_faults
from testbed.faults.schedule import Fault
from testbed.host.capabilities import Capabilities
from testbed.host.naming import SPEC_PREFIX, new_run_id, run_prefix
from testbed.lab import capture
from testbed.monitor import launch as monitor
from testbed.operations import expand as expansion
from testbed.operations import replace
from testbed.reports import telemetry as telemetry_report
from testbed.workloads import generators
from testbed.workloads import kinds as workload_kinds
from topologies import plugins
from topologies.build import BUILDERS, DEFAULT, SHIPPED, build_topology, builder_of, resolve
from topologies.params import ParamError, Section
from topologies.spec import FabricSpec
from traffic.roce import OVERHEAD as ROCE_OVERHEAD

ETHERNET_HEADER = 14


class VariantSection(Section):
    """One entry of ``variants``: a name and overrides of the scenario's sections."""

    name: Name = Field(description="the variant's name (lowercase letters, digits, - or _)")
    reference: bool = Field(False, description="the non-blocking reference to compare with")
    topology: dict[str, Any] | None = Field(None, description="keys merged onto the "
                                                              "scenario's topology section")
    controller: dict[str, Any] | None = Field(None, description="keys merged onto the "
                                                                "controller section")
    agents: dict[str, Any] | None = Field(None, description="keys merged onto the agents "
                                                            "section")
    training: dict[str, Any] | None = Field(None, description="keys merged onto the training "
                                                              "section")
    qos: dict[str, Any] | None = Field(None, description="keys merged onto the qos section")
    switches: dict[str, Any] | None = Field(None, description="keys merged onto the switches "
                                                              "section")
    faults: list[dict[str, Any]] | None = Field(None, description="replaces the scenario's "
                                                                  "faults list")
    workloads: list[dict[str, Any]] | None = Field(
        None, description="replaces the scenario's workloads list")
    capture: list[str] | None = Field(None, description="replaces the scenario's capture "
                                                        "list")
    acceptance: dict[str, Any] | None = Field(None, description="keys merged onto the "
                                                                "acceptance section")
    replacement: dict[str, Any] | None = Field(None, description="keys merged onto the "
                                                                 "replacement section")


@dataclass(frozen=True)
class Variant:
    """One side of a comparison: fully resolved sections plus the topology it builds."""

    name: str
    topology: dict[str, Any]
    controller: dict[str, Any]
    agents: dict[str, Any]
    training: dict[str, Any]
    #: the traffic classes and PFC, parsed once (:class:`testbed.fabric.qos.Qos`)
    qos: Qos = dataclasses.field(default_factory=Qos)
    #: which Open vSwitch processes forward (:class:`testbed.fabric.switchd.SwitchSettings`)
    switches: dict[str, Any] = dataclasses.field(default_factory=dict)
    reference: bool = False  # the non-blocking reference the report compares against
    faults: tuple[Fault, ...] = ()
    #: ``workloads`` entries other than agents and training, host references resolved
    workloads: tuple[dict, ...] = ()
    #: ports captured for the whole variant (short names: ``p0l0e3``, ``n0p0r0``)
    capture: tuple[str, ...] = ()
    #: the acceptance step before the workloads (:mod:`testbed.acceptance.step`)
    acceptance: dict[str, Any] = dataclasses.field(default_factory=dict)
    #: node health and replacement during the run (:mod:`testbed.operations.replace`)
    replacement: dict[str, Any] = dataclasses.field(default_factory=dict)
    #: the fabric the topology builds, named with :data:`SPEC_PREFIX`: built once, when
    #: the variant was checked
    spec: FabricSpec | None = dataclasses.field(default=None, compare=False, repr=False)

    def fabric(self, prefix: str) -> FabricSpec:
        """The variant's fabric with names of ``prefix`` (a run's: built again with them;
        :data:`SPEC_PREFIX`: the one built when the variant was checked)."""
        if self.spec is not None and prefix == self.spec.prefix:
            return self.spec
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


def _merge_topology(base_: dict, override: dict) -> dict:
    """A variant's topology: merged onto the base's, unless it names another builder
    (then the base's parameters, made for that other builder, do not apply)."""
    names_one = "builder" in override or isinstance(override.get("nodes"), dict)
    if names_one and builder_of(override) != builder_of(base_):
        return copy.deepcopy(override)
    return _merge(base_, override)


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


def _check_node(where: str, value: int, nodes: int) -> None:
    if not 0 <= value < nodes:
        raise ConfigError(where, f"must be a node index 0..{nodes - 1}, got {value!r}")


def _check_congestion_control(algorithm: str, caps: Capabilities, where: str) -> None:
    """The hosts' TCP congestion control must be one the kernel has (its list, when the
    probe read one; ``dctcp`` always needs tcp_dctcp)."""
    if algorithm == "default":
        return
    available = " ".join(caps.tcp_congestion_controls) or "unknown"
    if algorithm == "dctcp" and not caps.tcp_dctcp:
        raise ConfigError(where, f"'dctcp' needs the kernel's tcp_dctcp, which this kernel "
                                 f"lacks; available: {available}")
    if caps.tcp_congestion_controls and algorithm not in caps.tcp_congestion_controls:
        raise ConfigError(where, f"{algorithm!r} is not in this kernel; available: {available}")


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
        base_variant = self._check_variant(self.name, base_, "",  # base errors by path
                                           data.get("faults"), data.get("workloads"))
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
            merged = {s: (_merge_topology if s == "topology" else _merge)(
                base_[s], getattr(entry, s) or {}) for s in base_}
            faults = raw["faults"] if "faults" in raw else data.get("faults")
            loads = raw["workloads"] if "workloads" in raw else data.get("workloads")
            variant = (base_variant if alone else
                       self._check_variant(entry.name, merged, where, faults, loads))
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

    # -- validation ------------------------------------------------------------------------
    def _check_variant(self, name: str, sections: dict, where: str, faults: Any,
                       loads: Any = None) -> Variant:
        prefix = f"{where}." if where else ""
        sections, extra = self._fold_workloads(sections, loads, prefix)
        parsed = {s: self.section(model, sections.get(s), f"{prefix}{s}")
                  for s, model in SECTIONS.items()}
        # the qos section stays its model (the bring-up takes it so); the others are
        # the variant's records, as the run writes them
        resolved: dict[str, Any] = {s: m.model_dump() for s, m in parsed.items() if s != "qos"}
        raw = sections.get("topology")
        if raw is not None and not isinstance(raw, dict):
            raise ConfigError(f"{prefix}topology", f"must be a mapping, got "
                                                   f"{type(raw).__name__}")
        try:
            topology = resolve(raw or {})
            spec = build_topology(topology, SPEC_PREFIX)
        except ParamError as exc:
            raise ConfigError(f"{prefix}topology.{exc.field}", exc.reason) from None
        if faults is not None:
            if not isinstance(faults, list):
                raise ConfigError(f"{prefix}faults", "must be a list of faults")
            checked = []
            for i, fault in enumerate(faults):
                entry = self.section(FaultEntry, fault, f"{prefix}faults[{i}]")
                checked.append({k: v for k, v in fault.items()
                                if getattr(entry, k, None) is not None or k == "target"})
            faults = checked
        fault_list = parse_faults(faults, spec, f"{prefix}faults", self.duration_s)
        self._check_controller(resolved["controller"], fault_list, prefix)
        for cls, c in resolved["controller"]["ecn"]["classes"].items():
            if c["min_kb"] >= c["max_kb"]:
                raise ConfigError(f"{prefix}controller.ecn.classes.{cls}.min_kb",
                                  f"must be less than max_kb ({c['max_kb']:g}), "
                                  f"got {c['min_kb']:g}")
        qos_section = resolved["qos"] = parsed["qos"]
        qos.check(qos_section, f"{prefix}qos", qos.fan_in(spec), spec.mtu,
                  qos.host_addresses(spec))
        if qos.classes_of(qos_section) and resolved["controller"]["remote"]:
            raise ConfigError(f"{prefix}qos.classes", "traffic classes need the lab's own "
                                                      "switch set-up, not controller.remote")
        if not qos_section.pfc.enabled and any(f.action.startswith("pfc_storm")
                                               for f in fault_list):
            raise ConfigError(f"{prefix}faults", "pfc_storm needs qos.pfc.enabled (the PFC "
                                                 "agent sends the storm's PAUSE frames)")
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
        self._check_acceptance(resolved["acceptance"], spec, prefix)
        self._check_replacement(resolved, spec, prefix)
        workloads = tuple(self._resolve_workload(e, i, spec, prefix) for i, e in extra)
        return Variant(name=name, topology=topology, **resolved, faults=fault_list,
                       workloads=workloads, spec=spec)

    def _check_acceptance(self, cfg: dict, spec: FabricSpec, prefix: str) -> None:
        """Spares are nodes of the fabric; the plants' targets exist (random ones can be
        drawn: placed here with the scenario's seed, as a run places them with its own)."""
        for i, node in enumerate(cfg["spares"]):
            _check_node(f"{prefix}acceptance.spares[{i}]", node, len(spec.hosts))
        acceptance_step.place(spec, cfg["plant"], cfg["spares"], self.seed,
                              f"{prefix}acceptance.plant")

    @staticmethod
    def _check_replacement(resolved: dict, spec: FabricSpec, prefix: str) -> None:
        """Spares are nodes of the fabric with no role in the run."""
        agents, training = resolved["agents"], resolved["training"]
        busy = generators.roles_by_node(agents, training)
        for i, node in enumerate(resolved["replacement"]["spares"]):
            where = f"{prefix}replacement.spares[{i}]"
            _check_node(where, node, len(spec.hosts))
            if node in busy:
                raise ConfigError(where, f"node {node} has a role in the run (a spare "
                                         "must be idle)")
        if resolved["replacement"]["enabled"] and not (agents["enabled"]
                                                       or training["enabled"]):
            raise ConfigError(f"{prefix}replacement.enabled",
                              "watches the nodes of agents or training: neither is enabled")

    def _fold_workloads(self, sections: dict, loads: Any,
                        prefix: str) -> tuple[dict, list[tuple[int, dict]]]:
        """Validate ``workloads``; its agents and training entries become those sections
        (one list for everything that runs in the hosts); the rest, with their index."""
        if loads is None:
            return sections, []
        parsed = self.section(Workloads, {"workloads": loads}, prefix.rstrip(".")).workloads
        sections = dict(sections)
        extra = []
        for i, entry in enumerate(parsed):
            values = entry.model_dump(exclude={"kind"})
            if entry.kind in ("agents", "training"):
                if any(e.kind == entry.kind for e in parsed[:i]):
                    raise ConfigError(f"{prefix}workloads[{i}].kind",
                                      f"a second {entry.kind} entry (one is the most)")
                given = loads[i]
                sections[entry.kind] = _merge(sections.get(entry.kind) or {},
                                              {k: values[k] for k in given if k != "kind"}
                                              | {"enabled": values["enabled"]})
            else:
                extra.append((i, {"kind": entry.kind, **values}))
        return sections, extra

    @staticmethod
    def _resolve_workload(entry: dict, i: int, spec: FabricSpec, prefix: str) -> dict:
        """Host references as node indices, the plane checked against the fabric, then
        what the entry's kind checks (a kind of one's own: its ``params`` too)."""
        where = f"{prefix}workloads[{i}]"
        kind = workload_kinds.kind(entry["kind"], f"{where}.kind")
        names = {h.name[len(spec.prefix):]: n for n, h in enumerate(spec.hosts)}
        out = dict(entry)
        if workload_kinds.KINDS.is_reference(entry["kind"]) or kind.PARAMS is not None:
            out["params"] = workload_kinds.parameters(type(kind), entry.get("params"),
                                                      f"{where}.params")
        for key in kind.HOSTS:
            if entry.get(key) is None:
                continue
            ref = entry[key]
            node = ref if isinstance(ref, int) else names.get(ref)
            if node is None or not 0 <= node < len(spec.hosts):
                raise ConfigError(f"{where}.{key}",
                                  f"no host {ref!r} (hosts n0..n{len(spec.hosts) - 1})")
            out[key] = node
        if entry.get("plane", 0) >= spec.planes:
            raise ConfigError(f"{where}.plane",
                              f"must be below {spec.planes} (the fabric's planes)")
        kind.check(out, spec, where)
        return out

    @staticmethod
    def _check_controller(controller: dict, faults: tuple[Fault, ...], prefix: str) -> None:
        """A remote controller is the user's: nothing of ours applies to it."""
        where = f"{prefix}controller"
        if controller["mode"] == "gff" and controller["ecn"]["mode"] in ("controller", "auto"):
            raise ConfigError(f"{where}.ecn.mode", "gff pins flows with rules of their own, "
                                                  "which the controller's marking groups "
                                                  "do not see; use switch or phantom")
        if plugins.DOTTED.fullmatch(mode := controller["mode"]):  # a mode of one's own:
            try:  # its source checked; loaded where scenarios run, as apps are
                plugins.check(mode, f"{where}.mode")
                if plugins.may_load():
                    from controllers.routing import MODES

                    MODES.resolve(mode, f"{where}.mode")
            except ParamError as exc:
                raise ConfigError(exc.field, exc.reason) from None
        for i, app in enumerate(controller["apps"]):
            # loaded where scenarios run (what it defines is checked); a validation
            # reads its source only
            try:
                plugins.check(app, f"{where}.apps[{i}]")
                if plugins.may_load():
                    from controllers.__main__ import app_module

                    plugins.on_path()  # beside the scenario too, as the controller will

                    app_module(app)
            except ValueError as exc:  # ParamError is one
                raise ConfigError(f"{where}.apps[{i}]", getattr(exc, "reason", str(exc))) \
                    from None
        if controller["remote"]:
            port = int(controller["remote"].rsplit(":", 1)[1])
            if not 1 <= port <= 65535:
                raise ConfigError(f"{where}.remote", f"port must be 1..65535, got {port}")
            ours = {"mode": controller["mode"] != "ecmp", "apps": bool(controller["apps"]),
                    "fast_failover": controller["fast_failover"],
                    "recompute": controller["recompute"],
                    "health": controller["health"]["enabled"],
                    "ecn.mode": controller["ecn"]["mode"] in ("controller", "auto")}
            for key, used in ours.items():
                if used:
                    raise ConfigError(f"{where}.{key}", "has no effect with controller.remote "
                                      "(the switches connect to your controller)")
            for f in faults:
                if f.action.startswith("controller_"):
                    raise ConfigError(f"{prefix}faults", f"{f.action} needs the lab's own "
                                      "controller, not controller.remote")

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
        if training["spray"] and training["qps"] > 1:
            raise ConfigError(f"{prefix}training.qps", "spray already rotates every packet "
                                                       "over 16 source ports; use one of them")
        if training["dcqcn"]["min_rate_mbps"] > training["rate_mbps"]:
            raise ConfigError(f"{prefix}training.dcqcn.min_rate_mbps",
                              f"must not exceed rate_mbps ({training['rate_mbps']:g})")
        frame = training["payload"] + ROCE_OVERHEAD - ETHERNET_HEADER
        if frame > spec.mtu:
            raise ConfigError(f"{prefix}training.payload",
                              f"{training['payload']} bytes make {frame}-byte IP packets, "
                              f"over the MTU of {spec.mtu}")

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
            _check_congestion_control(variant.agents["congestion_control"], caps,
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
            stack.enter_context(ctx.watch(watched_ports(fabric)))  # the measured window
            # the other machines' monitors sample the window too (unless the run is not
            # monitored: testbed run --no-fidelity)
            on_servers = ctx.monitor is not None and ctx.monitor.enabled
            if on_servers:
                fabric.servers_watch()
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
