"""ECN marking by the controller, for kernels without RED: the decision and the rule plan.

Per switch port and traffic class a :class:`MarkState` decides from the measured egress
backlog whether the port marks CE. It works like RED with hysteresis, in time slices of
one telemetry interval: below ``min`` nothing is marked; at or above ``max`` marking
switches on; in between it switches on for the next interval with probability
``probability * (backlog - min) / (max - min)`` (RED's marking curve, applied to time
slices instead of packets, so a fraction of intervals rather than of packets is marked).
Once on, it stays on until the backlog drains below ``min``.

How marking reaches the packets (OpenFlow 1.3, ``set_field:ip_ecn=3`` on packets that
match ``ip_ecn=1`` or ``ip_ecn=2`` only, so not-ECT packets are never touched):

- ports chosen by a plain output rule (spine downlinks, leaf downlinks: every port a
  route takes alone): while a port
  marks for a class, one rule per destination routed to that port, class and ECT
  codepoint, at :data:`PRIORITY_MARK`, does ``set_field:ip_ecn=3, output:port``;
- members of an ECMP set (leaf uplinks), chosen by the hash: ECN-capable traffic of
  each class has a rule
  of its own (at :data:`PRIORITY_ECT`, installed once) that writes the uplink the hash
  chooses into a register (``bundle_load``, same hash and members as the ECMP rule, so
  the same uplink, see :mod:`controllers.ecmp`) and continues in table 1, where one rule
  per uplink and class sends it through that uplink's marking group (next item);
- leaf uplinks chosen by a rule of the controller (spray buckets, adaptive per-flow
  rules): ECN-capable packets go through the class's marking group of that uplink
  (:func:`mark_group`), whose first bucket carries the set_field while the uplink marks.

Classes: ``collective`` is RoCEv2 (UDP destination port 4791), ``agents`` is TCP.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from controllers.config import CLASSES, EcnClass
from controllers.ecmp import PORT_REG, backup_order
from controllers.paths import SwitchPlan

PRIORITY_ECT = 110
PRIORITY_MARK = 120
COOKIE_MARK = 0xEC00_0000_0000_0000
ECT_CODEPOINTS = (1, 2)
ROCE_PORT = 4791
ETH_IPV4 = 0x0800


#: group per class and uplink, id base + OpenFlow port: its first bucket outputs to the
#: uplink, with set_field ip_ecn=3 while that uplink marks for the class (a fast-failover
#: group: the other buckets take the other uplinks when it is dead). Rules that pin
#: ECN-capable packets to one uplink (spray buckets, adaptive per-flow rules) use it.
MARK_GROUP_BASE = {"collective": 0x100, "agents": 0x200}


def mark_group(cls: str, port: int) -> int:
    """The marking group of ``cls`` traffic leaving uplink ``port``.

    >>> mark_group("agents", 3)
    515
    """
    return MARK_GROUP_BASE[cls] + port


def port_of_group(group: int) -> int | None:
    """The uplink behind a marking group id, or None for other groups.

    >>> port_of_group(mark_group("collective", 4)), port_of_group(1)
    (4, None)
    """
    for base in MARK_GROUP_BASE.values():
        if base <= group < base + 0x100:
            return group - base
    return None


def flow_class(proto: int, dport: int) -> str | None:
    """The traffic class of a flow: TCP is ``agents``, RoCE (UDP 4791) ``collective``.

    >>> flow_class(6, 5201), flow_class(17, 4791), flow_class(17, 5001)
    ('agents', 'collective', None)
    """
    if proto == 6:
        return "agents"
    if proto == 17 and dport == ROCE_PORT:
        return "collective"
    return None


def class_match(cls: str) -> dict:
    """OpenFlow match fields that select a traffic class.

    >>> class_match("collective")
    {'ip_proto': 17, 'udp_dst': 4791}
    """
    if cls == "collective":
        return {"ip_proto": 17, "udp_dst": ROCE_PORT}
    if cls == "agents":
        return {"ip_proto": 6}
    raise KeyError(cls)


@dataclass
class MarkState:
    """Whether one port marks CE for one class; updated once per telemetry sample."""

    on: bool = False

    def update(self, backlog: int, th: EcnClass, draw: Callable[[], float]) -> bool:
        """Apply one backlog sample; returns True when the state changed.

        >>> th = EcnClass(min_kb=20, max_kb=60, probability=0.1)
        >>> s = MarkState()
        >>> s.update(10_000, th, lambda: 0.0), s.on  # below min: never
        (False, False)
        >>> s.update(60_000, th, lambda: 1.0), s.on  # at max: always
        (True, True)
        >>> s.update(30_000, th, lambda: 1.0), s.on  # between: stays on (hysteresis)
        (False, True)
        >>> s.update(19_999, th, lambda: 0.0), s.on  # drained below min: off
        (True, False)
        >>> s.update(40_000, th, lambda: 0.04), s.on  # 0.04 < 0.1 * 0.5
        (True, True)
        """
        if self.on:
            if backlog < th.min_bytes:
                self.on = False
                return True
            return False
        if backlog >= th.max_bytes:
            self.on = True
        elif backlog >= th.min_bytes and th.max_bytes > th.min_bytes:
            p = th.probability * (backlog - th.min_bytes) / (th.max_bytes - th.min_bytes)
            self.on = draw() < p
        return self.on


def mark_rules(plan: SwitchPlan, port: int, cls: str) -> list[dict]:
    """Matches of the marking rules of ``port`` for ``cls`` (destinations routed there).

    >>> from controllers.paths import Route
    >>> plan = SwitchPlan(1, "s", "spine", routes=[Route("10.0.0.1", port=1),
    ...                                           Route("10.0.0.3", port=2)])
    >>> mark_rules(plan, 2, "agents")  # doctest: +NORMALIZE_WHITESPACE
    [{'eth_type': 2048, 'ipv4_dst': '10.0.0.3', 'ip_ecn': 1, 'ip_proto': 6},
     {'eth_type': 2048, 'ipv4_dst': '10.0.0.3', 'ip_ecn': 2, 'ip_proto': 6}]
    """
    return [{"eth_type": ETH_IPV4, "ipv4_dst": r.ip, "ip_ecn": ect, **class_match(cls)}
            for r in plan.routes if r.port == port for ect in ECT_CODEPOINTS]


def ect_rules(plan: SwitchPlan) -> list[tuple[dict, list[int]]]:
    """Matches of the rules that take ECN-capable traffic of each class to destinations
    routed over several ports off the plain ECMP rule (to choose the port into a
    register, then mark), each with the ports of its ECMP set.

    >>> from controllers.paths import Route
    >>> plan = SwitchPlan(1, "l", "leaf", {1: [3, 4]}, [Route("10.0.0.1", port=1),
    ...                                                Route("10.0.0.3", group=1)])
    >>> [(m["ipv4_dst"], m["ip_ecn"], m["ip_proto"], ports) for m, ports in ect_rules(plan)]
    ... # doctest: +NORMALIZE_WHITESPACE
    [('10.0.0.3', 1, 17, [3, 4]), ('10.0.0.3', 2, 17, [3, 4]), ('10.0.0.3', 1, 6, [3, 4]),
     ('10.0.0.3', 2, 6, [3, 4])]
    """
    sets = plan.multipath()
    return [({"eth_type": ETH_IPV4, "ipv4_dst": ip, "ip_ecn": ect, **class_match(cls)}, ports)
            for cls in CLASSES for ip, ports in sets.items() for ect in ECT_CODEPOINTS]


def mark_order(plan: SwitchPlan, port: int) -> list[int]:
    """The buckets of ``port``'s marking groups: ``port``, then the other members of the
    ECMP sets it belongs to (the uplinks of a leaf), in backup order.

    >>> from controllers.paths import Route
    >>> mark_order(SwitchPlan(1, "l", "leaf", {1: [3, 4, 5]}, [Route("10.0.0.3", group=1)]), 4)
    [4, 5, 3]
    """
    members: list[int] = []
    for ports in plan.multipath().values():
        if port in ports:
            members += [p for p in ports if p not in members]
    return backup_order(port, members)


def chosen_port_match(cls: str, port: int) -> dict:
    """Match, in the table after :func:`ect_rules`, of ``cls`` traffic for which the
    ECMP hash chose uplink ``port``.

    >>> chosen_port_match("agents", 4)
    {'eth_type': 2048, 'reg0': 4, 'ip_proto': 6}
    """
    return {"eth_type": ETH_IPV4, PORT_REG: port, **class_match(cls)}
