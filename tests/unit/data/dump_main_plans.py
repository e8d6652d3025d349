"""Record the pre-graph leaf-spine specs and plans, to check the graph planner against.

Run against a checkout of the code before topologies became graphs (commit 34dff65):
``PYTHONPATH=OLD_CHECKOUT python tests/unit/data/dump_main_plans.py | gzip -9 >
tests/unit/data/leafspine_main.json.gz``. The imports are inside :func:`main` because
those APIs (``path_downlinks``, ``Link.kind == "uplink"``) no longer exist here.
"""

import json
import sys
from dataclasses import asdict

SETS = {
    "default": dict(
        planes=2, rails=1, nodes=8, leaves_per_plane=2, spines_per_plane=2, link_mbps=100
    ),
    "ecmp-vs-adaptive": dict(
        planes=1, rails=1, nodes=16, leaves_per_plane=4, spines_per_plane=4, link_mbps=20
    ),
    "reference": dict(
        planes=1, rails=1, nodes=16, leaves_per_plane=1, spines_per_plane=4, link_mbps=20
    ),
    "rails": dict(
        planes=2,
        rails=2,
        nodes=8,
        leaves_per_plane=4,
        spines_per_plane=2,
        oversubscription=4,
        link_mbps=50,
    ),
    "three-spines": dict(
        planes=1, rails=1, nodes=6, leaves_per_plane=3, spines_per_plane=3, link_mbps=30
    ),
}


def main() -> None:
    from controllers import ecn, spray
    from controllers.adaptive import path_downlinks
    from controllers.failover import plan_failover
    from controllers.paths import plan_switch
    from controllers.telemetry import port_table
    from topologies.leafspine import build_fabric

    out = {}
    for name, params in SETS.items():
        spec = build_fabric(prefix="tb0abc", **params)
        uplinks = [(lk.a, lk.b) for lk in spec.links if lk.kind == "uplink"]
        downs = [[], [uplinks[0]], [uplinks[-1]], [uplinks[0], uplinks[len(uplinks) // 2]]]
        plans = {}
        for sw in spec.switches:
            entry = {}
            p = plan_switch(spec, sw.dpid)
            entry["plain"] = {
                "groups": {str(k): v for k, v in p.groups.items()},
                "routes": [[r.ip, r.port, r.group] for r in p.routes],
            }
            for ff in (False, True):
                for i, down in enumerate(downs):
                    f = plan_failover(
                        spec, sw.dpid, down=[tuple(d) for d in down], fast_failover=ff
                    )
                    entry[f"ff={ff},down={i}"] = {
                        "groups": {str(k): v for k, v in f.groups.items()},
                        "routes": [[r.ip, r.port, r.group] for r in f.routes],
                        "ff_groups": {str(k): v for k, v in f.ff_groups.items()},
                        "ff_routes": f.ff_routes,
                        "bounces": [[b.in_port, b.ip, b.group, b.arp] for b in f.bounces],
                        "arp_guards": f.arp_guards,
                    }
            if sw.role == "leaf" and 1 in p.groups:
                up = p.groups[1]
                entry["spray"] = [
                    [r.ip, r.value, r.mask, r.port, r.ip_ecn] for r in spray.spray_rules(p, up)
                ]
                entry["spray_ect"] = [
                    [r.ip, r.value, r.mask, r.port, r.ip_ecn]
                    for r in spray.spray_rules(p, up, ect=True)
                ]
                entry["ect_rules"] = ecn.ect_rules(p)
            entry["mark_rules"] = {
                str(port): ecn.mark_rules(p, port, "agents") for port in range(1, 12)
            }
            plans[sw.name] = entry
        out[name] = {
            "params": params,
            "downs": downs,
            "spec": asdict(spec),
            "plans": plans,
            "port_table": [
                [d, pt, asdict(info)] for (d, pt), info in sorted(port_table(spec).items())
            ],
            "path_downlinks": sorted(
                [[k[0], k[1], k[2], v[0], v[1]] for k, v in path_downlinks(spec).items()]
            ),
        }
    json.dump(out, sys.stdout, indent=None, separators=(",", ":"))


if __name__ == "__main__":
    main()
