"""``testbed accept LAB``: the acceptance checks on a running fabric lab, their verdicts
printed and written to the lab's results (``acceptance.json``)."""

from __future__ import annotations

import json
import time
from pathlib import Path

from testbed.acceptance import cabling
from testbed.acceptance.lldp import End, exchange
from topologies.spec import FabricSpec

RESULT = "acceptance.json"


def ends(spec: FabricSpec, host_pid: dict[str, int]) -> list[End]:
    """Both ends of every link: a host's NIC in the host's namespace, a switch port in
    the root namespace (its MAC read there)."""
    out = []
    for lk in spec.links:
        if lk.kind == "host":
            nic = spec.host(lk.a).interface_by_name(lk.a_intf)
            out.append(End(lk.a, lk.a_intf, nic.mac, f"/proc/{host_pid[lk.a]}/ns/net"))
        else:
            out.append(End(lk.a, lk.a_intf, _mac(lk.a_intf)))
        out.append(End(lk.b, lk.b_intf, _mac(lk.b_intf)))
    return out


def _mac(ifname: str) -> str:
    try:
        return Path(f"/sys/class/net/{ifname}/address").read_text().strip()
    except OSError:
        return "02:00:00:00:00:00"


def cabling_check(spec: FabricSpec, host_pid: dict[str, int], system: str) -> dict:
    """The cabling check's record: every cable's verdict, the swaps, the time it took."""
    t0 = time.monotonic()
    heard = exchange(ends(spec, host_pid), system)
    by_ifname = {end.ifname: [h.port for h in got] for end, got in heard.items()}
    cables = cabling.judge(spec, by_ifname)
    return {"check": "cabling", "seconds": round(time.monotonic() - t0, 2),
            "cables": [{"link": c.link, "group": c.group, "a": c.a, "b": c.b,
                        "a_heard": list(c.a_heard), "b_heard": list(c.b_heard),
                        "verdict": "accepted" if c.accepted else "excluded",
                        "reason": c.reason()} for c in cables],
            "swapped": [list(pair) for pair in cabling.swaps(cables)]}


def lines(record: dict) -> list[str]:
    """The check's table: excluded cables by group, then the count."""
    cables = record["cables"]
    bad = [c for c in cables if c["verdict"] == "excluded"]
    out = [f"cabling (LLDP from every host NIC and switch port, {record['seconds']:g} s): "
           f"{len(cables) - len(bad)} of {len(cables)} cables as the spec says"]
    for c in bad:
        out.append(f"  excluded {c['link']:<12} {c['group']:<16} {c['reason']}")
    for a, b in record["swapped"]:
        out.append(f"  swapped: {a} and {b} (each end hears the other's peer)")
    return out


def accept(record: dict, spec: FabricSpec) -> tuple[dict, list[str]]:
    """Run the checks on the lab of ``record``; write the result into its results folder."""
    pids = {h["name"]: h["pid"] for h in record["hosts"].values()}
    check = cabling_check(spec, pids, f"testbed lab {record['name']}")
    result = {"lab": record["name"], "t": time.time(), "checks": [check],
              "accepted": all(c["verdict"] == "accepted" for c in check["cables"])}
    (Path(record["out"]) / RESULT).write_text(json.dumps(result, indent=1))
    return result, lines(check)



