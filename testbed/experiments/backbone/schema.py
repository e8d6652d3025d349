"""The backbone section of a scenario: its shape (:class:`BackboneSection`) and the
checks no shape can say (names, the topology's design rule, fault targets, timing).

:func:`validate` is pure: it reads the section and the shipped topologies, nothing of the
host.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, field_validator

from testbed.backbone import secure
from testbed.backbone.frr import ALL_DAEMONS, PROTOCOLS, Timers, daemon_classes
from testbed.backbone.frr.router import PRESETS, preset
from testbed.errors import BringUpError, ConfigError
from testbed.experiments import base
from testbed.experiments.backbone import faults as fault_kinds
from testbed.storage import replication as xregion
from topologies.backbone import AREAS, GROUP_KINDS, LINK_KINDS, SHIPPED, TOPOLOGIES, Backbone
from topologies.backbone_check import DesignError, DesignLimit, limits, require
from topologies.params import ParamError, Section


# validation ----------------------------------------------------------------
class BackboneFault(Section):
    at_s: float = Field(ge=0, le=86400, description="seconds after the probes start")
    action: Literal[tuple(fault_kinds.KINDS)] = Field(  # type: ignore[valid-type]
        description="cut_link, cut_risk_group, fail_pop, degrade_link and their restores")
    target: str = Field(description="a link (nyc-lon-1), a risk group or a PoP, by name")
    loss: float | None = Field(None, gt=0, le=1, description="degrade_link: fraction of "
                                                             "packets dropped")


class ReplicationFlow(Section):
    src: str = Field(description="the region that sends")
    dst: str = Field(description="the region that receives")
    rate_mbps: float = Field(20, ge=0.1, le=10000, description="the flow's rate, Mb/s "
                                                               "(iperf3)")


class BackboneSection(Section):
    """The ``backbone:`` section of a scenario."""

    topology: str = Field(
        "default", description="default (8 PoPs, 4 regions), small (a ring), inline (the pops, "
                    "regions and links below) or package.module:Class (a backbone "
                    "topology of your own)")
    pops: list[dict] | None = Field(None, description="inline: {name, area}; area: one of "
                                                      + ", ".join(AREAS))
    regions: list[dict] | None = Field(None, description="inline: {name, pops, uplink_mbps}")
    links: list[dict] | None = Field(None, description="inline: {name, a, b, capacity_mbps, "
                                                       "length_km, kind}; kind: one of "
                                                       + ", ".join(LINK_KINDS[:2])
                                                       + " (default: terrestrial)")
    risk_groups: list[dict] | None = Field(
        None, description="inline: {name, kind, links}: links that fail together (a cable); "
                          f"kind: one of {', '.join(GROUP_KINDS)} (default: conduit)")
    timers: dict[str, Timers] | None = Field(
        None, min_length=1,
        description="one variant per entry: its name and BFD/OSPF timers; keys it leaves "
                    "out come from the preset of its name (default, fast), else from "
                    "default (none given: the two presets)")
    faults: list[BackboneFault] = Field(default_factory=list, description="the fault "
                                                                          "schedule")
    replication: list[ReplicationFlow] = Field(default_factory=list,
                                               description="bulk flows between regions")
    shape: bool = Field(True, description="shape every link to its capacity (TBF)")
    daemons: list[Literal[tuple(ALL_DAEMONS)]] = Field(  # type: ignore[valid-type]
        default_factory=lambda: ["zebra", "bfdd", "ospfd"],
        description="FRR daemons in every router: zebra, optionally bfdd, and one routing "
                    "protocol: ospfd (OSPF) or bgpd (eBGP, an AS per PoP and region)")
    macsec: secure.Settings | bool | None = Field(None, description="MACsec on every link "
                                                                   "(true: the defaults)")
    probe_rate_pps: float = Field(200, ge=10, le=2000, description="probes a second between "
                                                                   "every pair of regions")
    converge_timeout_s: float = Field(90, ge=5, le=300, description="seconds routing may "
                                                                    "take to converge")
    settle_s: float = Field(2, ge=0, le=60, description="seconds the routes must stay quiet "
                                                        "before the run starts")
    tail_s: float = Field(1.0, ge=0.1, le=10, description="the last seconds of a fault's "
                                                          "window that judge reachability")
    checkpoints: xregion.CheckpointSection | None = Field(
        None, description="cross-region checkpoint writes (one variant per mode)")

    @field_validator("timers", mode="before")
    @classmethod
    def _over_preset(cls, value: Any) -> Any:
        """A variant's timers are its preset's with its own keys over them."""
        if not isinstance(value, dict):
            return value
        return {name: ({**preset(str(name)).model_dump(), **tv} if isinstance(tv, dict)
                       else tv) for name, tv in value.items()}


def _number(value: Any, field: str, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(field, "must be a number")
    if not low <= value <= high:
        raise ConfigError(field, f"must be {low:g}..{high:g}")
    return value


#: a PoP, region, link or risk group name of an inline backbone: it becomes part of
#: namespace and device names, so letters, digits and '-' only, starting with a letter
NODE_NAME = re.compile(r"[a-z][a-z0-9-]{0,15}")
MAX_NODES = 100  # PoPs and regions each (their loopbacks are 10.255.{0,1}.N)
#: the fields of an inline backbone's entries whose words have a fixed meaning (the map
#: places PoPs by area, reports and drawings colour links by kind), with their words
CHOICES = {"pops": {"area": AREAS}, "links": {"kind": LINK_KINDS},
           "risk_groups": {"kind": GROUP_KINDS}}
#: the numbers of an inline backbone's entries, with their ranges
NUMBERS = {"regions": {"uplink_mbps": (0.001, 100_000)},
           "links": {"capacity_mbps": (0.001, 100_000), "length_km": (0, 50_000)}}


def _check_fields(key: str, entry: dict, field: str) -> None:
    """An entry's words with a fixed meaning are among theirs, its numbers are numbers
    in range, a region's PoPs a list of names (a field left out takes its default)."""
    for name, words in CHOICES.get(key, {}).items():
        if name in entry and entry[name] not in words:
            raise ConfigError(f"{field}.{name}", f"must be one of {', '.join(words)}, got "
                                                 f"{str(entry[name])[:40]!r}")
    for name, (low, high) in NUMBERS.get(key, {}).items():
        if name in entry:  # NaN and infinities are in no range
            _number(entry[name], f"{field}.{name}", low, high)
    if key == "regions" and not (isinstance(entry.get("pops"), list)
                                 and all(isinstance(p, str) for p in entry["pops"])):
        raise ConfigError(f"{field}.pops", "must be a list of PoP names")


def _check_names(section: dict, where: str) -> None:
    """Every name of an inline backbone matches :data:`NODE_NAME` (whole), PoPs and regions
    are unique together (each is a namespace), links and risk groups each among theirs;
    every entry's fields pass :func:`_check_fields`."""
    nodes: dict[str, str] = {}
    for key in ("pops", "regions", "links", "risk_groups"):
        entries = section.get(key) or []
        if not isinstance(entries, list):
            raise ConfigError(f"{where}.{key}", "must be a list")
        if key in ("pops", "regions") and len(entries) > MAX_NODES:
            raise ConfigError(f"{where}.{key}", f"at most {MAX_NODES}, got {len(entries)}")
        seen: set[str] = set()
        for i, entry in enumerate(entries):
            field = f"{where}.{key}[{i}]"
            if not isinstance(entry, dict):
                raise ConfigError(field, "must be a mapping with a name")
            name = entry.get("name")
            if not isinstance(name, str) or not NODE_NAME.fullmatch(name):
                raise ConfigError(f"{field}.name", "must be 1-16 of a-z, 0-9 or '-', starting "
                                                   f"with a letter, got {str(name)[:40]!r}")
            _check_fields(key, entry, field)
            if key in ("pops", "regions"):
                if name in nodes:
                    raise ConfigError(f"{field}.name", f"{name!r} is also {nodes[name]}")
                nodes[name] = f"{key}[{i}]"
            elif name in seen:
                raise ConfigError(f"{field}.name", f"repeats {name!r}")
            seen.add(name)


def _topology(section: dict, where: str) -> Backbone:
    """The backbone a section names: inline, shipped, or of one's own (loaded: refused in
    a validation); an inline one and one of one's own are held to the names and links an
    inline section must have."""
    topo = section.get("topology", "default")
    if topo == "inline":
        for key in ("pops", "regions", "links"):
            if not isinstance(section.get(key), list) or not section[key]:
                raise ConfigError(f"{where}.{key}", "a non-empty list is required "
                                  "with topology: inline")
        _check_names(section, where)
        try:
            bb = Backbone.from_dict(section)
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"{where}.links", f"malformed backbone: {exc}") from None
        return _check_links(bb, where)
    if topo not in TOPOLOGIES and not TOPOLOGIES.is_reference(topo):
        raise ConfigError(f"{where}.topology", f"must be one of {', '.join(TOPOLOGIES)}, "
                          f"inline or package.module:Class, got {str(topo)[:40]!r}")
    try:
        bb = TOPOLOGIES.resolve(topo, f"{where}.topology").build()
    except ParamError as exc:
        raise ConfigError(exc.field, exc.reason) from None
    if topo in SHIPPED:
        return bb
    if not isinstance(bb, Backbone):
        raise ConfigError(f"{where}.topology", f"{topo} built {type(bb).__name__}, not a "
                                               "topologies.backbone.Backbone")
    _check_names(bb.to_dict(), f"{where}.topology")
    return _check_links(bb, f"{where}.topology")


def _check_links(bb: Backbone, where: str) -> Backbone:
    """Every link ends at a PoP, every risk group's link exists, and the backbone is no
    larger than the design check takes (:func:`topologies.backbone_check.limits`)."""
    try:
        limits(bb)
    except DesignLimit as exc:
        raise ConfigError(f"{where}.{exc.field}", exc.reason) from None
    pops = {p.name for p in bb.pops}
    for i, lk in enumerate(bb.links):
        for end in (lk.a, lk.b):
            if end not in pops:
                raise ConfigError(f"{where}.links[{i}]", f"unknown PoP {end!r}")
    names = [lk.name for lk in bb.all_links]
    for i, g in enumerate(bb.risk_groups):
        for lk in g.links:
            if lk not in names:
                raise ConfigError(f"{where}.risk_groups[{i}]", f"unknown link {lk!r}")
    return bb


def _timers(section: BackboneSection) -> dict[str, dict]:
    """Every variant's timers (the presets when the scenario names none), validated by
    :class:`BackboneSection` already."""
    sets = section.timers if section.timers is not None else PRESETS
    return {str(name): timers.model_dump() for name, timers in sets.items()}


def _daemons(value: list[str] | None, where: str) -> list[str]:
    """zebra, optionally bfdd, and exactly one routing protocol (in start order)."""
    names = list(value) if value is not None else ["zebra", "bfdd", "ospfd"]
    field = f"{where}.daemons"
    if len(set(names)) != len(names):
        raise ConfigError(field, f"names a daemon twice: {names}")
    if "zebra" not in names:
        raise ConfigError(field, "needs zebra (it installs the routes in the kernel)")
    protocols = [n for n in names if n in PROTOCOLS]
    if len(protocols) != 1:
        raise ConfigError(field, f"needs exactly one routing protocol of "
                                 f"{', '.join(PROTOCOLS)}, got {protocols or 'none'}")
    return [d.NAME for d in daemon_classes(names)]


def validate(section: dict, where: str = "backbone") -> dict:
    """Check the ``backbone:`` section, fill defaults and run the design check.

    >>> cfg = validate({"faults": [{"at_s": 5, "action": "cut_link", "target": "nyc-lon-1"}]})
    >>> cfg["design_check"]["ok"], sorted(cfg["timers"]), cfg["probe_rate_pps"]
    (True, ['default', 'fast'], 200)
    >>> validate({"faults": [{"at_s": 5, "action": "cut_link", "target": "nowhere"}]})
    Traceback (most recent call last):
    ...
    testbed.errors.ConfigError: backbone.faults[0].target: unknown link 'nowhere'
    """
    if section is None:
        section = {}
    if not isinstance(section, dict):
        raise ConfigError(where, "must be a mapping")
    parsed = base.Experiment.section(BackboneSection, section, where)  # shape, types, ranges
    bb = _topology(section, where)
    try:
        check = require(bb)
    except DesignLimit as exc:
        raise ConfigError(f"{where}.{exc.field}", exc.reason) from None
    except DesignError as exc:
        field = (f"{where}.pops.{exc.node}" if exc.node in {p.name for p in bb.pops}
                 else f"{where}.regions.{exc.node}")
        raise ConfigError(field, exc.reason) from exc
    cfg: dict[str, Any] = {"topology": section.get("topology", "default"),
                           "design": bb.to_dict(), "design_check": check.to_dict()}
    for key in ("probe_rate_pps", "converge_timeout_s", "settle_s", "tail_s", "shape"):
        cfg[key] = getattr(parsed, key)
    cfg["timers"] = _timers(parsed)
    cfg["daemons"] = _daemons(section.get("daemons"), where)
    cfg["macsec"] = secure.validate(parsed.macsec)
    regions = {r.name for r in bb.regions}
    flows = []
    for i, flow in enumerate(section.get("replication") or []):
        f = f"{where}.replication[{i}]"
        if not isinstance(flow, dict):
            raise ConfigError(f, "must be a mapping with src, dst, rate_mbps")
        for end in ("src", "dst"):
            if flow.get(end) not in regions:
                raise ConfigError(f"{f}.{end}", "must be one of " + ", ".join(sorted(regions)))
        if flow["src"] == flow["dst"]:
            raise ConfigError(f"{f}.dst", "must differ from src")
        flows.append({"src": flow["src"], "dst": flow["dst"],
                      "rate_mbps": _number(flow.get("rate_mbps", 20), f"{f}.rate_mbps", 0.1,
                                           10000)})
    cfg["replication"] = flows
    cfg["checkpoints"] = xregion.validate(section.get("checkpoints"), regions,
                                              f"{where}.checkpoints")
    faults = []
    for i, fault in enumerate(section.get("faults") or []):
        f = f"{where}.faults[{i}]"
        if not isinstance(fault, dict):
            raise ConfigError(f, "must be a mapping with at_s, action, target")
        at = _number(fault.get("at_s"), f"{f}.at_s", 0, 86400)
        action = fault.get("action")
        if not isinstance(action, str) or action not in fault_kinds.KINDS:
            raise ConfigError(f"{f}.action", "must be one of " + ", ".join(fault_kinds.KINDS))
        kind = fault_kinds.KINDS[action]
        if fault.get("target") not in fault_kinds.targets(bb, kind.TARGET):
            raise ConfigError(f"{f}.target", f"unknown {kind.TARGET} "
                                             f"{fault.get('target')!r}")
        entry = {"at_s": at, "action": action, "target": fault["target"]}
        if fault_kinds.takes_loss(kind):
            if "loss" not in fault:
                raise ConfigError(f"{f}.loss", f"required for {action}")
            loss = _number(fault["loss"], f"{f}.loss", 0, 1)
            if loss <= 0:
                raise ConfigError(f"{f}.loss", "must be above 0 (and at most 1)")
            entry["loss"] = loss
        elif "loss" in fault:
            lossy = [n for n, c in fault_kinds.KINDS.items() if fault_kinds.takes_loss(c)]
            raise ConfigError(f"{f}.loss", f"only for {', '.join(lossy)}")
        faults.append(entry)
    cfg["faults"] = sorted(faults, key=lambda x: x["at_s"])
    return cfg


def check_timing(cfg: dict, duration_s: float, where: str = "backbone") -> None:
    """Every fault must fall inside the run; ``validate`` cannot know the duration."""
    for i, f in enumerate(cfg["faults"]):
        if f["at_s"] >= duration_s:
            raise ConfigError(f"{where}.faults[{i}].at_s",
                              f"must be below the duration ({duration_s:g} s)")
    if cfg.get("checkpoints"):
        xregion.check_timing(cfg["checkpoints"], duration_s, f"{where}.checkpoints")


def macsec_backend(settings: dict, caps: Any) -> str:
    """``kernel`` or ``userspace`` for the backbone's protected links (probed host)."""
    if settings["backend"] == "kernel" and not caps.macsec:
        raise BringUpError("backbone.macsec.backend: kernel MACsec is not available on "
                           "this host (use auto or userspace)")
    if settings["backend"] == "auto":
        return "kernel" if caps.macsec else "userspace"
    return settings["backend"]


DELAY_WORDS = {"netem": "applied with netem",
               "forwarders": "applied by the userspace MACsec forwarders (no netem)",
               None: "recorded, not applied (no netem, links not encrypted in userspace)"}


def delay_backend(cfg: dict, caps) -> str | None:
    """Who carries the links' propagation delay: netem, else the userspace MACsec
    forwarders (they hold each frame), else nobody (recorded only)."""
    if caps.netem:
        return "netem"
    if cfg["macsec"]["enabled"] and macsec_backend(cfg["macsec"], caps) == "userspace":
        return "forwarders"
    return None
