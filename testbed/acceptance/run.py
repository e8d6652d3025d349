"""``testbed accept LAB``: the acceptance checks on a running fabric lab, their verdicts
printed and written to the lab's results (``acceptance.json``).

The checks run in order, each on what the ones before accepted: cabling (LLDP), then
every link's rate and loss (a cable excluded by the cabling check is not measured: its
frames would go to the wrong port)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from testbed.acceptance import cabling, links
from testbed.acceptance.lldp import End, exchange
from testbed.faults.fabric import link_name, short
from topologies.spec import FabricSpec, Link

RESULT = "acceptance.json"


def link_ends(spec: FabricSpec, lk: Link, host_pid: dict[str, int]) -> tuple[End, End]:
    """Both ends of a link: a host's NIC in the host's namespace, a switch port in the
    root namespace (its MAC read there)."""
    if lk.kind == "host":
        nic = spec.host(lk.a).interface_by_name(lk.a_intf)
        a = End(lk.a, lk.a_intf, nic.mac, f"/proc/{host_pid[lk.a]}/ns/net")
    else:
        a = End(lk.a, lk.a_intf, _mac(lk.a_intf))
    return a, End(lk.b, lk.b_intf, _mac(lk.b_intf))


def ends(spec: FabricSpec, host_pid: dict[str, int]) -> list[End]:
    """Both ends of every link."""
    return [end for lk in spec.links for end in link_ends(spec, lk, host_pid)]


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


def link_check(spec: FabricSpec, host_pid: dict[str, int], skip: set[str]) -> dict:
    """The link check's record: every link not in ``skip``, both ways at its rate."""
    t0 = time.monotonic()
    cables = []
    for lk in spec.links:
        name = link_name(spec, lk)
        if name in skip:
            continue
        a, b = link_ends(spec, lk, host_pid)
        cables.append(links.Cable(name, a, b, short(spec, lk.a_intf), short(spec, lk.b_intf),
                                  lk.mbps))
    check_id = (os.getpid() << 8 | int(t0 * 10)) & 0xFFFFFFFF
    return {"check": "links", "seconds": 0.0, "window_s": links.WINDOW_S,
            "rule": f"each direction at {links.RATE_MIN:g} of the link's rate or more, "
                    f"at most {links.LOSS_MAX * 100:g} % lost",
            "links": links.run(cables, check_id, spec.mtu, spec.queue_kb * 1000),
            "not_measured": sorted(skip)} | {"seconds": round(time.monotonic() - t0, 2)}


def cabling_lines(record: dict) -> list[str]:
    """The cabling check's table: excluded cables by group, then the count."""
    cables = record["cables"]
    bad = [c for c in cables if c["verdict"] == "excluded"]
    out = [f"cabling (LLDP from every host NIC and switch port, {record['seconds']:g} s): "
           f"{len(cables) - len(bad)} of {len(cables)} cables as the spec says"]
    for c in bad:
        out.append(f"  excluded {c['link']:<12} {c['group']:<16} {c['reason']}")
    for a, b in record["swapped"]:
        out.append(f"  swapped: {a} and {b} (each end hears the other's peer)")
    return out


def link_lines(record: dict) -> list[str]:
    """The link check's table: the excluded links with why, then the count."""
    measured = record["links"]
    bad = [lk for lk in measured if lk["verdict"] == "excluded"]
    out = [f"links (both ways at the configured rate, {record['window_s']:g} s each, "
           f"{record['seconds']:g} s): {len(measured) - len(bad)} of {len(measured)} pass "
           f"({record['rule']})"]
    for lk in bad:
        out.append(f"  excluded {lk['link']:<12} {lk['reason']}")
    return out


def accept(record: dict, spec: FabricSpec) -> tuple[dict, list[str]]:
    """Run the checks on the lab of ``record``; write the result into its results folder."""
    pids = {h["name"]: h["pid"] for h in record["hosts"].values()}
    cab = cabling_check(spec, pids, f"testbed lab {record['name']}")
    miswired = {c["link"] for c in cab["cables"] if c["verdict"] == "excluded"}
    rates = link_check(spec, pids, miswired)
    excluded = sorted(miswired | {lk["link"] for lk in rates["links"]
                                  if lk["verdict"] == "excluded"})
    result = {"lab": record["name"], "t": time.time(), "checks": [cab, rates],
              "excluded_links": excluded, "accepted": not excluded}
    (Path(record["out"]) / RESULT).write_text(json.dumps(result, indent=1))
    return result, cabling_lines(cab) + link_lines(rates)
