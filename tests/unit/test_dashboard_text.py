"""Names and labels from a scenario reach the live dashboard as text: a backbone and a
fabric whose names, link kinds, lengths, roles, lab name and events carry markup are
served by the real monitor server and rendered by headless Chromium; the page shows the
markup as characters, and no element or handler of it exists."""

from __future__ import annotations

import json
import threading

import pytest

from testbed.host.netlink import LinkCounters
from testbed.monitor.backbone import BackboneCollector, BackboneWatch
from testbed.monitor.browser import CHROMIUM, Browser
from testbed.monitor.fabric import FabricWatch
from testbed.monitor.metrics import FabricCollector
from testbed.monitor.server import MonitorServer
from testbed.monitor.timeline import Timeline
from tests.unit.monitor_standins import Links, Queues
from topologies.leafspine import build_fabric
from topologies.spec import FabricSpec

pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="no headless Chromium (make setup-dev installs "
                             "chromium-headless-shell where the distribution has it)")


#: markup that, inserted as HTML, makes an element and runs a handler; quoted, it also
#: breaks out of an attribute or a selector built from the string
MARKS = {"plain": "<img src=x{n} onerror=window.__owned={n}>",
         "quoted": '"><img src=x{n} onerror="window.__owned=(window.__owned||[]).concat({n})">'}


def counters(tx: int = 0) -> LinkCounters:
    return LinkCounters(0, tx // 1000, 0, tx, 0, 0, 0, 0, True)


def backbone_watch(out, mark):
    pop, region = f"nyc{mark(3)}", f"r{mark(4).replace('img', 'svg')}"
    link, kind, km = f"l1{mark(5)}", mark(6), f"<script>window.__owned={mark(7)}</script>"
    desc = {"kind": "backbone", "protocol": "ospfd", "nodes": [
        {"id": pop, "role": "pop", "area": "na", "pops": [], "netns": "x", "vty": "v"},
        {"id": region, "role": "region", "area": None, "pops": [pop], "netns": "y",
         "vty": "v"}],
        "links": [{"id": link, "a": region, "b": pop, "a_if": "l0a", "b_if": "l0b",
                   "mbps": 10, "km": km, "kind": kind}]}
    readers = {region: Links({"l0a": counters()}), pop: Links({"l0b": counters()})}
    watch = BackboneWatch(desc, out, readers=readers)
    # what the page must show, as text, in a row of the links table
    return watch, BackboneCollector(watch), [link, f"{km} km", kind], [pop, region]


def fabric_watch(out, mark):
    spec = build_fabric(prefix="tbdash", nodes=2, leaves_per_plane=1, spines_per_plane=1,
                        link_mbps=10)
    switch = f"tbdashp0s0{mark(8)}"
    text = json.dumps(spec.to_dict()).replace('"tbdashp0s0"', json.dumps(switch))
    data = json.loads(text)
    for s in data["switches"]:
        s["role"] = f"{s['role']}{mark(9)}"
    spec = FabricSpec.from_dict(data)
    watch = FabricWatch(spec, out, links=Links({}), queues=Queues())
    watch.links.links = {name: counters() for name in watch.ports}
    leaf_up = next(p for p in spec.switch_ports() if p.role.endswith("_uplink"))
    first = [f"p0l0-p0s0{mark(8)}", "0", "fabric"]
    return watch, FabricCollector(watch), first, [switch[len("tbdash"):], leaf_up.role]


@pytest.mark.parametrize("style", sorted(MARKS))
@pytest.mark.parametrize("kind", ["backbone", "fabric"])
def test_scenario_markup_is_shown_as_text(kind, style, tmp_path, record_property):
    def mark(n: int) -> str:
        return MARKS[style].format(n=n)

    lab, event = f"<b>lab</b>{mark(1)}", f"cut {mark(2)}"
    out = tmp_path / "out"
    out.mkdir()
    (out / "lab-faults.jsonl").write_text(json.dumps({"t": 1.5, "kind": "cut",
                                                      "text": event}) + "\n")
    make = backbone_watch if kind == "backbone" else fabric_watch
    watch, collector, row, names = make(out, mark)
    tl = Timeline()
    watch.sample(tl, now=1.0)
    watch.sample(tl, now=2.0)
    server = MonitorServer(watch=watch, timeline=tl, collector=collector,
                           lab={"lab": lab, "interval_s": 1}, port=0, lock=threading.Lock())
    server.start()
    try:
        with Browser(tmp_path / "profile") as browser:
            browser.open(f"http://127.0.0.1:{server.port}/")
            browser.wait_for("window.testbedDashboard && testbedDashboard.polls >= 1 && "
                             "document.querySelectorAll('#links tbody tr').length > 0", 30)
            # nothing of the markup became an element, nothing of it ran
            made = browser.evaluate(
                "[...document.querySelectorAll('img, svg, script:not([src]), #title *, "
                "#links tbody td *, #events li *, #ports tbody td:not(.bar) *')]"
                ".map(e => e.outerHTML)")
            assert made == [], made
            assert browser.evaluate("window.__owned === undefined")
            # and every string is on the page as the characters it is
            shown = browser.evaluate("[...document.querySelectorAll('#links tbody tr')].map("
                                     "tr => [...tr.querySelectorAll('td')].slice(0, 3)"
                                     ".map(td => td.textContent))")
            assert row in shown, shown
            assert browser.evaluate("document.getElementById('title').textContent"
                                    ).startswith(f"lab {lab}: ")
            assert browser.evaluate("document.title") == f"{lab} - lab dashboard"
            events = browser.evaluate("[...document.querySelectorAll('#events li')]"
                                      ".map(li => li.textContent)")
            assert any(e.endswith(f"fault: {event}") for e in events), events
            labels = browser.evaluate("testbedDashboard.cy.nodes().map(n => n.data('label'))")
            assert names[0] in labels
            if kind == "fabric":  # the ports table: switch and role cells
                texts = browser.evaluate("[...document.querySelectorAll('#ports tbody td')]"
                                         ".map(td => td.textContent)")
                assert names[0] in texts and names[1] in texts, texts
            else:
                assert names[1] in labels
            record_property("screenshot", str(browser.screenshot(tmp_path / "page.png")))
    finally:
        server.close()
