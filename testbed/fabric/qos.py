"""Traffic classes on every port: DSCP to class, a queue and buffer per class, strict
priority or weights, and the lossless classes that PFC (:mod:`testbed.fabric.pfc`) pauses.

Built from what every kernel here has (HTB, TBF, bfifo, u32): on each port an HTB root
with one parent class at the link rate and one child per traffic class. Weighted
classes are guaranteed shares of the link in proportion to their weights (as ETS
guarantees bandwidth); a strict class gets priority 0 and a small guaranteed share (5 %):
within it, and for any rate the others leave, it is served first (HTB lends spare rate to
the lowest priority number first). Beyond its share it does not preempt the weighted
classes' guaranteed rates: HTB cannot give strict priority and guaranteed shares at once.
CNPs, the strict class of the RoCE profile, stay far below 5 %. (Tried: every class
guaranteed nothing and sharing by priority and quantum, which makes strict strict; the
latency-bound tenant of scenarios/tenants.yaml then waited a deficit-round-robin turn
behind the training and its chain p99 went from 1.16x to 1.45x of alone.)
Each class has its own leaf queue: a byte FIFO for a lossy class, a token bucket at the
link rate for a lossless one, which PFC pauses by changing its rate (HTB cannot resume a
class it has slowed: its tokens stay negative).
u32 filters map DSCP values to classes; unmatched packets go to the default class.

A resumed token bucket sends only at the next enqueue on the port, so every port also
has a *kick* class: a frame of the local experimental EtherType 0x88B5 is classified
there and dropped by its zero-length FIFO, and its enqueue makes the port send again.
Nothing of it reaches the wire.

>>> cfg = Qos.model_validate({"classes": "roce"})
>>> [(c.name, c.dscp, c.strict, c.lossless) for c in classes_of(cfg)]
[('cnp', [48], True, False), ('roce', [26], False, True), ('lossy', [], False, False)]
>>> [c.minor for c in plan(classes_of(cfg), 20, 9000)]
[16, 17, 18]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator

from testbed.errors import ConfigError
from topologies.params import Section
from traffic.roce import DATA_DSCP

Name = Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9_-]{0,20}$")]
#: EtherType of the frames that restart a resumed port (IEEE local experimental 1)
KICK_ETHERTYPE = 0x88B5
KICK_MINOR = 0xFF
FIRST_MINOR = 0x10
#: HTB's guaranteed rate of a strict class, as a share of the link
STRICT_SHARE = 0.05
#: a paused token bucket's rate (bits/s): one jumbo frame in minutes
PAUSED_BPS = 1000


class TrafficClass(Section):
    """One traffic class of every port."""

    name: Name = Field(description="the class's name (lowercase letters, digits, - or _)")
    dscp: list[Annotated[int, Field(ge=0, le=63)]] = Field(
        default_factory=list, description="DSCP values of the class; neither dscp nor "
                                          "hosts: the default class")
    hosts: list[str | int] = Field(
        default_factory=list, description="a tenant's hosts (n0 or node index): what they "
                                          "send is this class (with dscp: only those values)")
    priority: int = Field(0, ge=0, le=7, description="its 802.1p priority (PFC's class)")
    strict: bool = Field(False, description="priority 0: first within a 5 % share and for "
                                             "any spare rate")
    weight: int = Field(1, ge=1, le=100, description="share of the link among weighted classes")
    lossless: bool = Field(False, description="paused by PFC instead of dropping")
    buffer_kb: float = Field(64, gt=0, le=100_000, description="its egress buffer per port")


class Pfc(Section):
    """Priority flow control (IEEE 802.1Qbb) of the lossless classes."""

    enabled: bool = Field(False, description="pause the lossless classes' upstream ports "
                                             "instead of dropping (PFC)")
    xoff_kb: float = Field(24, gt=0, description="a lossless queue over this pauses upstream")
    xon_kb: float = Field(8, ge=0, description="a queue below this no longer holds its "
                                                "feeding ports paused")
    reaction_ms: float = Field(
        20, gt=0, le=1000, description="time from XOFF to the upstream stopping that the "
                                      "headroom is sized for (the run measures it)")
    poll_ms: float = Field(2, ge=0.5, le=100, description="how often queues are read")
    pause_ms: float = Field(100, ge=1, le=1000,
                            description="pause time a frame asks for (refreshed at half)")
    watchdog_ms: float = Field(0, ge=0, le=60_000,
                               description="a queue paused longer is put in drop mode (0: off)")
    restore_ms: float = Field(500, gt=0, le=60_000, description="drop mode lasts this long")


class Qos(Section):
    """``qos:`` traffic classes (none: one FIFO per port, as before) and PFC."""

    classes: list[TrafficClass] | Literal["fifo", "roce"] = Field(
        "fifo", description="'fifo' (one queue a port), 'roce' (CNP strict, RoCE lossless, "
                            "the rest lossy), or a list of classes")
    pfc: Pfc = Pfc()

    @field_validator("classes", mode="before")
    @classmethod
    def _profile(cls, value: Any) -> Any:
        if isinstance(value, str) and value not in ("fifo", "roce"):
            raise ValueError(f"must be 'fifo', 'roce' or a list of classes, got {value!r}")
        return value


ROCE = (TrafficClass(name="cnp", dscp=[48], priority=6, strict=True, buffer_kb=16),
        TrafficClass(name="roce", dscp=[DATA_DSCP], priority=3, lossless=True, buffer_kb=320),
        TrafficClass(name="lossy", dscp=[], priority=0, buffer_kb=64))


def classes_of(qos: Qos) -> tuple[TrafficClass, ...]:
    if qos.classes == "fifo":
        return ()
    if qos.classes == "roce":
        return ROCE
    return tuple(qos.classes)


def feeders(ports: list[tuple[str, str, str]]) -> dict[str, set[str]]:
    """For ports given as (switch, ifname, role): the ports of the same switch whose
    arrivals can leave through each one. Up-down routing sends what came down from
    above only further down: an uplink is fed by the downlinks alone, a downlink by every
    other port (so PFC pauses never form a cycle)."""
    by_switch: dict[str, list[str]] = {}
    for sw, ifname, _ in ports:
        by_switch.setdefault(sw, []).append(ifname)
    up = {ifname for _, ifname, role in ports if role.endswith("uplink")}
    out = {}
    for names in by_switch.values():
        for p in names:
            others = set(names) - {p}
            out[p] = others - up if p in up else others
    return out


@dataclass(frozen=True)
class FanIn:
    """What can feed one switch port's queue, at most over the fabric's ports: the
    feeding ports' total rate and their number (each the largest any port has, so the
    headroom is an upper bound), the fastest port's rate, and whether any port is a
    same-tier peer."""

    mbps: float
    ports: int
    fastest_mbps: float
    peers: bool = False


def fan_in(spec) -> FanIn:
    """What can feed the switch ports' queues of ``spec`` (a FabricSpec), at most."""
    ports = spec.switch_ports()
    rate = {p.ifname: p.mbps for p in ports}
    feeds = feeders([(p.switch, p.ifname, p.role) for p in ports]).values()
    return FanIn(max((sum(rate[f] for f in fs) for fs in feeds), default=0.0),
                 max((len(fs) for fs in feeds), default=0),
                 max(rate.values(), default=0.0),
                 any(p.role.endswith("peer") for p in ports))


def headroom_bytes(pfc: Pfc, feed: FanIn, mtu: int) -> int:
    """Bytes that still arrive at a queue after XOFF: the rate of every port that feeds
    it times the reaction time, plus per feeding port the burst its paused token bucket
    still lets through (the change refills it) and the frame on the wire."""
    per_port = burst(feed.fastest_mbps, mtu) + mtu + 18
    return int(feed.mbps * 1e6 / 8 * pfc.reaction_ms / 1000) + feed.ports * per_port


def host_addresses(spec) -> dict[str, tuple[str, ...]]:
    """Each host by short name and by node index: (short name, its addresses...)."""
    out = {}
    for n, h in enumerate(spec.hosts):
        short = h.name[len(spec.prefix):]
        out[short] = out[str(n)] = (short, *(i.ip for i in h.interfaces))
    return out


def check(qos: Qos, where: str, feed: FanIn, mtu: int,
          hosts: dict[str, tuple[str, ...]] | None = None) -> None:
    """Cross-field rules, as one-line ConfigErrors (``feed``: :func:`fan_in`, ``hosts``:
    :func:`host_addresses`)."""
    hosts = hosts or {}
    classes = classes_of(qos)
    listed = isinstance(qos.classes, list)
    seen: dict[tuple, str] = {}  # (dscp or None, host or None): its class
    for i, c in enumerate(classes):
        here = f"{where}.classes[{i}]" if listed else f"{where}.classes"
        if c.name in [d.name for d in classes[:i]]:
            raise ConfigError(f"{here}.name", f"repeats {c.name!r}")
        for j, h in enumerate(c.hosts):
            if str(h) not in hosts:
                raise ConfigError(f"{here}.hosts[{j}]", f"no host {h!r} in this fabric")
        for h in [hosts[str(h)][0] for h in c.hosts] or [None]:
            for d in c.dscp or [None]:
                if d is None and h is None:
                    continue
                if (d, h) in seen:
                    what = " and ".join(x for x in (d is not None and f"DSCP {d}",
                                                     h and f"host {h}") if x)
                    raise ConfigError(f"{here}.{'dscp' if d is not None else 'hosts'}",
                                      f"{what} is already class {seen[(d, h)]!r}")
                seen[(d, h)] = c.name
        if c.strict and c.lossless:
            raise ConfigError(f"{here}.lossless", "a strict class cannot also be lossless")
    if classes and sum(not c.dscp and not c.hosts for c in classes) != 1:
        raise ConfigError(f"{where}.classes", "exactly one class must have neither dscp nor "
                                              "hosts (the default class)")
    pfc = qos.pfc
    if not pfc.enabled:
        return
    lossless = [(i, c) for i, c in enumerate(classes) if c.lossless]
    if not lossless:
        raise ConfigError(f"{where}.pfc.enabled", "no traffic class is lossless")
    if pfc.xon_kb >= pfc.xoff_kb:
        raise ConfigError(f"{where}.pfc.xon_kb",
                          f"must be below xoff_kb ({pfc.xoff_kb:g}), got {pfc.xon_kb:g}")
    if len({c.priority for _, c in lossless}) != len(lossless):
        raise ConfigError(f"{where}.classes", "lossless classes need distinct priorities")
    if feed.peers:
        raise ConfigError(f"{where}.pfc.enabled", "the fabric has same-tier (peer) links: "
                                                 "pauses could form a cycle (deadlock)")
    pause_s = min(pfc.pause_ms / 1000, 0xFFFF * 512 / (feed.fastest_mbps * 1e6))
    if pause_s < 4 * pfc.poll_ms / 1000:
        raise ConfigError(f"{where}.pfc.poll_ms", f"a PAUSE frame holds {pause_s * 1000:.2f} "
                          f"ms at {feed.fastest_mbps:g} Mb/s: queues must be read at least "
                          f"4 times as often (poll_ms <= {pause_s * 250:.2f})")
    room = headroom_bytes(pfc, feed, mtu) / 1000
    for i, c in lossless:
        if pfc.xoff_kb + room > c.buffer_kb:
            here = f"{where}.classes[{i}]" if listed else f"{where}.classes"
            raise ConfigError(f"{here}.buffer_kb",
                              f"XOFF ({pfc.xoff_kb:g} KB) plus headroom ({room:.1f} KB: "
                              f"{feed.mbps:g} Mb/s of {feed.ports} feeding ports x "
                              f"{pfc.reaction_ms:g} ms + 2 frames a port) is "
                              f"{pfc.xoff_kb + room:.1f} KB, over the class's buffer "
                              f"of {c.buffer_kb:g} KB")


@dataclass(frozen=True)
class PlannedClass:
    """A traffic class as set up on one port: HTB class 1:minor, leaf qdisc minor:."""

    name: str
    minor: int
    dscp: tuple[int, ...]
    #: source addresses of the tenant's hosts (none: any source)
    sources: tuple[str, ...]
    priority: int
    strict: bool
    lossless: bool
    rate_kbit: int
    limit: int  # bytes

    @property
    def classid(self) -> str:
        return f"1:{self.minor:x}"


def plan(classes: tuple[TrafficClass, ...], mbps: float, mtu: int,
         hosts: dict[str, tuple[str, ...]] | None = None) -> list[PlannedClass]:
    """Each class's HTB class and guaranteed rate on a port of ``mbps`` (``hosts``:
    :func:`host_addresses`, for tenant classes)."""
    hosts = hosts or {}
    link = int(mbps * 1000)
    strict = [c for c in classes if c.strict]
    strict_kbit = max(8, int(link * STRICT_SHARE))
    rest = link - strict_kbit * len(strict)
    total = sum(c.weight for c in classes if not c.strict) or 1
    out = []
    for i, c in enumerate(classes):
        rate = strict_kbit if c.strict else max(8, rest * c.weight // total)
        sources = tuple(ip for h in c.hosts for ip in hosts.get(str(h), ("",))[1:])
        out.append(PlannedClass(c.name, FIRST_MINOR + i, tuple(c.dscp), sources, c.priority,
                                c.strict, c.lossless, rate,
                                max(int(c.buffer_kb * 1000), mtu + 18)))
    return out


def burst(mbps: float, mtu: int) -> int:
    """A token bucket's burst: one full frame (or 1 ms at the link rate if larger)."""
    return max(mtu + 18, int(mbps * 1e6 / 8 / 1000))


def tc_lines(dev: str, mbps: float, mtu: int, planned: list[PlannedClass],
             lossy_leaf: str | None = None) -> list[str]:
    """``tc -batch`` lines that give ``dev`` its class tree (the port has no root qdisc
    yet). ``lossy_leaf``: the lossy classes' leaf instead of a byte FIFO (``{limit}`` is
    filled in), e.g. an ECN-marking RED queue."""
    link, bucket = f"{mbps:g}mbit", burst(mbps, mtu)
    default = next(p for p in planned if not p.dscp and not p.sources)
    # every ceiling's bucket as deep as its rate's: else a late timer's tokens are lost
    lines = [f"qdisc add dev {dev} root handle 1: htb default {default.minor:x}",
             f"class add dev {dev} parent 1: classid 1:1 htb rate {link} ceil {link} "
             f"burst {bucket} cburst {bucket}"]
    for p in planned:
        lines.append(f"class add dev {dev} parent 1:1 classid {p.classid} htb "
                     f"rate {p.rate_kbit}kbit ceil {link} burst {bucket} cburst {bucket} "
                     f"prio {0 if p.strict else 1} quantum {mtu + 18}")
        if p.lossless:
            leaf = f"tbf rate {link} burst {bucket} limit {p.limit}"
        elif lossy_leaf:
            leaf = lossy_leaf.format(limit=p.limit)
        else:
            leaf = f"bfifo limit {p.limit}"
        lines.append(f"qdisc add dev {dev} parent {p.classid} handle {p.minor:x}: {leaf}")
        # DSCP-and-source before DSCP alone before source alone: CNPs of a tenant's
        # hosts stay CNPs unless the tenant has its own
        for src in p.sources or ("",):
            match = f"match ip src {src}/32 " if src else ""
            for d in p.dscp:
                lines.append(f"filter add dev {dev} parent 1: protocol ip prio "
                             f"{1 if src else 2} u32 {match}match ip dsfield {d << 2:#x} 0xfc "
                             f"flowid {p.classid}")
            if src and not p.dscp:
                lines.append(f"filter add dev {dev} parent 1: protocol ip prio 3 u32 "
                             f"{match}flowid {p.classid}")
    if any(p.lossless for p in planned):
        lines += [f"class add dev {dev} parent 1:1 classid 1:{KICK_MINOR:x} htb rate 8kbit "
                  f"ceil 8kbit prio 7 quantum {mtu + 18}",
                  f"qdisc add dev {dev} parent 1:{KICK_MINOR:x} handle {KICK_MINOR:x}: "
                  "bfifo limit 0",
                  f"filter add dev {dev} parent 1: protocol {KICK_ETHERTYPE:#x} prio 4 u32 "
                  f"match u32 0 0 flowid 1:{KICK_MINOR:x}"]
    return lines


#: how the emulation departs from a switch ASIC, recorded in every run with classes
DEPARTURE = ("PFC is done by a userspace agent: queues are read every poll_ms, PAUSE goes "
             "out through a packet socket and a received PAUSE slows a token bucket by "
             "netlink, so the reaction takes milliseconds where an ASIC takes about a "
             "microsecond; congestion is seen at egress queues (no ingress buffers), so a "
             "switch pauses every port that could feed a full queue (up-down routing), not "
             "only the ingress ports whose buffer share filled.")


def tenants(section: Qos, workloads: dict[str, list[str]],
            names: dict[str, str] | None = None) -> dict[str, dict]:
    """The classes that match hosts (tenants), with their hosts and the workloads whose
    hosts they hold (``workloads``: e.g. ``{"chains": ["n2", ...], "training": [...]}``;
    ``names``: a host's short name by index or name, from :func:`host_addresses`)."""
    names = names or {}
    out = {}
    for c in classes_of(section):
        if not c.hosts:
            continue
        hosts = [names.get(str(h), str(h)) for h in c.hosts]
        out[c.name] = {"hosts": hosts,
                       "workloads": sorted(w for w, on in workloads.items()
                                           if on and set(on) <= set(hosts))}
    return out


def qos_entry(record: dict, section: Qos | dict, roles: dict[str, str],
              workloads: dict[str, list[str]] | None = None,
              names: dict[str, str] | None = None) -> dict:
    """A variant's ``qos`` summary from the agent's ``pfc.json``: per-class totals over
    the switch ports, PAUSE frames, pause time, watchdog events and the reaction time
    measured against the one the headroom was sized for."""
    cfg = section if isinstance(section, Qos) else Qos.model_validate(section)
    per_class: dict[str, dict] = {}
    paused: dict[str, float] = {}
    frames = {"xoff_tx": 0, "xon_tx": 0, "rx": 0}
    watchdog = 0
    for ifname, port in record["ports"].items():
        frames["xoff_tx"] += port["xoff_tx"]
        frames["xon_tx"] += port["xon_tx"]
        frames["rx"] += port["frames_rx"]
        for name, c in port["classes"].items():
            watchdog += c.get("watchdog_events", 0)
            if c.get("paused_s"):
                paused[ifname] = paused.get(ifname, 0) + c["paused_s"]
            if ifname not in roles:  # host NICs: counted where they pause, not as queues
                continue
            agg = per_class.setdefault(name, {"bytes": 0, "drops": 0, "peak_backlog_bytes": 0})
            agg["bytes"] += c.get("bytes", 0)
            agg["drops"] += c.get("drops", 0)
            agg["peak_backlog_bytes"] = max(agg["peak_backlog_bytes"],
                                            c.get("peak_backlog_bytes", 0))
    reaction = record["reaction"]
    parts = [reaction[k]["p99"] for k in ("poll_gap_ms", "frame_transit_ms", "apply_ms")]
    measured = round(sum(parts), 3) if all(p is not None for p in parts) else None
    top = sorted(paused.items(), key=lambda kv: -kv[1])[:5]
    storms = record.get("storms", [])
    storm = None
    if storms:
        start = min(s["start_s"] for s in storms)
        drops = [t for t in record.get("watchdog_log", []) if t >= start]
        storm = {"ports": sorted({s["port"] for s in storms}),
                 "started_s": start,
                 "ports_paused": len(record.get("storm_paused", {})),
                 # paused by congestion before the storm began: spread it cannot claim
                 "ports_paused_before": len(record.get("paused_before_storm", [])),
                 "switch_ports_paused": sum(p in roles for p in record.get("storm_paused", {})),
                 "watchdog_first_ms": (round((min(drops) - start) * 1000, 1)
                                       if drops else None)}
    return {"classes": [c.name for c in classes_of(cfg)], "pfc": cfg.pfc.enabled,
            "lossless_classes": [c.name for c in classes_of(cfg) if c.lossless],
            "tenants": tenants(cfg, workloads or {}, names), "storm": storm,
            "per_class": per_class, "pfc_frames": frames,
            "paused_s_total": round(sum(paused.values()), 3),
            "most_paused": [{"port": p, "role": roles.get(p, "host_nic"), "paused_s": round(s, 3)}
                            for p, s in top],
            "watchdog_events": watchdog, "reaction": reaction,
            "reaction_assumed_ms": cfg.pfc.reaction_ms,
            "reaction_p99_sum_ms": measured, "departure": DEPARTURE,
            "agent_error": (record.get("error") or "").strip().splitlines()[-1:] or None}
