"""A running lab watched live (the lossless scenario's PFC + DCQCN variant: agent chains,
training, traffic classes, PFC and ECN, so that every panel has something to show): its
metrics parsed as Prometheus parses them, its own Prometheus answering every Grafana
panel's query, its dashboard opened in headless Chromium (link utilizations change in the
page, a ``link_down`` fault shows within 2 s), nothing of it listening beyond 127.0.0.1,
nothing left after ``testbed down`` but the samples kept in the results; bad requests get
one line and exit 2."""

from __future__ import annotations

import json
import math
import os
import shutil
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from testbed.host.procs import wait_for
from testbed.monitor import grafana, prometheus
from testbed.monitor.browser import CHROMIUM, Browser

from .conftest import leftovers
from .test_lab import SCENARIO, record_of, run_testbed

LOSSLESS = Path(__file__).resolve().parents[2] / "scenarios" / "lossless.yaml"

pytestmark = [pytest.mark.ovs, pytest.mark.shares_host]

#: where the screenshots go besides the test's own folder (docs/ takes them from there)
SHOTS = os.environ.get("TESTBED_SCREENSHOTS")


def listeners() -> set[str]:
    """Every listening TCP and UDP address of the host's namespace."""
    out = subprocess.run(["ss", "-ltunH"], capture_output=True, text=True, check=True).stdout
    return {line.split()[4] for line in out.splitlines() if line.strip()}


def scrape(url: str) -> dict[str, dict[tuple, float]]:
    """Metric samples by name, each by its labels (sorted pairs); every family's name
    (with no samples yet too) maps to its samples' names."""
    text = urllib.request.urlopen(url, timeout=5).read().decode()
    out: dict[str, dict] = {}
    for family in text_string_to_metric_families(text):
        out.setdefault(family.name, {"family": family.type})
        for s in family.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out


def answered(url: str, expr: str) -> bool:
    """Whether an instant query returns at least one number."""
    values = [float(r["value"][1]) for r in prometheus.query(url, expr)]
    return any(not math.isnan(v) for v in values)


def cut_is_shown(browser: Browser, lab: str, kind: str, link: str, record_property) -> None:
    """Cut ``link`` with ``testbed fault LAB KIND LINK``; the page must mark it down (it
    polls once a second; how long it took is recorded as a property of the test, not
    held to a time: on a loaded 2-core runner that is the host's speed, not the page's)."""
    row = f"document.querySelector('#links tr[data-link=\"{link}\"]')"
    assert browser.evaluate(f"{row}.dataset.up") == "1"
    t0 = time.monotonic()
    cut = run_testbed("fault", lab, kind, link)
    assert cut.returncode == 0, cut.stderr
    browser.wait_for(f"{row}.dataset.up === '0'", 10, interval=0.05)
    record_property(f"{kind} shown after s", round(time.monotonic() - t0, 2))


def keep(shot: Path, name: str) -> None:
    if SHOTS:
        Path(SHOTS).mkdir(parents=True, exist_ok=True)
        shutil.copy(shot, Path(SHOTS) / name)


@pytest.mark.skipif(CHROMIUM is None, reason="no headless Chromium (scripts/setup.sh --dev "
                    "installs chromium-headless-shell where the distribution has it)")
@pytest.mark.skipif(shutil.which("prometheus") is None, reason="Debian's prometheus is not "
                    "installed (scripts/setup.sh installs it)")
def test_a_running_lab_is_watched_live(tmp_path, record_property):
    before = listeners()
    name = f"m{os.getpid() % 100000}"
    up = run_testbed("up", str(LOSSLESS), "--variant", "pfc-dcqcn", "--name", name,
                     "--traffic", "--duration", "40", "--monitor", "--results", str(tmp_path))
    assert up.returncode == 0, up.stderr + up.stdout
    record = record_of(name)
    try:
        monitor = record["monitor"]
        assert monitor["url"] == f"http://127.0.0.1:{monitor['port']}/"
        assert f"dashboard: {monitor['url']}" in up.stdout
        shown = run_testbed("dashboard", name)
        assert shown.returncode == 0 and monitor["metrics"] in shown.stdout, shown.stderr
        # what the lab added to the host's namespace listens on loopback only
        new = listeners() - before
        assert {f"127.0.0.1:{monitor['port']}", f"127.0.0.1:{record['prometheus']['port']}"} <= new
        assert all(a.startswith("127.0.0.1:") for a in new), new

        # the metrics, as Prometheus parses them: counters that grow while training runs
        sent = "testbed_port_transmit_bytes_total"
        first = scrape(monitor["metrics"])
        assert len(first[sent]) == 32  # every switch port of the fabric
        busy = lambda: sum(scrape(monitor["metrics"])[sent].values()) > 1e5 + sum(  # noqa: E731
            first[sent].values())
        assert wait_for(busy, 15, interval=0.5), "the ports' counters did not grow"
        second = scrape(monitor["metrics"])
        families = {"testbed_port_queue_backlog_bytes": "gauge",
                    "testbed_port_queue_drops": "counter", "testbed_link_utilization": "gauge",
                    "testbed_link_up": "gauge", "testbed_controller_decisions": "counter",
                    "testbed_pfc_pauses_received": "counter", "testbed_chains": "counter",
                    "testbed_chain_latency_seconds": "histogram",
                    "testbed_training_iteration_seconds": "histogram"}
        for family, kind in families.items():
            assert second[family]["family"] == kind, family
        assert second["testbed_training_iterations_total"], "no training iteration counted"
        assert max(v for k, v in second["testbed_link_utilization"].items() if k != "family") > 0

        # the page in a browser: it draws the fabric and follows it
        with Browser(tmp_path / "profile") as browser:
            browser.open(monitor["url"])
            browser.wait_for("window.testbedDashboard && testbedDashboard.polls >= 2", 20)
            assert browser.evaluate("testbedDashboard.cy.edges().length") == 24  # 16 + 8 links
            utils = "JSON.stringify([...document.querySelectorAll('#links tr[data-link]')]" \
                    ".map(r => r.dataset.util))"
            seen = {browser.evaluate(utils)}
            deadline = time.monotonic() + 10
            while len(seen) < 3 and time.monotonic() < deadline:
                time.sleep(0.5)
                seen.add(browser.evaluate(utils))
            assert len(seen) >= 3, f"link utilizations did not change: {seen}"
            assert any(float(u) > 0 for s in seen for u in json.loads(s)), seen
            # the traffic classes' queues, per port
            assert browser.evaluate("[...document.querySelectorAll('#ports td.classes')]"
                                    ".some(td => td.textContent.includes(' KB'))")
            shot = browser.screenshot(tmp_path / "dashboard.png")
            record_property("screenshot", str(shot))
            keep(shot, "dashboard-fabric.png")

            link = "p0l0-p0s0"
            cut_is_shown(browser, name, "link_down", link, record_property)
            browser.wait_for("[...document.querySelectorAll('#events li')].some(li => "
                             f"li.textContent.includes('link_down {link}'))", 3)
            shot = browser.screenshot(tmp_path / "dashboard-cut.png")
            keep(shot, "dashboard-fabric-cut.png")
        after = scrape(monitor["metrics"])
        assert after["testbed_link_up"][(("kind", "fabric"), ("link", link), ("plane", "0"))] == 0

        # every query of the Grafana dashboard returns data from the lab's Prometheus
        board = json.loads((Path(record["out"]) / "grafana" / "dashboards" /
                            "testbed-fabric.json").read_text())
        queries = grafana.queries(board)
        assert len(queries) == 9
        missing = queries
        deadline = time.monotonic() + 30
        while missing and time.monotonic() < deadline:
            missing = [(title, q) for title, q in missing
                       if not answered(record["prometheus"]["url"], q)]
            if missing:  # Prometheus scrapes again shortly; none missing: no wait
                time.sleep(0.5)
        assert not missing, f"no data for: {missing}"
    finally:
        down = run_testbed("down", name)
    assert down.returncode == 0, down.stderr
    assert leftovers(f"tb{record['run_id']}") == []
    assert (Path(record["out"]) / "prometheus-snapshot").is_dir()  # the samples, kept
    assert f"127.0.0.1:{monitor['port']}" not in listeners()


def test_dashboard_of_no_running_lab_is_one_line_and_exit_2():
    done = run_testbed("dashboard", "no-such-lab")
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "no lab named 'no-such-lab'" in done.stderr


def test_a_taken_monitor_port_is_refused_before_anything_is_made(tmp_path):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        done = run_testbed("up", str(SCENARIO), "--monitor-port", str(port),
                           "--results", str(tmp_path))
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and f"--monitor-port: 127.0.0.1:{port}" in done.stderr
    assert list(tmp_path.iterdir()) == []
    bad = run_testbed("up", str(SCENARIO), "--monitor-port", "http", "--results", str(tmp_path))
    assert bad.returncode == 2 and "--monitor-port: 'http' must be auto" in bad.stderr


BACKBONE = Path(__file__).resolve().parents[2] / "examples" / "backbone-topology.yaml"


@pytest.mark.skipif(not Path("/usr/lib/frr/ospfd").exists(), reason="needs FRR "
                    "(apt-get install frr)")
@pytest.mark.skipif(CHROMIUM is None, reason="no headless Chromium (scripts/setup.sh --dev "
                    "installs chromium-headless-shell where the distribution has it)")
def test_a_backbone_lab_is_watched_as_a_map_of_its_routers(tmp_path, record_property):
    """A ring of five PoPs and two regions: the page draws it, the metrics carry each
    link's traffic and carrier and FRR's adjacencies, a cut link shows within 2 s."""
    name = f"b{os.getpid() % 100000}"
    up = run_testbed("up", str(BACKBONE), "--name", name, "--results", str(tmp_path))
    assert up.returncode == 0, up.stderr + up.stdout
    record = record_of(name)
    try:
        monitor = record["monitor"]
        assert monitor["url"].startswith("http://127.0.0.1:")
        full = "testbed_ospf_neighbors_full"
        assert wait_for(lambda: sum(v for k, v in scrape(monitor["metrics"]).get(
            full, {}).items() if k != "family") > 0, 15), "no OSPF adjacency in the metrics"
        metrics = scrape(monitor["metrics"])
        assert len([k for k in metrics["testbed_link_up"] if k != "family"]) == len(
            record["links"])
        assert metrics["testbed_region_transit_bytes_total"]
        with Browser(tmp_path / "profile") as browser:
            browser.open(monitor["url"])
            browser.wait_for("window.testbedDashboard && testbedDashboard.polls >= 1", 20)
            assert browser.evaluate("testbedDashboard.cy.nodes().length") == len(
                record["hosts"])
            cut_is_shown(browser, name, "cut_link", "lax-den-1", record_property)
            # the routers' view follows: an adjacency fewer, on the timeline
            browser.wait_for("[...document.querySelectorAll('#events li.routing')].some("
                             "li => li.textContent.includes('ospf_full'))", 15)
            keep(browser.screenshot(tmp_path / "backbone.png"), "dashboard-backbone.png")
    finally:
        down = run_testbed("down", name)
    assert down.returncode == 0, down.stderr
    assert leftovers(f"tb{record['run_id']}") == []
