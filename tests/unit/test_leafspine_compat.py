"""The leaf-spine as a graph builds and plans what the two-tier code did.

``data/leafspine_main.json.gz`` holds the specs and plans of the code before topologies
became graphs (see ``data/dump_main_plans.py``), for five parameter sets: the default
scenario's, ecmp-vs-adaptive's and its one-switch reference, two rails at 4:1, and three
spines. Names, ports, addresses, MACs, dpids and link rates must be the same; so must
every route, ECMP set, fast-failover group and bounce rule, up to the ids of the sets
and groups (compared by their members), with nothing down and with links down, with
and without fast failover; the one deliberate difference is in :func:`narrowed`.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from topologies.leafspine import build_fabric

DATA = Path(__file__).with_name("data") / "leafspine_main.json.gz"
MAIN = json.loads(gzip.decompress(DATA.read_bytes()))
RENAMED = {"leaf": "switch", "leaf_port": "switch_port"}
MOVED = ("leaves_per_plane", "spines_per_plane", "oversubscription", "uplink_mbps")


def spec_of(name: str):
    return build_fabric(prefix="tb0abc", **MAIN[name]["params"])


@pytest.mark.parametrize("name", sorted(MAIN))
def test_same_spec_as_before(name):
    old, new = MAIN[name]["spec"], json.loads(json.dumps(spec_of(name).to_dict()))
    for host in old["hosts"]:
        for intf in host["interfaces"]:
            for was, now in RENAMED.items():
                intf[now] = intf.pop(was)
    for lk in old["links"]:
        lk["kind"] = {"uplink": "fabric"}.get(lk["kind"], lk["kind"])
    for sw in new["switches"]:
        assert sw.pop("tier") == {"leaf": 0, "spine": 1}[sw["role"]]
    assert new.pop("builder") == "leaf-spine"
    assert new.pop("params") == {k: old.pop(k) for k in MOVED}
    assert new == old


def _members(groups: dict, port, group) -> list[int]:
    return [port] if group is None else list(groups[str(group)])


def normalized(plan: dict) -> dict:
    """A plan as what its rules do: routes, fast-failover routes and bounces by the ports
    they use, not by set or group ids."""
    groups = {str(k): v for k, v in plan["groups"].items()}
    out = {"routes": {ip: _members(groups, port, group) for ip, port, group in plan["routes"]}}
    if "ff_routes" in plan:
        ff = {str(k): [list(b) for b in v] for k, v in plan["ff_groups"].items()}
        out["ff_routes"] = sorted([q, ip, ff[str(g)]] for q, ip, g in plan["ff_routes"])
        out["bounces"] = sorted([q, ip, arp, groups[str(g)]]
                                for q, ip, g, arp in plan["bounces"])
        out["arp_guards"] = sorted(list(x) for x in plan["arp_guards"])
    return out


def narrowed(plan: dict) -> dict:
    """The one deliberate change: with fast failover *and* a recomputed route of its own
    for a destination (a far spine downlink is dead), a bounced packet is re-spread over
    the other members of that route's set, no longer over every other live uplink, so
    it is not sent to the spine that cannot deliver it. (With two spines, as in every
    shipped scenario, both are the same.)"""
    if "bounces" in plan:
        for bounce in plan["bounces"]:
            route = plan["routes"][bounce[1]]
            bounce[3] = [p for p in bounce[3] if p in route] or bounce[3]
        plan["bounces"].sort()
    return plan


def as_recorded(plan) -> dict:
    return {"groups": plan.groups, "routes": [[r.ip, r.port, r.group] for r in plan.routes],
            **({"ff_groups": plan.ff_groups, "ff_routes": plan.ff_routes,
                "bounces": [[b.in_port, b.ip, b.group, b.arp] for b in plan.bounces],
                "arp_guards": plan.arp_guards} if hasattr(plan, "ff_routes") else {})}


@pytest.mark.parametrize("name", sorted(MAIN))
def test_same_plans_as_before(name):
    from controllers.failover import plan_failover
    from controllers.paths import plan_switch

    spec, recorded = spec_of(name), MAIN[name]
    for sw in spec.switches:
        old = recorded["plans"][sw.name]
        assert normalized(as_recorded(plan_switch(spec, sw.dpid))) == normalized(old["plain"])
        for ff in (False, True):
            for i, down in enumerate(recorded["downs"]):
                new = plan_failover(spec, sw.dpid, down=[tuple(d) for d in down],
                                    fast_failover=ff)
                want = narrowed(normalized(old[f"ff={ff},down={i}"]))
                assert normalized(json.loads(json.dumps(as_recorded(new)))) == want, \
                    (sw.name, ff, down)


@pytest.mark.parametrize("name", sorted(MAIN))
def test_adaptive_paths_are_uplink_then_spine_downlink_as_before(name):
    """Adaptive placement's path (links and load) on a leaf-spine: the uplink and the
    spine's downlink towards the destination's leaf, the busier of the two."""
    from controllers.adaptive import PathTable
    from controllers.paths import plan_switch

    spec = spec_of(name)
    plans = {sw.dpid: plan_switch(spec, sw.dpid) for sw in spec.switches}
    table = PathTable(spec, plans)
    recorded = MAIN[name]["path_downlinks"]
    for n, (leaf, uplink, ip, spine, down) in enumerate(recorded):
        assert table.links(leaf, uplink, ip) == [(leaf, uplink), (spine, down)]
        util = {(leaf, uplink): (n % 7) / 7, (spine, down): (n % 5) / 5}
        assert table.load(util, leaf, uplink, ip) == max(util.values())
    # and every choice a leaf has is one of the recorded ones
    choices = {(d, p, ip) for d, plan in plans.items() for ip, ports in plan.multipath().items()
               for p in ports}
    assert choices == {(leaf, uplink, ip) for leaf, uplink, ip, _, _ in recorded}


@pytest.mark.parametrize("name", sorted(MAIN))
def test_spray_and_ecn_rules_as_before(name):
    from controllers import ecn, spray
    from controllers.paths import plan_switch

    spec = spec_of(name)
    for sw in spec.switches:
        old, plan = MAIN[name]["plans"][sw.name], plan_switch(spec, sw.dpid)
        if "spray" in old and plan.multipath():
            assert [[r.ip, r.value, r.mask, r.port, r.ip_ecn]
                    for r in spray.spray_rules(plan)] == old["spray"]
            assert [[r.ip, r.value, r.mask, r.port, r.ip_ecn]
                    for r in spray.spray_rules(plan, ect=True)] == old["spray_ect"]
            assert [m for m, _ in ecn.ect_rules(plan)] == old["ect_rules"]
        else:  # nothing to spray or mark by hash (a spine, or the one-switch reference)
            assert not spray.spray_rules(plan) and not ecn.ect_rules(plan)
            assert not old.get("spray") and not old.get("ect_rules")
        for port in range(1, 12):
            assert ecn.mark_rules(plan, port, "agents") == old["mark_rules"][str(port)]
