"""Packet spraying: the RoCE source port picks the next hop, per packet.

RoCEv2 NICs put their entropy in the UDP source port; switches hash it to choose a path.
Senders that rotate the source port per packet therefore spray one queue pair's packets
over every uplink, and the receiver reorders by packet sequence number.

The ECMP hash (:mod:`controllers.ecmp`) picks one uplink per source port, so a rotating
port would already spread, but by hash: unevenly over a few packets, and only over the
ports the hash happens to map. ``spray`` mode installs an even spread instead,
proactively, at every switch whose route to a destination has several next hops (the
route's own ECMP set: a leaf's uplinks, a fat-tree edge's aggregation switches, an
aggregation switch's cores): RoCE packets (UDP destination port 4791) whose source port
has low bits ``i`` go out of member ``i mod n`` of that set, with a masked match on
``udp_src`` (OVS accepts masks on transport ports). Consecutive source ports go
round-robin over the uplinks; random ones spread evenly. Everything else (TCP, other
UDP) stays on the ECMP rule. The rules are proactive, so spraying survives the
controller too.
"""

from __future__ import annotations

from dataclasses import dataclass

from controllers.ecn import ETH_IPV4, ROCE_PORT
from controllers.paths import SwitchPlan

PRIORITY_SPRAY = 115


@dataclass(frozen=True)
class SprayRule:
    """Packets to ``ip`` with ``udp_src & mask == value`` (and ``ip_ecn``) use ``port``,
    one of ``members`` (the route's ECMP set: the backups when ``port`` is dead)."""

    ip: str
    value: int
    mask: int
    port: int
    ip_ecn: int | None = None
    members: tuple[int, ...] = ()

    def match(self) -> dict:
        fields = {"eth_type": ETH_IPV4, "ipv4_dst": self.ip, "ip_proto": 17,
                  "udp_dst": ROCE_PORT, "udp_src": (self.value, self.mask)}
        if self.ip_ecn is not None:
            fields["ip_ecn"] = self.ip_ecn
        return fields


def spray_bits(n: int) -> int:
    """Source-port bits needed to reach ``n`` uplinks (the buckets are 2**bits).

    >>> spray_bits(1), spray_bits(2), spray_bits(3), spray_bits(4)
    (0, 1, 2, 2)
    """
    return max(0, (n - 1).bit_length())


def spray_rules(plan: SwitchPlan, *, ect: bool = False) -> list[SprayRule]:
    """Every destination routed over several ports times every source-port bucket over
    that route's ports; ``ect``: one rule per ECT codepoint as well (for the marking
    groups).

    >>> from controllers.paths import Route
    >>> plan = SwitchPlan(1, "l", "leaf", {1: [3, 4], 2: [3, 4, 5]},
    ...                   [Route("10.0.0.1", port=1), Route("10.0.0.3", group=1),
    ...                    Route("10.0.0.5", group=2)])
    >>> [(r.ip, r.value, r.mask, r.port) for r in spray_rules(plan)][:2]
    [('10.0.0.3', 0, 1, 3), ('10.0.0.3', 1, 1, 4)]
    >>> [(r.value, r.port) for r in spray_rules(plan) if r.ip == "10.0.0.5"]  # 4 buckets
    [(0, 3), (1, 4), (2, 5), (3, 3)]
    """
    ecns: tuple[int | None, ...] = (1, 2) if ect else (None,)
    rules = []
    for ip, ports in plan.multipath().items():
        bits = spray_bits(len(ports))
        mask = (1 << bits) - 1
        rules += [SprayRule(ip, value, mask, ports[value % len(ports)], e, tuple(ports))
                  for value in range(1 << bits) for e in ecns]
    return rules
