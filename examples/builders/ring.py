"""A ring of switches with hosts on each: a topology no shipped builder makes.

Named in a scenario as ``builder: examples.builders.ring:build`` (run from the
repository's top folder, or with it on ``PYTHONPATH``); the scenario's other
``topology:`` keys are this function's parameters. A builder may assemble the spec's
dataclasses itself; this one writes the graph as ``nodes:`` and ``links:`` and lets the
explicit builder number the ports and addresses and check it.

A ring is flat (every switch attaches hosts, tier 0), so the controller routes over
plain shortest paths: both ways round to the switch opposite (an ECMP set of two),
one way to the others.

>>> spec = build(prefix="tbdemo", switches=4, hosts_per_switch=2)
>>> spec.counts(), spec.builder
({'switches': 4, 'hosts': 8, 'links': 12}, 'explicit')
>>> sorted({sw.role for sw in spec.switches}), spec.roles()
(['switch'], ['switch_peer', 'switch_downlink'])
"""

from __future__ import annotations

from topologies.explicit import Params, build_explicit
from topologies.params import parse
from topologies.spec import FabricSpec, TopologyError


def build(*, prefix: str, switches: int = 6, hosts_per_switch: int = 2,
          link_mbps: float = 20.0, mtu: int = 9000, queue_kb: int = 64) -> FabricSpec:
    """``switches`` switches in a ring, ``hosts_per_switch`` hosts on each."""
    if not isinstance(switches, int) or not 3 <= switches <= 32:
        raise TopologyError("switches", f"must be an integer 3..32, got {switches!r}")
    if not isinstance(hosts_per_switch, int) or not 1 <= hosts_per_switch <= 8:
        raise TopologyError("hosts_per_switch", f"must be an integer 1..8, got "
                                                f"{hosts_per_switch!r}")
    nodes: dict[str, dict] = {f"r{i}": {"kind": "switch"} for i in range(switches)}
    links = [{"endpoints": [f"r{i}", f"r{(i + 1) % switches}"]} for i in range(switches)]
    for i in range(switches):
        for j in range(hosts_per_switch):
            host = f"h{i * hosts_per_switch + j}"
            nodes[host] = {"kind": "host"}
            links.append({"endpoints": [host, f"r{i}"]})
    section = {"nodes": nodes, "links": links, "link_mbps": link_mbps, "mtu": mtu,
               "queue_kb": queue_kb}
    return build_explicit(parse(Params, section), prefix=prefix)
