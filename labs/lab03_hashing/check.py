"""Lab 3 checks: static hashing against adaptive routing, spraying and a placement app
(``testbed check 3 RESULTS``), on a results folder of ``labs/lab03_hashing/*/scenario.yaml``.
"""

from __future__ import annotations

import json

from testbed.core import layout
from testbed.reports.grading import Results, Verdict, verdict
from testbed.reports.live_checks import NotApplicable, hosts_reach_across_leaves
from testbed.reports.predictions import Number

ECMP, ADAPTIVE, SPRAY, APP, REF = ("ecmp-stride", "adaptive-stride", "spray-stride",
                                   "placement-stride", "reference")
BEATS = 1.25  # the app's aggregate goodput at least this many times ECMP's
NEAR = 0.8    # ... and at least this share of the one-switch reference


def _goodput(r: Results, name: str) -> float:
    return r.value(name, "training.goodput_mbps")


def stride_on_leaf_spine(r: Results) -> Verdict:
    """Every variant ran the stride pattern; the fabric variants on 4 leaves x 4 spines."""
    wrong = [f"{n}: pattern {r.value(n, 'pattern')}" for n in (ECMP, ADAPTIVE, SPRAY, APP, REF)
             if r.value(n, "pattern") != "stride"]
    for name in (ECMP, APP):
        spec = r.spec(name)
        if (spec["leaves_per_plane"], spec["spines_per_plane"]) != (4, 4):
            wrong.append(f"{name}: {spec['leaves_per_plane']} leaves x "
                         f"{spec['spines_per_plane']} spines")
    return verdict(not wrong, "; ".join(wrong) or "stride everywhere, 4 x 4 leaf-spine")


def app_loaded(r: Results) -> Verdict:
    """The placement variant ran a controller app of its own (its controller.json)."""
    apps = json.loads(r.record(APP, layout.CONTROLLER_CONFIG).read_text()).get("apps") or []
    return verdict(bool(apps), f"apps: {', '.join(apps)}" if apps else
                   f"{APP} ran no app: add controller.apps to the variant")


def hashing_collides(r: Results) -> Verdict:
    """The lesson: ECMP reaches clearly less than the one-switch reference (< 0.8x)."""
    ecmp, ref = _goodput(r, ECMP), _goodput(r, REF)
    return verdict(ecmp < NEAR * ref, f"ECMP {ecmp:.1f} Mb/s against {ref:.1f} Mb/s on one "
                                      f"switch ({ecmp / ref:.2f}x)")


def placement_beats_ecmp(r: Results) -> Verdict:
    """Student task: the placement app moves >= 1.25x ECMP's aggregate goodput (adaptive's
    and spray's shown beside where the folder has them: a run of only ``--variant
    ecmp-stride --variant placement-stride`` is graded too)."""
    ecmp, app = _goodput(r, ECMP), _goodput(r, APP)
    others = ", ".join(f"{n} {_goodput(r, n):.1f}" for n in (ADAPTIVE, SPRAY)
                       if n in r.names())
    return verdict(app >= BEATS * ecmp,
                   f"placement {app:.1f} Mb/s against ECMP {ecmp:.1f} Mb/s "
                   f"({app / ecmp:.2f}x, needs {BEATS}x" + (f"; {others} Mb/s)" if others
                                                              else ")"))


def placement_near_reference(r: Results) -> Verdict:
    """Student task: ... and reaches >= 0.8x of what one big switch delivers."""
    app, ref = _goodput(r, APP), _goodput(r, REF)
    lost = r.value(APP, "training.packets_lost")
    return verdict(app >= NEAR * ref, f"placement {app:.1f} Mb/s against {ref:.1f} Mb/s on one "
                                      f"switch ({app / ref:.2f}x, needs {NEAR}x; {lost} "
                                      "packets lost)")


CHECKS = [stride_on_leaf_spine, app_loaded, hashing_collides, placement_beats_ecmp,
          placement_near_reference]


#: the guide's "Predict, then run" question 1 graded against the run (predictions.yaml):
#: ECMP's goodput as a share of the one-switch reference's, right within 25 %
PREDICTIONS = [Number("1", lambda r: _goodput(r, ECMP) / _goodput(r, REF), unit="x",
                      within=0.25)]


# -- live checks: ``testbed check 3 --lab NAME`` on a running lab (testbed up) ----------
#: the scenario the starter and the solution build (a lab of another is refused)
SCENARIO = "lab03-hashing"
#: cookies of the controller's own per-flow rules (adaptive placements, ECN marks): not
#: a placement app's
OWN_COOKIES = ("0xad", "0xec")


def leaves_use_every_spine(live) -> Verdict:
    """Every leaf's flows and groups send to all of its uplinks (one a spine): the hash,
    the adaptive app or a placement has every spine to choose from."""
    spec = live.spec
    leaves = [s for s in spec.switches if s.role == "leaf"]
    if not any(spec.uplink_ports(s.name) for s in leaves):
        raise NotApplicable(f"variant {live.variant_name} has no spines")
    short, bad = live.short, []
    for leaf in leaves:
        uplinks = set(spec.uplink_ports(leaf.name))
        used = live.ports_named(live.flows(short(leaf.name)) + live.groups(short(leaf.name)))
        if uplinks - used:
            bad.append(f"{short(leaf.name)} never sends to port(s) "
                       f"{', '.join(map(str, sorted(uplinks - used)))} of "
                       f"{', '.join(map(str, sorted(uplinks)))}")
    return verdict(not bad, "; ".join(bad) or f"each of {len(leaves)} leaves sends over all "
                                              f"its {len(spec.uplink_ports(leaves[0].name))} "
                                              "uplinks")


def _placed(live) -> dict[str, list[tuple[str, str, int]]]:
    """Per leaf, the flows a placement app pinned: (source, destination, port)."""
    out = {}
    for leaf in (s for s in live.spec.switches if s.role == "leaf"):
        rows = []
        for flow in live.flows(live.short(leaf.name)):
            fields = dict(f.strip().split("=", 1) for f in flow.replace(" actions=", ",actions=")
                          .split(",") if "=" in f)
            if "nw_src" in fields and "nw_dst" in fields and "output:" in flow and \
                    not fields.get("cookie", "0x0").startswith(OWN_COOKIES):
                rows.append((fields["nw_src"], fields["nw_dst"],
                             int(flow.split("output:")[1].split(",")[0])))
        out[live.short(leaf.name)] = rows
    return out


def _placement_variant(live) -> list[str]:
    apps = list(live.variant.controller.get("apps") or [])
    if not apps:
        raise NotApplicable(f"variant {live.variant_name} loads no controller app (bring "
                            f"up {APP} to grade the placement)")
    return apps


def placement_app_loaded(live) -> Verdict:
    """The placement variant's app runs: its pinned flows are on the leaves."""
    apps = _placement_variant(live)
    placed = _placed(live)
    count = sum(map(len, placed.values()))
    empty = [leaf for leaf, rows in placed.items() if not rows]
    return verdict(count and not empty,
                   f"{', '.join(apps)}: {count} pinned flows"
                   + (f"; none on {', '.join(empty)}" if empty else " on every leaf"))


def placement_avoids_collisions(live) -> Verdict:
    """Student task, on the switches: no two pinned flows share a leaf's uplink, and no
    two share a spine's downlink to the same leaf."""
    _placement_variant(live)
    spec = live.spec
    leaf_of = {i.ip: i.switch for h in spec.hosts for i in h.interfaces}
    ports = {(p.switch, p.port): p.peer for p in spec.switch_ports()}
    uplink: dict[tuple[str, int], list[str]] = {}
    downlink: dict[tuple[str, str], list[str]] = {}
    for leaf, rows in _placed(live).items():
        for src, dst, port in rows:
            flow = f"{src}>{dst}"
            uplink.setdefault((leaf, port), []).append(flow)
            spine = ports.get((live.prefix + leaf, port), "?")
            downlink.setdefault((live.short(spine), live.short(leaf_of.get(dst, "?"))),
                                []).append(flow)
    if not uplink:
        return verdict(False, "no pinned flow on any leaf")
    shared = [f"uplink {leaf} port {port}: {', '.join(f)}"
              for (leaf, port), f in uplink.items() if len(f) > 1]
    shared += [f"{spine} down to {leaf}: {', '.join(f)}"
               for (spine, leaf), f in downlink.items() if len(f) > 1]
    flows = sum(map(len, uplink.values()))
    return verdict(not shared, f"{flows} pinned flows, " + (
        f"{len(shared)} links shared: " + "; ".join(shared[:4]) if shared else
        "every uplink and every spine downlink carries at most one"))


LIVE = [hosts_reach_across_leaves, leaves_use_every_spine, placement_app_loaded,
        placement_avoids_collisions]
