"""A ring of switches with hosts on each: a topology no shipped builder makes.

Named in a scenario as ``builder: examples.builders.ring:Ring`` (run from the
repository's top folder, or with it on ``PYTHONPATH``); the scenario's other
``topology:`` keys are its ``Params``, checked by that model when the run loads it. A
builder may assemble the spec's dataclasses itself; this one writes the graph as
``nodes:`` and ``links:`` and lets the explicit builder number the ports and addresses
and check it.

A ring is flat (every switch attaches hosts, tier 0), so the controller routes over
plain shortest paths: both ways round to the switch opposite (an ECMP set of two),
one way to the others.

>>> spec = Ring.build(Ring.Params(switches=4, hosts_per_switch=2), "tbdemo")
>>> spec.counts(), spec.builder
({'switches': 4, 'hosts': 8, 'links': 12}, 'explicit')
>>> sorted({sw.role for sw in spec.switches}), spec.roles()
(['switch'], ['switch_peer', 'switch_downlink'])
"""

from __future__ import annotations

from pydantic import Field

from topologies import explicit
from topologies.build import Builder
from topologies.params import Section, parse
from topologies.spec import FabricSpec


class RingParams(Section):
    """The ``topology:`` keys of a ring."""

    switches: int = Field(6, ge=3, le=32, description="switches in the ring")
    hosts_per_switch: int = Field(2, ge=1, le=8, description="hosts on each switch")
    link_mbps: float = Field(20.0, ge=1, le=10000, description="every link's rate, Mb/s")
    mtu: int = Field(9000, ge=1280, le=9000, description="every interface's MTU")
    queue_kb: int = Field(64, ge=1, le=100_000, description="each port's queue, KB")


class Ring(Builder):
    """``switches`` switches in a ring, ``hosts_per_switch`` hosts on each."""

    NAME = "ring"
    Params = RingParams

    @classmethod
    def build(cls, params: RingParams, prefix: str) -> FabricSpec:
        n = params.switches
        nodes: dict[str, dict] = {f"r{i}": {"kind": "switch"} for i in range(n)}
        links = [{"endpoints": [f"r{i}", f"r{(i + 1) % n}"]} for i in range(n)]
        for i in range(n):
            for j in range(params.hosts_per_switch):
                host = f"h{i * params.hosts_per_switch + j}"
                nodes[host] = {"kind": "host"}
                links.append({"endpoints": [host, f"r{i}"]})
        section = {"nodes": nodes, "links": links, "link_mbps": params.link_mbps,
                   "mtu": params.mtu, "queue_kb": params.queue_kb}
        return explicit.build(parse(explicit.Params, section), prefix)
