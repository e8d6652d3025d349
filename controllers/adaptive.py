"""Adaptive routing: per-flow placement and elephant moves, as pure logic.

Flows are placed at every switch whose route to the destination has more than one next
hop (the leaves of a leaf-spine; the edge and aggregation switches of a fat-tree).
Below, "leaf" and "uplink" stand for such a switch and the members of its ECMP set.

Design (Hedera-like, Al-Fares et al., NSDI'10):

- The proactive ECMP rule per remote destination (the 5-tuple hash of
  :mod:`controllers.ecmp`) stays as it is: it is
  the fallback that keeps forwarding when the controller dies.
- In ``adaptive`` mode the leaf gets, one priority higher, the same rule with one more
  action: a copy of the packet (its first 128 bytes) to the controller, for TCP SYNs
  and UDP (:func:`learn_matches`). So a flow that has no rule of its own is forwarded by
  ECMP *and* announced to the controller. (Copying every packet of every unplaced flow
  halved chain throughput in the default scenario: each copy is an upcall through the
  single-threaded userspace switch and a packet-in.) Placing every short agent-chain
  connection still costs: a rule added and expired per connection, each a flow-table
  change after which the userspace switch revalidates its datapath flows; in the default
  scenario chains completed fell to about half of ECMP's. With ``adaptive.place_tcp:
  false`` only UDP (RoCE) flows are placed and moved, and TCP stays on the ECMP hash.
- On that packet-in the controller places the flow (its IPv4 5-tuple) on the uplink
  whose *path* has the least measured load (:class:`PathTable`): on a leaf-spine, the
  uplink and the spine's downlink to the destination's leaf, as loaded as the busier of
  the two (telemetry
  utilisation, ties broken by how many placed flows, of any leaf, the busier of the two
  already carries; flows that start together all see zero load), with an exact-match
  rule at :data:`PRIORITY_FLOW` and an idle timeout. From then on the flow bypasses the
  ECMP hash and stops reaching the controller. The few packets forwarded by ECMP before
  the rule lands may take another uplink: the only reordering, once, at the very start
  of a flow.
- The controller reads the per-flow byte counters of those rules (flow stats, by cookie)
  every :data:`FLOW_POLL_S`, and at once when a telemetry sample shows the leaf's
  uplinks apart by more than ``imbalance``; with the utilisation of that sample: when an
  elephant's (a flow above ``elephant_mbps``) path is busier by more than ``imbalance``
  than the path over another uplink, it moves one: the one whose move leaves the two
  paths closest to equal, and only if the move narrows the gap. Edge-only balance (the
  first version: uplinks alone) cannot see flows of different leaves meeting on one
  spine downlink; on a random permutation that left the uplinks even and the goodput at
  1.2-1.6 times ECMP's. A flow's share is its rate, or what the other flows leave of the
  uplink's load if that is more (rates lag). A moved flow stays put for :data:`FREEZE_S`
  and the leaf makes no other move for :data:`HOLD_S`, so flows do not oscillate. A move
  is a modify of the flow's rule (its counters stay): a whole-flow move, once per
  decision, so a TCP flow sees at most one burst of reordering, which SACK absorbs.

The OpenFlow side (matches, flow mods) lives in :mod:`controllers.congestion_app`.
"""

from __future__ import annotations

from dataclasses import dataclass

from controllers.paths import SwitchPlan

PRIORITY_LEARN = 105
#: the learn rules' cookie: the per-flow rules' top byte, so one delete by mask takes both
COOKIE_LEARN = 0xAD00_0000_0000_0001
PRIORITY_FLOW = 200
COOKIE_FLOW = 0xAD00_0000_0000_0000
COOKIE_MASK = 0xFF00_0000_0000_0000
#: a placed flow idle this long loses its rule and falls back to ECMP (a flowlet gap:
#: nothing of it is in flight any more, so a new path cannot reorder it)
FLOW_IDLE_S = 2
#: how often per-flow counters are read regardless of imbalance: the userspace datapath
#: pushes them into the rules only about twice a second, faster polling reads the same
FLOW_POLL_S = 0.5
#: seconds a moved flow stays where it was put
FREEZE_S = 2.0
#: seconds a leaf waits after a move before the next one: flow rates lag by one
#: counter push (about 0.6 s), and a move must show in them before the next decision
HOLD_S = 1.0
#: a flow is moved only if its share is at most this fraction of the gap: rates are
#: estimates over one short interval, and a flow as large as the gap would only carry the
#: hot spot to the other uplink (and back, next time)
MAX_SHARE_OF_GAP = 0.75


TCP_SYN, TCP_ACK = 0x02, 0x12 & ~0x02


def learn_matches(ip: str, *, tcp: bool = True, every_tcp: bool = False) -> list[dict]:
    """What the leaf copies to the controller for destination ``ip``: a TCP connection's
    first packet (SYN without ACK: one packet a connection, and the rule is in place
    before data flows) and UDP packets of flows not yet placed (RoCE queue pairs, few
    and long).

    >>> [sorted(m) for m in learn_matches("10.0.0.3")]  # doctest: +NORMALIZE_WHITESPACE
    [['eth_type', 'ip_proto', 'ipv4_dst', 'tcp_flags'], ['eth_type', 'ip_proto', 'ipv4_dst']]
    """
    udp = [{"eth_type": 0x0800, "ipv4_dst": ip, "ip_proto": 17}]
    if not tcp:  # ``adaptive.place_tcp: false``: TCP stays on ECMP
        return udp
    if every_tcp:  # gff: any packet of a flow without a rule (one that idled out, or one
        # whose rule a restarted controller removed), not only its first
        return [{"eth_type": 0x0800, "ipv4_dst": ip, "ip_proto": 6}, *udp]
    return [{"eth_type": 0x0800, "ipv4_dst": ip, "ip_proto": 6,
             "tcp_flags": (TCP_SYN, TCP_SYN | TCP_ACK)}, *udp]


@dataclass(frozen=True)
class FlowKey:
    """An IPv4 5-tuple (proto 6 = TCP, 17 = UDP)."""

    proto: int
    src: str
    dst: str
    sport: int
    dport: int

    def __str__(self) -> str:
        name = {6: "tcp", 17: "udp"}.get(self.proto, str(self.proto))
        return f"{name} {self.src}:{self.sport}>{self.dst}:{self.dport}"


@dataclass(frozen=True)
class FlowLoad:
    """A placed flow, the uplink its rule sends it to, and its measured rate."""

    key: FlowKey
    port: int
    mbps: float
    age_s: float = float("inf")


@dataclass(frozen=True)
class Move:
    key: FlowKey
    from_port: int
    to_port: int
    mbps: float
    reason: str


def least_loaded(util: dict[int, float], placed: dict[int, int]) -> int:
    """The uplink for a new flow: lowest utilisation (of the uplink, or of the whole path
    when the caller passes path figures), then fewest placed flows, then port.

    >>> least_loaded({3: 0.9, 4: 0.1}, {})
    4
    >>> least_loaded({3: 0.0, 4: 0.0}, {3: 1})
    4
    >>> least_loaded({3: 0.5, 4: 0.5}, {3: 2, 4: 2})
    3
    """
    return min(util, key=lambda p: (round(util[p], 2), placed.get(p, 0), p))


def plan_move(util: dict[int, float], flows: list[FlowLoad], *, link_mbps: float,
              imbalance: float, elephant_mbps: float,
              frozen: frozenset[FlowKey] = frozenset(), min_age_s: float = 0.0,
              downlink: dict[FlowKey, dict[int, float]] | None = None) -> Move | None:
    """The one elephant to move to a less loaded path, or None.

    ``util`` is each uplink's utilisation (0..1) in the last interval, ``flows`` the
    placed flows with their rates. ``downlink`` (optional) gives, per flow, the
    utilisation of the spine downlink towards the flow's destination leaf behind each
    uplink: a path is as loaded as the busier of its two links, so flows from different
    leaves that meet on one spine downlink are seen too, which uplink balance alone
    misses. A flow moves when its path is more than ``imbalance`` busier than another
    one and its share is small enough to narrow that gap; of all candidates the move
    that leaves the two paths closest to equal wins. Flows younger than ``min_age_s``
    have no reliable rate yet and stay where they are.

    >>> k1, k2 = FlowKey(6, "a", "b", 1, 2), FlowKey(6, "c", "d", 3, 4)
    >>> f = [FlowLoad(k1, 3, 9.0), FlowLoad(k2, 3, 9.5)]
    >>> m = plan_move({3: 0.95, 4: 0.0}, f, link_mbps=20, imbalance=0.2, elephant_mbps=1)
    >>> m.key.src, m.from_port, m.to_port, m.mbps  # carries 19 - 9.5: leaves them equal
    ('a', 3, 4, 9.0)
    >>> plan_move({3: 0.5, 4: 0.45}, f, link_mbps=20, imbalance=0.2, elephant_mbps=1) is None
    True

    Uplinks even, but k1's spine downlink behind uplink 3 is full (another leaf's flow
    meets it there): k1 moves to uplink 4.

    >>> f = [FlowLoad(k1, 3, 6.0), FlowLoad(k2, 4, 6.0)]
    >>> down = {k1: {3: 0.95, 4: 0.2}, k2: {3: 0.95, 4: 0.3}}
    >>> m = plan_move({3: 0.3, 4: 0.3}, f, link_mbps=20, imbalance=0.2, elephant_mbps=1,
    ...               downlink=down)
    >>> m.key.src, m.from_port, m.to_port
    ('a', 3, 4)
    """
    if len(util) < 2 or link_mbps <= 0:
        return None
    downlink = downlink or {}

    def load(flow: FlowLoad, port: int) -> float:
        return max(util[port], downlink.get(flow.key, {}).get(port, 0.0))

    best: tuple[float, int, FlowLoad, float, float] | None = None
    for flow in flows:
        if (flow.port not in util or flow.mbps < elephant_mbps or flow.key in frozen
                or flow.age_s < min_age_s):
            continue
        # what the flow carries: its own rate, or, when the uplink carries more than its
        # flows' (lagging) rates add up to, what the others leave of the uplink's load
        others = sum(f.mbps for f in flows if f.port == flow.port and f.key != flow.key)
        share = max(flow.mbps, util[flow.port] * link_mbps - others) / link_mbps
        now = load(flow, flow.port)
        for port in sorted(util):
            there = load(flow, port)
            gap = now - there
            if port == flow.port or gap <= imbalance or share > MAX_SHARE_OF_GAP * gap:
                continue  # not busier by enough, or the flow would carry the hot spot along
            after = abs((now - share) - (there + share))
            if best is None or after < best[0]:
                best = (after, port, flow, now, there)
    if best is None:
        return None
    _, port, flow, now, there = best
    reason = (f"path via uplink {flow.port} at {now:.2f}, via uplink {port} at {there:.2f} "
              f"(gap {now - there:.2f} > {imbalance:g})")
    return Move(flow.key, flow.port, port, round(flow.mbps, 3), reason)


class PathTable:
    """Where each switch's choices lead, from the plans: the load of a path and the links
    it takes, for placing flows on whole paths rather than on first hops.

    A choice is (switch, port, destination). Its load is the busier of that link and of
    the path beyond it: beyond a switch with one next hop, that hop's load again;
    beyond a switch with several, the least loaded of them (it places flows too); the
    last link, down to the host, is left out (every choice shares it). On a leaf-spine
    that is the busier of the uplink and the spine's downlink to the destination's leaf.

    >>> from controllers.paths import plan_switch
    >>> from topologies.leafspine import build_fabric
    >>> spec = build_fabric(prefix="tbdoc0", nodes=4, leaves_per_plane=2, spines_per_plane=2)
    >>> table = PathTable(spec, {sw.dpid: plan_switch(spec, sw.dpid) for sw in spec.switches})
    >>> l0, s1 = spec.switch("tbdoc0p0l0").dpid, spec.switch("tbdoc0p0s1").dpid
    >>> table.links(l0, 4, "10.0.0.3") == [(l0, 4), (s1, 2)]
    True
    >>> table.load({(l0, 4): 0.2, (s1, 2): 0.7}, l0, 4, "10.0.0.3")
    0.7
    """

    def __init__(self, spec, plans: dict[int, SwitchPlan]):
        dpids = {sw.name: sw.dpid for sw in spec.switches}
        #: (dpid, port) -> the switch behind it (absent: a host)
        self.behind = {(dpids[p.switch], p.port): dpids[p.peer] for p in spec.switch_ports()
                       if p.peer in dpids}
        #: (dpid, destination) -> next-hop ports
        self.hops = {(d, r.ip): plan.members(r) for d, plan in plans.items()
                     for r in plan.routes}

    def links(self, dpid: int, port: int, dst: str) -> list[tuple[int, int]]:
        """The links a choice takes for sure: its own, then each single next hop's, up
        to a switch with a choice of its own or the last link (left out)."""
        out = [(dpid, port)]
        here = self.behind.get((dpid, port))
        while here is not None and (here, dst) in self.hops:
            ports = self.hops[(here, dst)]
            if len(ports) != 1 or (here, ports[0]) not in self.behind:
                break
            out.append((here, ports[0]))
            here = self.behind[(here, ports[0])]
        return out

    def paths(self, dpid: int, dst: str) -> list[list[tuple[int, int]]]:
        """Every path from switch ``dpid`` to ``dst`` over the plans' next hops, as its
        switch-to-switch links, in port order at every choice (the last link, down to
        the host, left out: every path shares it).

        >>> from controllers.paths import plan_switch
        >>> from topologies.fattree import build_fattree
        >>> spec = build_fattree(prefix="tbdoc0", k=4)
        >>> table = PathTable(spec, {sw.dpid: plan_switch(spec, sw.dpid) for sw in spec.switches})
        >>> paths = table.paths(spec.switch("tbdoc0p0e0").dpid, "10.0.0.16")
        >>> len(paths), [len(p) for p in paths]  # 2 aggregations x 2 cores, 4 links each
        (4, [4, 4, 4, 4])
        >>> table.paths(spec.switch("tbdoc0p0e0").dpid, "10.0.0.2")  # same edge: no choice
        [[]]
        """
        ports = [p for p in self.hops.get((dpid, dst), []) if (dpid, p) in self.behind]
        if not ports:
            return [[]]
        return [[(dpid, p), *rest] for p in ports
                for rest in self.paths(self.behind[(dpid, p)], dst)]

    def load(self, util: dict[tuple[int, int], float], dpid: int, port: int,
             dst: str, *, first: bool = True) -> float:
        """Utilisation of the busiest link of the choice's path (0..1); without its
        ``first`` link: of the path beyond it."""
        here = self.behind.get((dpid, port))
        beyond = 0.0
        if here is not None:
            ports = [p for p in self.hops.get((here, dst), []) if (here, p) in self.behind]
            if ports:
                beyond = min(self.load(util, here, p, dst) for p in ports)
        return max(util.get((dpid, port), 0.0), beyond) if first else beyond


class FlowRates:
    """Per-flow rates from successive flow-stats readings (byte count and rule age).

    The userspace datapath pushes its per-flow counters into the OpenFlow rules only
    when its revalidators run (about every half second), so a rule's byte count moves in
    steps: over one 100 ms interval a flow looks idle or several times its real rate.
    The rate is therefore taken between two *changes* of the count (each observed within
    one interval of when it happened), and a flow whose count has not changed for
    :data:`STALE_S` is idle.
    """

    STALE_S = 2.0

    def __init__(self) -> None:
        #: key -> (byte count at its last change, rule age then, rate in Mb/s)
        self._last: dict[FlowKey, tuple[int, float, float]] = {}

    def update(self, readings: list[tuple[FlowKey, int, int, float]]) -> list[FlowLoad]:
        """``readings``: (key, out port, byte count, rule age in s) of one switch's rules.

        >>> r = FlowRates()
        >>> k = FlowKey(17, "a", "b", 1, 4791)
        >>> r.update([(k, 3, 0, 0.1)])[0].mbps
        0.0
        >>> r.update([(k, 3, 0, 0.2)])[0].mbps  # counters not pushed yet
        0.0
        >>> r.update([(k, 3, 625_000, 0.6)])[0].mbps  # 5 Mbit in 0.5 s
        10.0
        >>> r.update([(k, 3, 625_000, 0.7)])[0].mbps  # no step yet: rate holds
        10.0
        >>> r.update([(k, 3, 625_000, 2.7)])[0].mbps  # no step for 2 s: idle
        0.0
        """
        loads, seen = [], {}
        for key, port, nbytes, age in readings:
            prev = self._last.get(key)
            if prev is None:
                state = (nbytes, age, 0.0)
            elif nbytes != prev[0]:
                rate = 0.0
                if nbytes > prev[0] and age > prev[1]:
                    rate = (nbytes - prev[0]) * 8 / (age - prev[1]) / 1e6
                state = (nbytes, age, rate)
            elif age - prev[1] > self.STALE_S:
                state = (prev[0], prev[1], 0.0)
            else:
                state = prev
            seen[key] = state
            loads.append(FlowLoad(key, port, round(state[2], 3), age))
        self._last = seen
        return loads
