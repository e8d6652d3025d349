"""Hostile requests and hostile scenarios against the lab's web surfaces, each its own case:
foreign Host headers and cross-origin requests against the live monitor's server and the
results server (both for real, on ports of their own), path traversal and symbolic-link
escapes in the results server, markup in every scenario field the dashboard shows
(rendered by headless Chromium) and in a report, and bad words in the backbone's fields
with a fixed meaning at ``testbed validate``."""

from __future__ import annotations

import http.client
import json
import os
import threading
from html.parser import HTMLParser
from pathlib import Path

import pytest
import yaml

from testbed.core.cli import main
from testbed.host.netlink import LinkCounters
from testbed.monitor.backbone import BackboneCollector, BackboneWatch
from testbed.monitor.browser import CHROMIUM, Browser
from testbed.monitor.fabric import FabricWatch
from testbed.monitor.metrics import FabricCollector
from testbed.monitor.server import MonitorServer
from testbed.monitor.timeline import Timeline
from testbed.reports.web import ResultsServer
from tests.unit.monitor_standins import Links, Queues
from topologies.leafspine import build_fabric
from topologies.spec import FabricSpec

REPO = Path(__file__).resolve().parents[2]
FOLDER = "s/20261206-000000"


def counters() -> LinkCounters:
    return LinkCounters(0, 0, 0, 0, 0, 0, 0, 0, True)


def request(port: int, path: str = "/", *, method: str = "GET", host: str | None = None,
            headers: dict | None = None):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
        if host != "":
            conn.putheader("Host", f"127.0.0.1:{port}" if host is None else host)
        for key, value in (headers or {}).items():
            conn.putheader(key, value)
        conn.endheaders(b"x=1" if method == "POST" else None)
        r = conn.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        conn.close()


# -- the two servers, for real -------------------------------------------------------------
@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    """The monitor's and the results server's ports, and the results root."""
    tmp = tmp_path_factory.mktemp("surfaces")
    spec = build_fabric(prefix="tbhost", nodes=2, leaves_per_plane=1, spines_per_plane=1)
    watch = FabricWatch(spec, tmp, links=Links({}), queues=Queues())
    watch.links.links = {name: counters() for name in watch.ports}
    tl = Timeline()
    watch.sample(tl, now=1.0)
    monitor = MonitorServer(watch=watch, timeline=tl, collector=FabricCollector(watch),
                            lab={"lab": "h"}, port=0, lock=threading.Lock())
    monitor.start()
    root = tmp / "results"
    folder = root / FOLDER
    (folder / "variants" / "a").mkdir(parents=True)
    (folder / "summary.json").write_text(json.dumps({"scenario": "s", "runs": []}))
    (folder / "report.md").write_text("# s\n")
    (folder / "variants" / "a" / "chains.jsonl").write_text('{"ok": true}\n')
    (folder / ".hidden").write_text("hidden\n")
    (folder / "keys.json").write_text("{}\n")
    os.chmod(folder / "keys.json", 0o600)
    outside = tmp / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("SECRET\n")
    os.symlink(outside / "secret.txt", folder / "leak.txt")
    os.symlink(outside, folder / "out")
    os.symlink("/", folder / "slash")
    os.mkfifo(folder / "fifo.jsonl")
    results = ResultsServer(root, 0)
    threading.Thread(target=results.serve_forever, daemon=True).start()
    yield {"monitor": monitor.port, "results": results.port, "root": root}
    monitor.close()
    results.shutdown()
    results.close()


SURFACES = ("monitor", "results")
#: Host headers a request may not carry: {} is the server's own port
FOREIGN_HOSTS = {
    "attacker name": "attacker.example",
    "attacker name, our port": "attacker.example:{}",
    "rebound subdomain": "127.0.0.1.attacker.example:{}",
    "loopback, another port": "127.0.0.1:{}0",
    "loopback, no port": "127.0.0.1",
    "localhost suffix": "localhost.attacker.example:{}",
    "any address": "0.0.0.0:{}",
    "short loopback": "127.1:{}",
    "IPv6 loopback": "[::1]:{}",
    "no Host header": "",
}


@pytest.mark.parametrize("surface", SURFACES)
@pytest.mark.parametrize("case", sorted(FOREIGN_HOSTS))
def test_a_foreign_host_header_is_refused(servers, surface, case):
    port = servers[surface]
    path = "/api/topology" if surface == "monitor" else f"/{FOLDER}/report.md"
    status, headers, body = request(port, path, host=FOREIGN_HOSTS[case].format(port))
    assert status == 421 and headers["content-type"].startswith("text/plain")
    assert b'"lab"' not in body and b"# s" not in body
    assert len(body.splitlines()) == 1 and len(body) < 200


#: (method, Origin) a page of another origin makes a browser send, and the status
CROSS_ORIGIN = {
    "POST from a foreign page": ("POST", "http://attacker.example", 405),
    "PUT": ("PUT", None, 405),
    "DELETE": ("DELETE", None, 405),
    "OPTIONS preflight": ("OPTIONS", "http://attacker.example", 405),
    "GET from a foreign page": ("GET", "http://attacker.example", 403),
    "GET from a sandboxed page": ("GET", "null", 403),
    "GET from a lookalike origin": ("GET", "http://127.0.0.1:{}.attacker.example", 403),
    "GET from another loopback port": ("GET", "http://127.0.0.1:{}1", 403),
    "GET over https origin": ("GET", "https://127.0.0.1:{}", 403),
}


@pytest.mark.parametrize("surface", SURFACES)
@pytest.mark.parametrize("case", sorted(CROSS_ORIGIN))
def test_a_cross_origin_request_is_refused(servers, surface, case):
    port = servers[surface]
    method, origin, expected = CROSS_ORIGIN[case]
    headers = {"Origin": origin.format(port)} if origin else {}
    path = "/api/state" if surface == "monitor" else f"/{FOLDER}/"
    status, answer, body = request(port, path, method=method, headers=headers)
    assert status == expected, body
    assert "access-control-allow-origin" not in answer
    if status == 405:
        assert answer["allow"] == "GET, HEAD"


#: paths that leave the results root or name what is not served, and the status
ESCAPES = {
    "dot-dot": (f"/{FOLDER}/../../../outside/secret.txt", 400),
    "encoded dot-dot": (f"/{FOLDER}/%2e%2e/%2e%2e/%2e%2e/outside/secret.txt", 400),
    "encoded slash": (f"/{FOLDER}/..%2f..%2f..%2foutside%2fsecret.txt", 400),
    "double-encoded dot-dot": (f"/{FOLDER}/%252e%252e/%252e%252e/outside/secret.txt", 404),
    "backslash": (f"/{FOLDER}/..\\..\\..\\outside\\secret.txt", 400),
    "NUL": (f"/{FOLDER}/report.md%00.png", 400),
    "empty part": (f"/{FOLDER}//report.md", 400),
    "symlink to a file outside": (f"/{FOLDER}/leak.txt", 403),
    "symlink to a folder outside": (f"/{FOLDER}/out/secret.txt", 403),
    "symlink to /": (f"/{FOLDER}/slash/etc/passwd", 403),
    "listing through a symlink": (f"/{FOLDER}/out/", 403),
    "hidden file": (f"/{FOLDER}/.hidden", 404),
    "a FIFO": (f"/{FOLDER}/fifo.jsonl", 404),
    "owner-only file": (f"/{FOLDER}/keys.json", 403),
    "listing of a non-results folder": (f"/{FOLDER}/variants/", 404),
    "listing of a parent": ("/s/", 404),
    "absolute path": ("//etc/passwd", 404),  # http.server makes it /etc/passwd
}


@pytest.mark.parametrize("case", sorted(ESCAPES))
def test_a_path_out_of_the_results_is_refused(servers, case):
    path, expected = ESCAPES[case]
    status, headers, body = request(servers["results"], path)
    assert status == expected, (status, body)
    assert b"SECRET" not in body and b"root:" not in body and b"{}" not in body
    assert headers["content-type"].startswith("text/plain") and len(body) < 300


# -- markup on the dashboard -----------------------------------------------------------------
def mark(n: int) -> str:
    return f'"><img src=x{n} onerror="window.__owned=(window.__owned||[]).concat({n})">'


#: every scenario-derived field the dashboard shows: (lab kind, field, where it shows:
#: the elements whose text holds it, or the graph's node labels, drawn on a canvas)
FIELDS = {
    "lab name": ("fabric", "lab", "#title"),
    "event text": ("fabric", "event", "#events li"),
    "switch name": ("fabric", "switch", "#ports tbody td"),
    "switch role": ("fabric", "role", "#ports tbody td"),
    "PoP name": ("backbone", "pop", "graph"),
    "region name": ("backbone", "region", "graph"),
    "link name": ("backbone", "link", "#links tbody td"),
    "link kind": ("backbone", "kind", "#links tbody td"),
    "link length": ("backbone", "km", "#links tbody td"),
}


def watch_with(kind: str, field: str, value: str, out: Path):
    """A watch of a lab whose ``field`` is ``value`` (everything else plain)."""
    if kind == "backbone":
        names = {"pop": "nyc", "region": "re", "link": "re-nyc", "kind": "access", "km": 50}
        names[field] = value
        desc = {"kind": "backbone", "protocol": "ospfd", "nodes": [
            {"id": names["pop"], "role": "pop", "area": "na", "pops": [], "netns": "x",
             "vty": "v"},
            {"id": names["region"], "role": "region", "area": None, "pops": [names["pop"]],
             "netns": "y", "vty": "v"}],
            "links": [{"id": names["link"], "a": names["region"], "b": names["pop"],
                       "a_if": "l0a", "b_if": "l0b", "mbps": 10, "km": names["km"],
                       "kind": names["kind"]}]}
        readers = {names["region"]: Links({"l0a": counters()}),
                   names["pop"]: Links({"l0b": counters()})}
        watch = BackboneWatch(desc, out, readers=readers)
        return watch, BackboneCollector(watch)
    spec = build_fabric(prefix="tbmark", nodes=2, leaves_per_plane=1, spines_per_plane=1)
    data = spec.to_dict()
    if field == "switch":
        data = json.loads(json.dumps(data).replace('"tbmarkp0s0"', json.dumps(
            "tbmarkp0s0" + value)))
    if field == "role":
        for s in data["switches"]:
            s["role"] = value
    spec = FabricSpec.from_dict(data)
    watch = FabricWatch(spec, out, links=Links({}), queues=Queues())
    watch.links.links = {name: counters() for name in watch.ports}
    return watch, FabricCollector(watch)


@pytest.mark.skipif(CHROMIUM is None, reason="no headless Chromium (make setup-dev installs "
                    "chromium-headless-shell where the distribution has it)")
@pytest.mark.parametrize("case", sorted(FIELDS))
def test_markup_in_a_dashboard_field_is_shown_as_text(case, tmp_path):
    kind, field, where = FIELDS[case]
    value = f"x{mark(len(case))}"
    out = tmp_path / "out"
    out.mkdir()
    event = value if field == "event" else "a fault"
    (out / "lab-faults.jsonl").write_text(json.dumps({"t": 1.5, "text": event}) + "\n")
    watch, collector = watch_with(kind, field, value, out)
    tl = Timeline()
    watch.sample(tl, now=1.0)
    watch.sample(tl, now=2.0)
    server = MonitorServer(watch=watch, timeline=tl, collector=collector,
                           lab={"lab": value if field == "lab" else "lab"}, port=0,
                           lock=threading.Lock())
    server.start()
    try:
        with Browser(tmp_path / "profile") as browser:
            browser.open(f"http://127.0.0.1:{server.port}/")
            browser.wait_for("window.testbedDashboard && testbedDashboard.polls >= 1 && "
                             "document.querySelectorAll('#links tbody tr').length > 0", 30)
            assert browser.evaluate("document.querySelectorAll('img, svg').length") == 0
            assert browser.evaluate("window.__owned === undefined")
            texts = browser.evaluate(
                "testbedDashboard.cy.nodes().map(n => n.data('label'))" if where == "graph"
                else f"[...document.querySelectorAll({json.dumps(where)})]"
                     ".map(e => e.textContent)")
            shown = value if field != "km" else f"{value} km"
            assert any(shown in t for t in texts), texts
    finally:
        server.close()


# -- markup in a report ------------------------------------------------------------------------
REPORTS = {
    "raw tag": ("<script>window.__owned=1</script>", "<script"),
    "image handler": ('![x" onerror="alert(1)](p.png)', "onerror=\""),
    "javascript link": ("[click](javascript:alert(1))", "href"),
    "data image": ("![x](data:image/svg+xml,<svg onload=alert(1)>)", "<img"),
    "image out of the folder": ("![x](../../../outside/secret.txt)", "<img"),
    "absolute image": ("![x](/etc/passwd)", "<img"),
    "markup in a table": ("| a |\n|---|\n| <img src=x onerror=alert(1)> |", "<img"),
    "markup in code": ("```\n</code></pre><script>x</script>\n```", "<script"),
    "markup in a heading": ("## <iframe src=//attacker.example>", "<iframe"),
    # what would hold the server up (answered within the request's 10 s, or the case fails)
    "a line of unclosed links": ("[a](" * 40_000, "<a "),
    "quotes a thousand deep": ("> " * 1000 + "x", "<blockquote>" * 9),
}


@pytest.mark.parametrize("case", sorted(REPORTS))
def test_markup_in_a_report_stays_text(servers, case):
    """A report.md carrying it, in a results folder of its own, served for real: the
    report's part of the page holds none of it as markup."""
    text, forbidden = REPORTS[case]
    port, root = servers["results"], servers["root"]
    folder = root / "hostile" / case.replace(" ", "-")
    folder.mkdir(parents=True)
    (folder / "summary.json").write_text(json.dumps({"scenario": "hostile"}))
    (folder / "report.md").write_text(f"# hostile\n\n{text}\n")
    (folder / "p.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    status, _, body = request(port, f"/hostile/{case.replace(' ', '-')}/")
    page = body.decode()
    assert status == 200
    report = page[page.index('<section id="report">'):page.index("</section>")]
    assert forbidden not in report, report
    elements = Elements()
    elements.feed(report)
    assert {tag for tag, _ in elements.seen} <= SAFE_TAGS, report
    for _, attrs in elements.seen:
        assert not any(name.startswith("on") for name, _ in attrs), report
        for name, value in attrs:
            if name in ("src", "href"):  # a file of the folder, served by the lab
                assert value.startswith(f"/hostile/{case.replace(' ', '-')}/"), report


SAFE_TAGS = {"section", "h1", "h2", "h3", "p", "img", "a", "code", "pre", "table", "thead",
             "tbody", "tr", "th", "td", "ul", "ol", "li", "strong", "em", "blockquote", "hr"}


class Elements(HTMLParser):
    """Every element of a piece of HTML, with its attributes."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[str, list]] = []

    def handle_starttag(self, tag, attrs):
        self.seen.append((tag, attrs))


# -- words with a fixed meaning at testbed validate ----------------------------------------------
def backbone_scenario(section: str, index: int, field: str, value) -> str:
    doc = yaml.safe_load((REPO / "labs" / "lab07_backbone" / "solution" /
                          "backbone.yaml").read_text())
    doc["backbone"][section][index][field] = value
    return yaml.safe_dump(doc)


BAD_FIELDS = {
    "link kind markup": ("links", 0, "kind", "<img src=x onerror=alert(1)>"),
    "link kind unknown": ("links", 0, "kind", "satellite"),
    "link kind capitalised": ("links", 3, "kind", "Subsea"),
    "link kind a number": ("links", 0, "kind", 5),
    "risk group kind markup": ("risk_groups", 0, "kind", "<b>cable</b>"),
    "risk group kind unknown": ("risk_groups", 0, "kind", "tunnel"),
    "PoP area unknown": ("pops", 0, "area", "mars"),
    "PoP area markup": ("pops", 0, "area", "<script>x</script>"),
    "link length infinite": ("links", 0, "length_km", float("inf")),
    "link length negative": ("links", 0, "length_km", -5),
    "link capacity text": ("links", 0, "capacity_mbps", "<i>400</i>"),
    "region uplink text": ("regions", 0, "uplink_mbps", "fast"),
    "region PoPs a string": ("regions", 0, "pops", "nyc"),
}


@pytest.mark.parametrize("case", sorted(BAD_FIELDS))
def test_a_bad_word_in_a_backbone_field_is_one_line_and_exit_2(case, tmp_path, capsys):
    section, index, field, value = BAD_FIELDS[case]
    path = tmp_path / "s.yaml"
    path.write_text(backbone_scenario(section, index, field, value))
    assert main(["validate", str(path)]) == 2
    out = capsys.readouterr()
    lines = out.err.strip().splitlines()
    assert out.out == "" and len(lines) == 1, out
    assert f"backbone.{section}[{index}].{field}:" in lines[0], lines[0]
    assert list(tmp_path.iterdir()) == [path]


def test_every_shipped_backbone_keeps_to_the_words():
    """What validates today still does: the shipped scenarios and guides with an inline
    backbone, and the shipped and example topologies' fields."""
    from examples.backbones.pop_ring import PopRing
    from testbed.experiments.backbone.schema import _check_names
    from topologies.backbone import default_backbone, small_backbone

    for bb in (default_backbone(), small_backbone(), PopRing.build()):
        _check_names(bb.to_dict(), "backbone.topology")
    for path in [*sorted((REPO / "scenarios").glob("*.yaml")),
                 *sorted((REPO / "labs").glob("lab07_*/*/backbone.yaml")),
                 REPO / "examples" / "backbone-topology.yaml"]:
        assert main(["validate", str(path)]) == 0, path
