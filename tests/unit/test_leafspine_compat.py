"""The leaf-spine as a graph builds and plans what the two-tier code did.

``data/leafspine_main.json.gz`` holds the specs and plans of the code before topologies
became graphs (see ``data/dump_main_plans.py``), for five parameter sets: the default
scenario's, ecmp-vs-adaptive's and its one-switch reference, two rails at 4:1, and three
spines. Names, ports, addresses, MACs, dpids and link rates must be the same; so must
every route, ECMP set, fast-failover group and bounce rule, up to the ids of the sets
and groups (compared by their members).
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
