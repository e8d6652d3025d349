"""Exclusion: what acceptance excluded leaves the fabric's routing and its workloads.

* Links between switches leave every ECMP set: the controller starts again on the
  accepted fabric, the spec without those links (``spec-accepted.json``, its config
  pointed there), and its start-up rewrites every switch's routes in place (flow adds of
  the same match: nothing is deleted, traffic on the links kept never stops).
* Nodes with an excluded cable (or excluded by the system test) get no workload: their
  agent services, chain driver or training rank move to the scenario's spare nodes, in
  order; a training rank with no spare left is dropped (the ring closes over the rest),
  a chain's service or driver with none left ends the run with one line.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import time
from collections.abc import Iterable, Sequence
from contextlib import ExitStack
from pathlib import Path

from testbed.core import layout
from testbed.errors import BringUpError, HostError
from testbed.faults.fabric import FabricFaults
from testbed.host.files import read_jsonl, write_json
from testbed.host.procs import Helper, wait_for
from testbed.workloads.generators import roles_by_node
from topologies.spec import FabricSpec, link_name, short

ACCEPTED_SPEC = "spec-accepted.json"
RESYNC_S = 30.0


def accepted_spec(spec: FabricSpec, excluded: Iterable[str]) -> FabricSpec:
    """``spec`` without the excluded links between switches (host cables stay: a node is
    excluded as a whole, by its workloads).

    >>> from topologies.leafspine import build_fabric
    >>> spec = build_fabric(prefix="tbdoc0", nodes=4, leaves_per_plane=2, spines_per_plane=2)
    >>> len(accepted_spec(spec, ["p0l0-p0s1", "n0-p0l0"]).links), len(spec.links)
    (7, 8)
    """
    names = set(excluded)
    return dataclasses.replace(spec, links=tuple(
        lk for lk in spec.links if lk.kind != "fabric" or link_name(spec, lk) not in names))


def excluded_nodes(spec: FabricSpec, excluded_links: Iterable[str],
                   more: Iterable[str] = ()) -> list[str]:
    """Short names of the nodes with an excluded cable, and ``more``, in node order."""
    bad = set(excluded_links)
    names = set(more)
    for lk in spec.links:
        if lk.kind == "host" and link_name(spec, lk) in bad:
            names.add(short(spec, lk.a))
    return [short(spec, h.name) for h in spec.hosts if short(spec, h.name) in names]


def reroute(live, stack: ExitStack, out: Path, excluded: Sequence[str]) -> dict:
    """The controller again, on the accepted fabric; returns what was done and how long
    the switches took to have their routes again. Nothing to do without an excluded
    link between switches."""
    spec = live.spec
    accepted = accepted_spec(spec, excluded)
    gone = [link_name(spec, lk) for lk in spec.links if lk not in accepted.links]
    if not gone:
        return {"links_removed": [], "restart_s": 0.0}
    return {"links_removed": gone, **restart_on(live, stack, out, accepted, ACCEPTED_SPEC,
                                                "excluding links")}


def restart_on(live, stack: ExitStack, out: Path, spec: FabricSpec, file: str,
               why: str) -> dict:
    """The lab's controller started again on ``spec`` (written to ``out/file``, its
    config pointed there): its start-up rewrites every switch's routes in place (flow
    adds of the same match: traffic on what is kept never stops) and routes switches
    it did not know. Returns how long until every switch of ``spec`` had its routes,
    and the new pid."""
    old: Helper | None = live.controller
    if old is None:
        raise HostError(f"{why} needs the lab's own controller, not a remote one")
    spec.to_json(out / file)
    config = out / layout.CONTROLLER_CONFIG
    data = json.loads(config.read_text())
    data["spec"] = str(out / file)
    write_json(config, data)
    t0 = time.time()
    old.stop(2.0)
    pid = FabricFaults(live, stack).restart_controller()  # same argv: the config rewritten
    dpids = {sw.dpid for sw in spec.switches}

    def resynced() -> bool:
        return dpids <= {e["dpid"] for e in read_jsonl(live.status)
                         if e.get("event") == "installed" and e.get("t", 0) >= t0}
    if not wait_for(resynced, RESYNC_S, interval=0.1):
        raise BringUpError(f"the controller did not install every switch's routes within "
                           f"{RESYNC_S:g} s of its restart (see {out / layout.CONTROLLER_LOG})")
    return {"restart_s": round(time.time() - t0, 2), "controller_pid": pid}


def remap(agents: dict, training: dict, excluded: Sequence[int], spares: Sequence[int]
          ) -> tuple[dict, dict, dict]:
    """The agents and training sections with no role on an ``excluded`` node (indices):
    each excluded node's roles go to the next spare not excluded and not in use.
    Returns the new sections and the moves ``{"n3": "n6", ...}`` (``None``: dropped).

    >>> a = {"enabled": True, "driver": 2, "services": {"retriever": 3, "tool": 1}}
    >>> t = {"enabled": True, "ranks": [0, 3, 1, 4]}
    >>> a2, t2, moves = remap(a, t, [3, 4], [6])
    >>> a2["services"]["retriever"], t2["ranks"], moves
    (6, [0, 6, 1], {'n3': 'n6', 'n4': None})
    """
    bad = set(excluded)
    agents, training = copy.deepcopy(agents), copy.deepcopy(training)
    busy = roles_by_node(agents, training)
    free = [s for s in spares if s not in bad and s not in busy]
    moves: dict[str, int | None] = {}

    def to(node: int) -> int | None:
        key = f"n{node}"
        if key not in moves:
            moves[key] = free.pop(0) if free else None
        return moves[key]

    if agents.get("enabled"):
        for role, node in [("driver", agents["driver"]), *agents["services"].items()]:
            if node in bad:
                new = to(node)
                if new is None:
                    raise BringUpError(f"acceptance excluded n{node}, which runs the "
                                       f"{role}, and no spare is left (acceptance.spares)")
                if role == "driver":
                    agents["driver"] = new
                else:
                    agents["services"][role] = new
    if training.get("enabled"):
        ranks = []
        for node in training["ranks"]:
            new = to(node) if node in bad else node
            if new is not None:
                ranks.append(new)
        if len(ranks) < 2:
            raise BringUpError(f"acceptance left {len(ranks)} training rank(s) of "
                               f"{len(training['ranks'])}: a collective needs two; name "
                               f"spares (acceptance.spares)")
        training["ranks"] = ranks
    return agents, training, {k: (f"n{v}" if v is not None else None)
                              for k, v in moves.items()}
