"""Where each switch and host of a fabric runs when one machine is not enough.

Every link between two machines is carried by a tunnel (GRE over the machines' own
network), which costs both machines CPU per frame and adds the underlay's delay to the
link's: a placement should cut as few links as it can while it shares the work out
evenly. Three ways are tried and the one that cuts the fewest links wins, among those
that keep every machine within :data:`BALANCE` of an even share:

* ``plane``: every switch of a plane on one machine (planes dealt out), each host where
  most of its links go; a multi-plane host has a link to every plane, so this cuts
  host links;
* ``group``: a leaf group (the leaf-spine's scalable unit: its leaves on every plane
  with the nodes behind them) or a fat-tree pod (its edge and aggregation switches
  with their hosts) as one piece; the switches of no group (spines, cores) then go
  where most of their links already are;
* ``spread``: no pieces: every switch and host alone, most ports first, each where most
  of its links already are (the fallback for fabrics without groups).

A machine's load is the ports it runs (a switch's every port, a host's every
interface): on the userspace datapath the switch processes poll every port each time
they wake, so ports are what a machine pays for when the fabric idles (docs/switches.md).

>>> from topologies.leafspine import build_fabric
>>> spec = build_fabric(prefix="tbdoc0", planes=2, nodes=8, leaves_per_plane=2,
...                     spines_per_plane=2, link_mbps=20)
>>> best = place(spec, 2)
>>> best.way, len(best.cut), best.tunnel_mbps()
('group', 4, {(0, 1): 160.0})
>>> [len(best.on(m)) for m in range(2)], best.load()
([8, 8], [24, 24])
>>> [p.way for p in candidates(spec, 2)], [len(p.cut) for p in candidates(spec, 2)]
(['plane', 'group', 'spread'], [8, 4, 4])
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from topologies.spec import FabricSpec, Link

#: a placement is balanced when no machine runs more than this times an even share of
#: the ports (or, when one piece is larger than that, than the largest piece)
BALANCE = 1.25
#: what a GRE tunnel adds to each frame of a cut link: the outer IPv4 header (20 bytes)
#: and GRE with a key (8); the inner frame keeps its Ethernet header (14)
GRE_OVERHEAD = 20 + 8 + 14
#: the tunnels a lab over several machines can use, in the order it prefers them, with
#: what each adds to a frame: GRE with a key as above; VXLAN (outer IPv4, UDP and the
#: VXLAN header, 20 + 8 + 8, and the inner Ethernet header) where a kernel lacks GRE
TUNNELS = {"gretap": GRE_OVERHEAD, "vxlan": 20 + 8 + 8 + 14}
WAYS = ("plane", "group", "spread")


@dataclass(frozen=True)
class Placement:
    """One way of placing ``spec`` on ``machines`` machines: ``where`` maps every switch
    and host to a machine index; ``cut`` are the links whose ends are apart."""

    way: str
    machines: int
    where: dict[str, int]
    cut: tuple[Link, ...]
    ports: dict[str, int]

    def on(self, machine: int) -> list[str]:
        """The switches and hosts placed on ``machine``."""
        return [name for name, m in self.where.items() if m == machine]

    def load(self) -> list[int]:
        """The ports each machine runs."""
        load = [0] * self.machines
        for name, m in self.where.items():
            load[m] += self.ports[name]
        return load

    def balance(self) -> float:
        """The busiest machine's ports over an even share."""
        load = self.load()
        return max(load) * self.machines / max(1, sum(load))

    def tunnel_mbps(self) -> dict[tuple[int, int], float]:
        """Per pair of machines, the link rate their tunnels must carry each way."""
        out: dict[tuple[int, int], float] = defaultdict(float)
        for lk in self.cut:
            pair = tuple(sorted((self.where[lk.a], self.where[lk.b])))
            out[pair] += lk.mbps
        return dict(sorted(out.items()))

    def to_dict(self) -> dict:
        return {
            "way": self.way, "machines": self.machines, "balance": round(self.balance(), 3),
            "load_ports": self.load(),
            "placed": {str(m): self.on(m) for m in range(self.machines)},
            "cut_links": [{"a": lk.a, "b": lk.b, "kind": lk.kind, "plane": lk.plane,
                           "mbps": lk.mbps,
                           "machines": [self.where[lk.a], self.where[lk.b]]}
                          for lk in self.cut],
            "tunnel_mbps": {f"{a}-{b}": v for (a, b), v in self.tunnel_mbps().items()},
        }


def place(spec: FabricSpec, machines: int) -> Placement:
    """The placement that cuts the fewest links among the balanced ones (ties: the
    fewer Mb/s cut, then the order of :data:`WAYS`); when none is balanced, the most
    balanced one."""
    return best_of(spec, machines, candidates(spec, machines))


def best_of(spec: FabricSpec, machines: int, options: list[Placement]) -> Placement:
    """:func:`place`'s choice among ``options`` (:func:`candidates`)."""
    balanced = [p for p in options if p.balance() <= _limit(spec, machines, p.way)]
    if not balanced:
        return min(options, key=lambda p: p.balance())
    return min(balanced, key=lambda p: (len(p.cut), sum(lk.mbps for lk in p.cut),
                                        WAYS.index(p.way)))


def candidates(spec: FabricSpec, machines: int) -> list[Placement]:
    """One placement each way of :data:`WAYS` (a way that does not apply is left out:
    ``group`` on a fabric without groups)."""
    if machines < 1:
        raise ValueError(f"machines must be at least 1, got {machines}")
    ports = _ports(spec)
    out = []
    for way in WAYS:
        pieces = _pieces(spec, way)
        if pieces is None:
            continue
        where = _assign(spec, pieces, ports, machines)
        cut = tuple(lk for lk in spec.links if where[lk.a] != where[lk.b])
        out.append(Placement(way, machines, where, cut, ports))
    return out


def underlay_mtu(spec: FabricSpec, tunnel: str = "gretap") -> int:
    """The MTU the machines' own network needs so that a ``tunnel`` carries the fabric's
    largest frame whole.

    >>> from topologies.leafspine import build_fabric
    >>> spec = build_fabric(prefix="tbdoc0", mtu=9000)
    >>> underlay_mtu(spec), underlay_mtu(spec, "vxlan")
    (9042, 9050)
    """
    return spec.mtu + TUNNELS[tunnel]


def _ports(spec: FabricSpec) -> dict[str, int]:
    ports: dict[str, int] = defaultdict(int)
    for lk in spec.links:
        ports[lk.a] += 1
        ports[lk.b] += 1
    return {name: ports[name] for name in [*(s.name for s in spec.switches),
                                           *(h.name for h in spec.hosts)]}


def _pieces(spec: FabricSpec, way: str) -> list[list[str]] | None:
    """What must stay together (placed first, largest first); everything not in a
    piece is placed alone afterwards."""
    if way == "plane":
        return [[s.name for s in spec.switches if s.plane == p] for p in range(spec.planes)]
    if way == "group":
        groups: dict[int, list[str]] = defaultdict(list)
        for sw in spec.switches:
            if sw.group is not None:
                groups[sw.group].append(sw.name)
        for host in spec.hosts:
            if host.group in groups:
                groups[host.group].append(host.name)
        return [groups[g] for g in sorted(groups)] if len(groups) > 1 else None
    return []


def _assign(spec: FabricSpec, pieces: list[list[str]], ports: dict[str, int],
            machines: int) -> dict[str, int]:
    load = [0] * machines
    where: dict[str, int] = {}
    for piece in sorted(pieces, key=lambda p: -sum(ports[n] for n in p)):
        m = min(range(machines), key=lambda i: (load[i], i))
        for name in piece:
            where[name] = m
        load[m] += sum(ports[n] for n in piece)
    neighbours: dict[str, list[str]] = defaultdict(list)
    for lk in spec.links:
        neighbours[lk.a].append(lk.b)
        neighbours[lk.b].append(lk.a)
    share = BALANCE * sum(ports.values()) / machines
    rest = sorted((n for n in ports if n not in where), key=lambda n: (-ports[n], n))
    for name in rest:
        near = [0] * machines
        for other in neighbours[name]:
            if other in where:
                near[where[other]] += 1
        fits = [i for i in range(machines) if load[i] + ports[name] <= share] or \
            list(range(machines))
        m = max(fits, key=lambda i: (near[i], -load[i], -i))
        where[name] = m
        load[m] += ports[name]
    return where


def _limit(spec: FabricSpec, machines: int, way: str) -> float:
    """BALANCE, or what the largest piece forces (one piece cannot be split)."""
    ports = _ports(spec)
    total = sum(ports.values())
    largest = max((sum(ports[n] for n in piece) for piece in _pieces(spec, way) or ()),
                  default=0)
    return max(BALANCE, largest * machines / max(1, total))
