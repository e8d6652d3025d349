"""The fabric kind's validation of a variant: its sections parsed with their models,
then checked against each other and against the fabric its topology builds (nodes,
ranks, spares, the controller's mode and apps, the workloads' hosts and planes), before
anything is made on the host."""

from __future__ import annotations

from typing import Any

from testbed.acceptance import step as acceptance_step
from testbed.errors import ConfigError
from testbed.experiments.base import Experiment
from testbed.experiments.fabric.schema import SECTIONS, SERVICES, FaultEntry, Workloads
from testbed.experiments.fabric.variant import Variant, merge
from testbed.fabric import qos
from testbed.faults.fabric import parse_faults
from testbed.faults.schedule import Fault
from testbed.host.capabilities import Capabilities
from testbed.host.naming import SPEC_PREFIX
from testbed.workloads import generators
from testbed.workloads import kinds as workload_kinds
from topologies import plugins
from topologies.build import build_topology, resolve
from topologies.params import ParamError
from topologies.spec import FabricSpec
from traffic.roce import OVERHEAD as ROCE_OVERHEAD

ETHERNET_HEADER = 14


def _check_node(where: str, value: int, nodes: int) -> None:
    if not 0 <= value < nodes:
        raise ConfigError(where, f"must be a node index 0..{nodes - 1}, got {value!r}")


def check_congestion_control(algorithm: str, caps: Capabilities, where: str) -> None:
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


def check_variant(name: str, sections: dict, where: str, faults: Any, loads: Any = None,
                  *, seed: int, duration_s: float) -> Variant:
    """One variant's sections checked against each other and against the fabric its
    topology builds; ConfigError naming the first field that is wrong (its path under
    ``where``: the base's errors have none)."""
    prefix = f"{where}." if where else ""
    sections, extra = _fold_workloads(sections, loads, prefix)
    parsed = {s: Experiment.section(model, sections.get(s), f"{prefix}{s}")
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
            entry = Experiment.section(FaultEntry, fault, f"{prefix}faults[{i}]")
            checked.append({k: v for k, v in fault.items()
                            if getattr(entry, k, None) is not None or k == "target"})
        faults = checked
    fault_list = parse_faults(faults, spec, f"{prefix}faults", duration_s)
    _check_controller(resolved["controller"], fault_list, prefix)
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
        _check_training(training, spec, prefix)
    _check_acceptance(resolved["acceptance"], spec, prefix, seed)
    _check_replacement(resolved, spec, prefix)
    workloads = tuple(_resolve_workload(e, i, spec, prefix) for i, e in extra)
    return Variant(name=name, topology=topology, **resolved, faults=fault_list,
                   workloads=workloads, spec=spec)


def _check_acceptance(cfg: dict, spec: FabricSpec, prefix: str, seed: int) -> None:
    """Spares are nodes of the fabric; the plants' targets exist (random ones can be
    drawn: placed here with the scenario's seed, as a run places them with its own)."""
    for i, node in enumerate(cfg["spares"]):
        _check_node(f"{prefix}acceptance.spares[{i}]", node, len(spec.hosts))
    acceptance_step.place(spec, cfg["plant"], cfg["spares"], seed,
                          f"{prefix}acceptance.plant")


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


def _fold_workloads(sections: dict, loads: Any,
                    prefix: str) -> tuple[dict, list[tuple[int, dict]]]:
    """Validate ``workloads``; its agents and training entries become those sections
    (one list for everything that runs in the hosts); the rest, with their index."""
    if loads is None:
        return sections, []
    parsed = Experiment.section(Workloads, {"workloads": loads}, prefix.rstrip(".")).workloads
    sections = dict(sections)
    extra = []
    for i, entry in enumerate(parsed):
        values = entry.model_dump(exclude={"kind"})
        if entry.kind in ("agents", "training"):
            if any(e.kind == entry.kind for e in parsed[:i]):
                raise ConfigError(f"{prefix}workloads[{i}].kind",
                                  f"a second {entry.kind} entry (one is the most)")
            given = loads[i]
            sections[entry.kind] = merge(sections.get(entry.kind) or {},
                                         {k: values[k] for k in given if k != "kind"}
                                         | {"enabled": values["enabled"]})
        else:
            extra.append((i, {"kind": entry.kind, **values}))
    return sections, extra


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

