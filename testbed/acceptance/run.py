"""``testbed accept LAB``: the acceptance checks on a running fabric lab, their verdicts
printed and written to the lab's results (``acceptance.json``).

The checks run in order, each on what the ones before accepted: cabling (LLDP), then
every link's rate and loss (a cable excluded by the cabling check is not measured: its
frames would go to the wrong port), then every equal-cost path between leaves over the
links left, then a collective over the nodes left (a node with an excluded cable is
excluded as a whole). The verdicts: every link, switch and node, accepted or excluded
with the reason."""

from __future__ import annotations

import dataclasses
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from testbed.acceptance import cabling, links, paths, system
from testbed.acceptance.exclude import excluded_nodes
from testbed.acceptance.lldp import End, exchange
from testbed.host.hosts import Host
from topologies.spec import FabricSpec, Link, link_name, short

RESULT = "acceptance.json"
#: a rack's acceptance, when it was cabled into a running fabric (``testbed expand``)
RACK_RESULT = "acceptance-rack.json"
#: the checks, in the order they run (each on what the ones before accepted)
CHECKS = ("cabling", "links", "paths", "system")


@dataclass(frozen=True)
class Rack:
    """What a rack cabled into a running fabric added (full names): the checks run on
    it alone."""

    switches: set[str]
    hosts: set[str]
    links: set[str]  # link names (:func:`link_name`)

    def view(self, spec: FabricSpec) -> FabricSpec:
        """``spec`` with the rack's links, switches and hosts only (the cabling and link
        checks and the verdicts walk a spec's links; lookups of a host still work)."""
        return dataclasses.replace(
            spec, links=tuple(lk for lk in spec.links if link_name(spec, lk) in self.links),
            switches=tuple(sw for sw in spec.switches if sw.name in self.switches),
            hosts=tuple(h for h in spec.hosts if h.name in self.hosts))


@dataclass(frozen=True)
class Lab:
    """What the checks need of a running fabric: its spec, each host's namespace (by a
    process in it), ovs-ofctl's target for each switch, where results go."""

    spec: FabricSpec
    host_pid: dict[str, int]  # full host name -> pid
    ofctl: Callable[[str], str]
    out: Path
    name: str
    host: Callable[[str], Host]  # full host name -> what runs commands in it
    pid_dir: Path

    @classmethod
    def of(cls, live, out: Path, name: str) -> Lab:
        """From a :class:`~testbed.fabric.bringup.LiveFabric`."""
        spec = live.spec
        return cls(spec, {h.name: live.fabric.host_pid(h.name) for h in spec.hosts},
                   live.fabric.ofctl_target, out, name, live.fabric.host, live.pid_dir)


def _check_id() -> int:
    return (os.getpid() << 12 ^ int(time.monotonic() * 1000)) & 0xFFFFFFFF


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


def _cables(spec: FabricSpec, host_pid: dict[str, int], chosen: list[Link]) -> list:
    out = []
    for lk in chosen:
        a, b = link_ends(spec, lk, host_pid)
        out.append(links.Cable(link_name(spec, lk), a, b, short(spec, lk.a_intf),
                               short(spec, lk.b_intf), lk.mbps))
    return out


def link_check(spec: FabricSpec, host_pid: dict[str, int], skip: set[str]) -> dict:
    """The link check's record: every link not in ``skip``, both ways at its rate."""
    t0 = time.monotonic()
    cables = _cables(spec, host_pid, [lk for lk in spec.links
                                      if link_name(spec, lk) not in skip])
    return {"check": "links", "seconds": 0.0, "window_s": links.WINDOW_S,
            "rule": f"each direction at {links.RATE_MIN:g} of the link's rate or more, "
                    f"at most {links.LOSS_MAX * 100:g} % lost",
            "links": links.run(cables, _check_id(), spec.mtu, spec.queue_kb * 1000),
            "not_measured": sorted(skip)} | {"seconds": round(time.monotonic() - t0, 2)}


def path_check(lab: Lab, excluded: set[str], rack: Rack | None = None) -> dict:
    """The path check's record: every equal-cost path between leaves (``rack``: those
    from and to its leaves, its hosts known to the probes' sources as neighbours) over
    the links not ``excluded``, its probes' latency and loss; the links and switches
    failing paths point at."""
    spec = lab.spec
    t0 = time.monotonic()
    host_link = {lk.a_intf: link_name(spec, lk) for lk in spec.links if lk.kind == "host"}
    down = [(lk.a, lk.b) for lk in spec.links
            if lk.kind == "fabric" and link_name(spec, lk) in excluded]
    planned, skipped = paths.plan(spec, lambda i: host_link[i.name] not in excluded, down,
                                  rack.switches if rack else None)
    host_of = {i.name: h.name for h in spec.hosts for i in h.interfaces}
    netns_of = lambda i: f"/proc/{lab.host_pid[host_of[i.name]]}/ns/net"  # noqa: E731
    unpin = paths.pin(planned, lab.ofctl, deliver=rack is not None)
    forget = paths.neighbours(planned, netns_of) if rack else (lambda: None)
    try:
        paths.probe(planned, netns_of)
        failing = paths.judge(planned)
        retested = {i: failing[i] for i in failing}
        if failing:  # probed again, alone: a fault shows again, a busy moment does not
            again = [planned[i] for i in failing]
            for p in again:
                p.sent, p.delays, p.seqs = 0, [], set()
            paths.probe(again, netns_of)
            failing = paths.judge(planned)
    finally:
        forget()
        unpin()

    def light(chosen: list[Link]) -> dict[str, dict]:
        return links.light(_cables(spec, lab.host_pid, chosen), _check_id())

    bad_links, bad_switches, unexplained = paths.explain(spec, planned, failing, light)
    return {"check": "paths", "seconds": round(time.monotonic() - t0, 2),
            "rule": f"at most {paths.LOSS_MAX * 100:g} % of {paths.PROBES} probes lost; "
                    f"median one-way time within {paths.SLACK_MS:g} ms and "
                    f"{paths.FACTOR:g}x of its pair's paths' median",
            "paths": [{"from": short(spec, p.src_leaf), "to": short(spec, p.dst_leaf),
                       "hosts": [short(spec, p.src.name), short(spec, p.dst.name)],
                       "via": [short(spec, s) for s, _ in p.hops[1:]], "links": list(p.links),
                       "probes": p.sent, "lost": p.sent - len(p.seqs),
                       "median_ms": p.median_ms(), "base_ms": p.base_ms(),
                       "verdict": "fails" if p.index in failing else "passes",
                       "first_try": retested.get(p.index, ""),
                       "reason": failing.get(p.index, "")} for p in planned],
            "skipped": skipped,
            "links": [{"link": k, "verdict": "excluded", "reason": v}
                      for k, v in sorted(bad_links.items())],
            "switches": [{"switch": k, "verdict": "excluded", "reason": v}
                         for k, v in sorted(bad_switches.items())],
            "unexplained": [f"{short(spec, planned[i].src_leaf)}>{short(spec, planned[i].dst_leaf)}"
                            f" via {'/'.join(short(spec, s) for s, _ in planned[i].hops[1:])}"
                            for i in unexplained]}


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


def path_lines(record: dict) -> list[str]:
    """The path check's table: failing paths, what they point at, the count."""
    measured = record["paths"]
    bad = [p for p in measured if p["verdict"] == "fails"]
    out = [f"paths (every equal-cost path between leaves pinned, {record['seconds']:g} s): "
           f"{len(measured) - len(bad)} of {len(measured)} pass ({record['rule']})"]
    for p in bad:
        out.append(f"  fails    {p['from']}>{p['to']} via {'/'.join(p['via']) or '-'}: "
                   f"{p['reason']}")
    for item in record["links"]:
        out.append(f"  excluded {item['link']:<12} {item['reason']}")
    for item in record["switches"]:
        out.append(f"  excluded {item['switch']:<12} {item['reason']}")
    out += [f"  unexplained: {u} (its links pass alone; nothing excluded for it)"
            for u in record["unexplained"]]
    out += [f"  skipped  {s}" for s in record["skipped"]]
    return out


def system_lines(record: dict) -> list[str]:
    """The system test's lines: the collective(s), the outliers."""
    out = []
    for k, run in enumerate(record["runs"]):
        out.append(f"system{' again' if k else ''} (all-reduce over {len(run['nodes'])} "
                   f"nodes{', without the outliers' if k else ''}): {run['iteration_ms']} ms "
                   f"an iteration, the capacity bound {run['bound_ms']} ms "
                   f"({run['ratio']}x)" + ("" if run["complete"] else ", a rank unfinished"))
    for n in record["nodes"]:
        out.append(f"  excluded {n['node']:<12} {n['reason']}")
    out.append(f"  the system {record['verdict']}" + (f": {record['reason']}"
                                                      if record["reason"] else
                                                      f" ({record['rule']})"))
    return out


def verdicts(spec: FabricSpec, links_out: set[str], switches_out: dict[str, str],
             nodes_out: dict[str, str], reasons: dict[str, str]) -> dict:
    """Every link, switch and node: accepted or excluded, with the reason."""
    def one(name: str, why: str) -> dict:
        return {"name": name, "verdict": "excluded" if why else "accepted", "reason": why}
    return {"links": [one(n, reasons.get(n, "") if n in links_out else "")
                      for n in (link_name(spec, lk) for lk in spec.links)],
            "switches": [one(short(spec, sw.name), switches_out.get(short(spec, sw.name), ""))
                         for sw in spec.switches],
            "nodes": [one(short(spec, h.name), nodes_out.get(short(spec, h.name), ""))
                      for h in spec.hosts]}


def accept(lab: Lab, checks: list[str] | None = None,
           exclude: Callable[[list[str]], dict] | None = None,
           rack: Rack | None = None) -> tuple[dict, list[str]]:
    """Run the checks (all, or those named) on ``lab``; write the result into its
    results folder. With ``exclude``, the links the checks before the system test
    excluded are handed to it first (it takes them out of the routing: the collective
    then runs on the fabric the workloads will have); without, the collective runs on
    the fabric as it is. With ``rack``, the checks and verdicts cover its links,
    switches and nodes only, and the paths from and to its leaves."""
    full, chosen = lab.spec, set(checks or CHECKS)
    spec = rack.view(full) if rack else full
    records, lines = [], []
    why: dict[str, str] = {}
    switches: dict[str, str] = {}
    unexplained: list[str] = []
    system_ok = True
    if "cabling" in chosen:
        cab = cabling_check(spec, lab.host_pid, f"testbed lab {lab.name}")
        why |= {c["link"]: f"cabling: {c['reason']}" for c in cab["cables"]
                if c["verdict"] == "excluded"}
        records.append(cab)
        lines += cabling_lines(cab)
    if "links" in chosen:
        rates = link_check(spec, lab.host_pid, set(why))
        why |= {lk["link"]: f"links: {lk['reason']}" for lk in rates["links"]
                if lk["verdict"] == "excluded"}
        records.append(rates)
        lines += link_lines(rates)
    if "paths" in chosen:
        routes = path_check(lab, set(why), rack)
        why |= {lk["link"]: f"paths: {lk['reason']}" for lk in routes["links"]}
        switches = {s["switch"]: f"paths: {s['reason']}" for s in routes["switches"]}
        unexplained = routes["unexplained"]
        records.append(routes)
        lines += path_lines(routes)
    excluded = set(why)
    nodes = {n: "a cable excluded: " + ", ".join(
        k for k in sorted(excluded) if k.split("-")[0] == n)
        for n in excluded_nodes(spec, excluded)}
    rerouted = None
    if exclude is not None and (excluded or rack):  # a rack is routed here, once judged
        rerouted = exclude(sorted(excluded))
        if rerouted.get("links_removed"):
            lines.append(f"excluded from every ECMP set: {', '.join(rerouted['links_removed'])}"
                         f" (controller restarted on the accepted fabric, routes again on "
                         f"every switch in {rerouted['restart_s']:g} s)")
    left = [short(spec, h.name) for h in spec.hosts if short(spec, h.name) not in nodes]
    system_run = "system" in chosen and len(left) >= 2
    if "system" in chosen and not system_run:
        lines.append(f"system: not run ({len(left)} node left; a collective needs two)")
    if system_run:
        test = system.check(lab, left)
        nodes |= {n["node"]: f"system: {n['reason']}" for n in test["nodes"]}
        system_ok = test["verdict"] == "passes"
        records.append(test)
        lines += system_lines(test)
    result = {"lab": lab.name, "t": time.time(), "checks": records,
              "verdicts": verdicts(spec, excluded, switches, nodes, why),
              "excluded_links": sorted(excluded), "excluded_switches": sorted(switches),
              "excluded_nodes": [n for n in (short(spec, h.name) for h in spec.hosts)
                                 if n in nodes],
              "unexplained": unexplained,
              "system": ("passes" if system_ok else "fails") if system_run else "not run",
              "rerouted": rerouted,
              "accepted": not (excluded or switches or nodes or unexplained) and system_ok}
    save(lab.out, result, RACK_RESULT if rack else RESULT)
    return result, lines


def save(out: Path, result: dict, file: str = RESULT) -> None:
    (out / file).write_text(json.dumps(result, indent=1))
