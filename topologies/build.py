"""One entry point from a scenario's ``topology`` section to a spec (leaf-spine for now)."""

from __future__ import annotations

from typing import Any

from topologies.leafspine import build_fabric
from topologies.spec import FabricSpec, TopologyError

#: the scenario format's defaults for a leaf-spine topology
LEAF_SPINE_DEFAULTS: dict[str, Any] = {
    "planes": 2, "rails": 1, "nodes": 8, "leaves_per_plane": 2, "spines_per_plane": 2,
    "oversubscription": 1, "link_mbps": 100, "mtu": 9000, "queue_kb": 64, "delay_ms": 0}
TOPOLOGY_SCHEMA: dict = {"type": "object"}


def build_topology(section: dict, prefix: str) -> FabricSpec:
    """The spec that ``section`` (a scenario's ``topology`` mapping) describes."""
    if not isinstance(section, dict):
        raise TopologyError("topology", "must be a mapping")
    for key in section:
        if key not in LEAF_SPINE_DEFAULTS:
            raise TopologyError(key, f"unknown field (known: {', '.join(LEAF_SPINE_DEFAULTS)})")
    link = section.get("link_mbps", 100)
    if isinstance(link, int | float) and not isinstance(link, bool) and not 1 <= link <= 10000:
        raise TopologyError("link_mbps", f"must be 1..10000, got {link!r}")
    return build_fabric(prefix=prefix, **{**LEAF_SPINE_DEFAULTS, **section})
