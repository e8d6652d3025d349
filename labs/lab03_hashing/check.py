"""Lab 3 checks: static hashing against adaptive routing, spraying and a placement app
(``testbed check 3 RESULTS``), on a results folder of ``labs/lab03_hashing/*/scenario.yaml``.
"""

from __future__ import annotations

import json

from testbed.core import layout
from testbed.reports.grading import Results, Verdict, verdict
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
    """Student task: the placement app moves >= 1.25x ECMP's aggregate goodput."""
    ecmp, app = _goodput(r, ECMP), _goodput(r, APP)
    others = ", ".join(f"{n} {_goodput(r, n):.1f}" for n in (ADAPTIVE, SPRAY))
    return verdict(app >= BEATS * ecmp,
                   f"placement {app:.1f} Mb/s against ECMP {ecmp:.1f} Mb/s "
                   f"({app / ecmp:.2f}x, needs {BEATS}x; {others} Mb/s)")


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
