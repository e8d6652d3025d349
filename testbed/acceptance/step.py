"""The ``acceptance:`` step of a fabric scenario: faults planted in the new fabric, the
checks, the exclusions, before any workload starts.

::

    acceptance:
      enabled: true          # run the checks (false: plant only, the fabric unaccepted)
      checks: [cabling, links, paths, system]
      exclude: true          # excluded links leave the ECMP sets, nodes their workloads
      spares: [6, 7]         # nodes that take over an excluded node's roles, in order
      plant:                 # faults made before the checks (targets: random or named)
        - {action: rate, rate_fraction: 0.25}
        - {action: degrade, loss: 0.02}
        - {action: swap_rails}
        - {action: throttle, rate_fraction: 0.25}

A ``random`` target is drawn with the run's seed, from the fabric's own candidates (a
throttle from the rail-0 NICs, which the lab's chains and training use), so the variants
of one run plant the same faults and another seed places them elsewhere; targets are
distinct (no two plants on one link or one node) and never a spare.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path

from testbed.acceptance.exclude import remap, reroute
from testbed.errors import ConfigError
from testbed.faults.fabric import FabricFaults, parse_faults
from topologies.spec import FabricSpec, find_link, link_name, short


def _kind_of(action: str) -> str:
    return "rail" if action in ("swap_rails", "throttle") else "link"


def place(spec: FabricSpec, plants: list[dict], spares: list[int], seed: int,
          where: str = "acceptance.plant") -> list[dict]:
    """Each plant with its target named and its parameters in the fault kind's terms
    (``rate_fraction`` -> ``rate_mbps``), random targets drawn with ``seed``; checked
    against ``spec`` (:class:`ConfigError` naming the entry)."""
    rng = random.Random(f"plant-{seed}")
    spare_nodes = {short(spec, spec.hosts[i].name) for i in spares if i < len(spec.hosts)}
    used_nodes: set[str] = set()
    used_links: set[str] = set()
    named = [p for p in plants if p.get("target", "random") != "random"]
    for p in named:  # named targets are taken first, random ones avoid them
        lk = find_link(spec, str(p["target"]))
        if lk is not None:
            used_links.add(link_name(spec, lk))
            if lk.kind == "host":
                used_nodes.add(short(spec, lk.a))
    out = []
    for i, p in enumerate(plants):
        at = f"{where}[{i}]"
        action, target = p["action"], str(p.get("target", "random"))
        if target == "random":
            target = _draw(spec, action, rng, used_nodes | spare_nodes, used_links, at)
        fault = {"at_s": 0, "action": action, "target": target}
        lk = find_link(spec, target)
        if action in ("rate", "throttle"):
            frac = p.get("rate_fraction") or 0.25
            fault["rate_mbps"] = round((lk.mbps if lk else spec.link_mbps) * frac, 3)
        if action == "degrade":
            fault["loss"] = p.get("loss") or 0.02
        if action == "throttle":  # full rate for half a second's worth, by default: the
            # link check's window passes, the system test's sustained load does not
            fault["burst_kb"] = p.get("burst_kb") or round(
                (lk.mbps if lk else spec.link_mbps) * 1e6 / 8 / 1000 / 2, 1)
        try:  # the target and parameters checked as a scheduled fault's
            parsed, = parse_faults([fault], spec, at)
        except ConfigError as exc:
            raise ConfigError(exc.field.replace(f"{at}[0]", at), exc.reason) from None
        fault["target"] = parsed.target
        if lk is not None:
            used_links.add(link_name(spec, lk))
            if lk.kind == "host":
                used_nodes.add(short(spec, lk.a))
        out.append(fault)
    return out


def _draw(spec: FabricSpec, action: str, rng: random.Random, nodes: set[str],
          links: set[str], at: str) -> str:
    """A random target for ``action`` touching none of ``nodes`` and ``links``."""
    if _kind_of(action) == "rail":
        # a swap takes a NIC and the next rail's; a throttle the rail-0 NIC, the one the
        # lab's chains and training use, so that the side by side shows what it costs
        top = spec.rails - 1 if action == "swap_rails" else 1
        nics = [i for h in spec.hosts for i in h.interfaces
                if short(spec, h.name) not in nodes and i.rail < top
                and not any(link_name(spec, lk) in links for lk in spec.links
                            if lk.kind == "host" and lk.a == h.name)]
        if not nics:
            raise ConfigError(f"{at}.target", f"no NIC left to draw for {action}"
                              + (" (swap_rails needs two rails or more)"
                                 if action == "swap_rails" else ""))
        return short(spec, rng.choice(nics).name)
    cands = [lk for lk in spec.links if link_name(spec, lk) not in links
             and not (lk.kind == "host" and short(spec, lk.a) in nodes)]
    if not cands:
        raise ConfigError(f"{at}.target", f"no link left to draw for {action}")
    return link_name(spec, rng.choice(cands))


def nodes_touched(spec: FabricSpec, faults: list[dict]) -> list[str]:
    """The nodes the planted faults are on (a host cable or a NIC)."""
    out = []
    for f in faults:
        lk = find_link(spec, f["target"])
        if lk is not None and lk.kind == "host" and short(spec, lk.a) not in out:
            out.append(short(spec, lk.a))
    return out


def run_step(live, cfg: dict, *, seed: int, out: Path, stack: ExitStack, name: str,
             agents: dict, training: dict, progress: Callable[[str], None]
             ) -> tuple[dict, dict, dict]:
    """Plant, check, exclude; the variant's acceptance record and its agents and training
    sections as the workloads then run them."""
    from testbed.acceptance.run import Lab, accept

    spec = live.spec
    record: dict = {"enabled": cfg["enabled"]}
    planted = place(spec, cfg["plant"], cfg["spares"], seed)
    if planted:
        faults = FabricFaults(live, stack)
        actions = faults.actions()
        for f in planted:
            params = {k: v for k, v in f.items() if k not in ("at_s", "action", "target")}
            actions[f["action"]](f["target"], **params)
        record["planted"] = planted
        progress(f"{name}: planted " + "; ".join(
            f"{f['action']} {f['target']}" for f in planted))
    if not cfg["enabled"]:
        return record, agents, training
    t0 = time.monotonic()
    result, lines = accept(Lab.of(live, out, name), cfg["checks"],
                           (lambda links: reroute(live, stack, out, links)) if cfg["exclude"]
                           else None)
    record |= {"seconds": round(time.monotonic() - t0, 2), "accepted": result["accepted"],
               "excluded_links": result["excluded_links"],
               "excluded_switches": result["excluded_switches"],
               "excluded_nodes": result["excluded_nodes"], "system": result["system"],
               "unexplained": result["unexplained"], "verdicts": result["verdicts"]}
    if planted:
        record["score"] = score(spec, planted, record)
    for line in lines:
        progress(f"{name}:   {line}")
    if cfg["exclude"]:
        record["rerouted"] = result["rerouted"]
        index = {short(spec, h.name): i for i, h in enumerate(spec.hosts)}
        agents, training, moves = remap(agents, training,
                                        [index[n] for n in result["excluded_nodes"]],
                                        cfg["spares"])
        record["moved"] = moves
        if moves:
            progress(f"{name}: workloads moved off excluded nodes: " + ", ".join(
                f"{a} -> {b or 'dropped'}" for a, b in moves.items()))
    return record, agents, training


def expected(spec: FabricSpec, planted: list[dict]) -> tuple[set[str], set[str]]:
    """The links and nodes acceptance must exclude for the planted faults: a rate, loss
    or dead cable its link (and a host cable's node); a swap both NICs' cables and the
    node; a throttled NIC its node (its cable passes a short test)."""
    links, nodes = set(), set()
    for f in planted:
        lk = find_link(spec, f["target"])
        if lk is None:
            continue
        node = short(spec, lk.a) if lk.kind == "host" else None
        if f["action"] == "throttle":
            nodes.add(node)
            continue
        links.add(link_name(spec, lk))
        if f["action"] == "swap_rails":
            host = spec.host(lk.a)
            nic = host.interface_by_name(lk.a_intf)
            other = host.interface(nic.plane, nic.rail + 1)
            links.add(link_name(spec, find_link(spec, short(spec, other.name))))
        if node:
            nodes.add(node)
    return links, {n for n in nodes if n}


def score(spec: FabricSpec, planted: list[dict], record: dict) -> dict:
    """What acceptance found of the planted faults: the expected exclusions it made
    (``found``), those it missed, and what it excluded beyond them (``extra``: a
    healthy link, switch or node)."""
    links, nodes = expected(spec, planted)
    got_links = set(record.get("excluded_links", []))
    got_nodes = set(record.get("excluded_nodes", []))
    return {"found": sorted((links & got_links) | (nodes & got_nodes)),
            "missed": sorted((links - got_links) | (nodes - got_nodes)),
            "extra": sorted((got_links - links) | (got_nodes - nodes)
                            | set(record.get("excluded_switches", [])))}
