"""The lab's web surfaces refuse what a web page elsewhere could make a browser on the same
machine send: the monitor's HTTP server (for real, on a port of its own) answers only
GET and HEAD addressed to 127.0.0.1 or localhost with its port, from no other origin, and
none of its routes changes anything; the lab's Prometheus (a real one, where Debian's
package is installed) has no admin API, answers no other origin's cross-origin request,
and its samples are still kept at the teardown, copied once it stopped."""

from __future__ import annotations

import http.client
import json
import shutil
import socket
import subprocess
import threading
import urllib.request
from contextlib import ExitStack
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from testbed.host.netlink import LinkCounters
from testbed.host.procs import wait_for
from testbed.monitor import prometheus
from testbed.monitor.fabric import FabricWatch
from testbed.monitor.metrics import FabricCollector
from testbed.monitor.server import MonitorServer
from testbed.monitor.timeline import Timeline
from tests.unit.monitor_standins import Links, Queues
from topologies.leafspine import build_fabric

PREFIX = "tbweb0"
FOREIGN = "http://attacker.example"


def request(port: int, path: str = "/", *, method: str = "GET", host: str | None = None,
            headers: dict | None = None, body: bytes | None = None):
    """One request over a real connection; ``host`` None sends 127.0.0.1:port, "" none."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
        if host != "":
            conn.putheader("Host", host if host is not None else f"127.0.0.1:{port}")
        for key, value in (headers or {}).items():
            conn.putheader(key, value)
        if body is not None:
            conn.putheader("Content-Length", str(len(body)))
        conn.endheaders(body)
        r = conn.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        conn.close()


@pytest.fixture
def monitor(tmp_path):
    """A fabric's monitor server with stand-in counters, serving on a port of its own."""
    spec = build_fabric(prefix=PREFIX, nodes=4, leaves_per_plane=2, spines_per_plane=2,
                        link_mbps=10)
    counters = LinkCounters(0, 0, 0, 0, 0, 0, 0, 0, True)
    watch = FabricWatch(spec, tmp_path, links=Links({}), queues=Queues())
    watch.links.links = {name: counters for name in watch.ports}
    (tmp_path / "lab-faults.jsonl").write_text(json.dumps(
        {"t": 1.5, "kind": "link_down", "text": "link_down p0l0-p0s0"}) + "\n")
    tl = Timeline()
    watch.sample(tl, now=1.0)
    watch.sample(tl, now=2.0)
    server = MonitorServer(watch=watch, timeline=tl, collector=FabricCollector(watch),
                           lab={"lab": "w"}, port=0, lock=threading.Lock())
    server.start()
    yield server
    server.close()


def test_the_monitor_answers_only_requests_addressed_to_it_on_loopback(monitor):
    port = monitor.port
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"LOCALHOST:{port}"):
        status, _, body = request(port, "/api/topology", host=host)
        assert status == 200 and json.loads(body)["lab"] == "w", host
    # a page whose name was rebound to 127.0.0.1 sends its own name: refused, no data
    for host in ("attacker.example", f"attacker.example:{port}", f"127.0.0.1:{port + 1}",
                 "127.0.0.1", f"0.0.0.0:{port}", ""):
        status, headers, body = request(port, "/api/topology", host=host)
        assert status == 421, host
        assert b'"lab"' not in body and len(body.splitlines()) == 1
        assert headers["content-type"].startswith("text/plain")


def test_a_cross_origin_request_is_refused_and_only_get_and_head_are_answered(monitor):
    port = monitor.port
    status, headers, body = request(port, "/api/state", method="POST",
                                    headers={"Origin": FOREIGN}, body=b"since=0")
    assert status == 405 and headers["allow"] == "GET, HEAD"
    assert "access-control-allow-origin" not in headers
    for method in ("PUT", "DELETE", "PATCH", "OPTIONS"):
        assert request(port, "/", method=method)[0] == 405, method
    status, headers, body = request(port, "/api/state", headers={"Origin": FOREIGN})
    assert status == 403 and b"points" not in body
    assert "access-control-allow-origin" not in headers
    assert request(port, "/api/state", headers={"Origin": "null"})[0] == 403
    # its own page's requests (the browser may send its own origin) are answered
    assert request(port, "/api/state", headers={"Origin": f"http://127.0.0.1:{port}"})[0] == 200
    status, headers, body = request(port, "/", method="HEAD")
    assert status == 200 and body == b"" and int(headers["content-length"]) > 100
    assert "script-src 'self'" in headers["content-security-policy"]
    assert headers["x-content-type-options"] == "nosniff"


def _plain(value, depth: int = 0):
    """``value`` as plain data, objects by their attributes (the file tails' offsets too)."""
    if depth > 8:
        return repr(value)
    if isinstance(value, dict):
        return {repr(k): _plain(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset) or hasattr(value, "maxlen"):
        return [_plain(v, depth + 1) for v in value]
    if hasattr(value, "__dict__"):
        return {k: _plain(v, depth + 1) for k, v in vars(value).items()}
    return repr(value)


def _state(server: MonitorServer) -> str:
    """Everything of the watch and its timeline a request could change."""
    watch = server.watch
    fields = {k: v for k, v in vars(watch).items() if k not in ("links", "queues")}
    return json.dumps(_plain((fields, server.timeline)), sort_keys=True)


def test_no_get_route_changes_the_lab_or_its_monitor(monitor):
    before = _state(monitor)
    routes = ["/", "/index.html", "/static/dashboard.js", "/metrics", "/api/topology",
              "/api/state", "/api/state?since=1.5", "/api/state?since=x", "/nothing"]
    for path in routes:
        for method in ("GET", "HEAD"):
            request(monitor.port, path, method=method)
    assert _state(monitor) == before
    # and the sampler still adds what comes next: the state compared is the live one
    monitor.watch.sample(monitor.timeline, now=3.0)
    assert _state(monitor) != before


# -- the lab's Prometheus ----------------------------------------------------------------
needs_prometheus = pytest.mark.skipif(
    shutil.which(prometheus.BINARY) is None,
    reason="Debian's prometheus is not installed (apt-get install prometheus; scripts/"
           "setup.sh installs it)")


class Target:
    """A scrape target on loopback: one gauge."""

    def __init__(self) -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                body = b"# TYPE testbed_web_probe gauge\ntestbed_web_probe 7\n"
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.address = f"127.0.0.1:{self.httpd.server_address[1]}"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _probe(url: str) -> list[dict]:
    try:
        return prometheus.query(url, "testbed_web_probe")
    except (OSError, ValueError):
        return []


@needs_prometheus
def test_the_labs_prometheus_has_no_admin_api_and_no_foreign_origin(tmp_path):
    target = Target()
    (tmp_path / "out").mkdir()
    try:
        with ExitStack() as stack:
            server = prometheus.start(name="w", targets={"probe": target.address},
                                      folder=tmp_path / "run", out=tmp_path / "out",
                                      pid_dir=tmp_path / "run", stack=stack)
            assert wait_for(lambda: _probe(server.url), 30, interval=0.3), "no sample"
            port = server.port
            admin = "/api/v1/admin/tsdb/snapshot"
            # what a page elsewhere makes a browser send: refused, nothing taken
            status, headers, body = request(port, admin, method="POST",
                                            headers={"Origin": FOREIGN}, body=b"")
            assert status != 200 and b"admin APIs disabled" in body
            assert "access-control-allow-origin" not in headers
            status, _, body = request(port, admin, method="POST", host="attacker.example",
                                      body=b"")
            assert status != 200 and b"admin APIs disabled" in body
            status, _, _ = request(port, "/api/v1/admin/tsdb/delete_series?match[]=up",
                                   method="POST", headers={"Origin": FOREIGN}, body=b"")
            assert status != 200
            assert not (tmp_path / "run" / "data" / "snapshots").exists()
            # a cross-origin read is not allowed to the foreign page; its own origin is
            query = "/api/v1/query?query=testbed_web_probe"
            _, headers, _ = request(port, query, headers={"Origin": FOREIGN})
            assert "access-control-allow-origin" not in headers
            _, headers, _ = request(port, query,
                                    headers={"Origin": f"http://127.0.0.1:{port}0"})
            assert "access-control-allow-origin" not in headers
            _, headers, _ = request(port, query, headers={"Origin": f"http://127.0.0.1:{port}"})
            assert headers["access-control-allow-origin"] == f"http://127.0.0.1:{port}"
            assert request(port, "/-/quit", method="POST", body=b"")[0] != 200
    finally:
        target.close()
    # the teardown stopped it, then kept its samples: a Prometheus on the copy has them
    kept = tmp_path / "out" / "prometheus-snapshot"
    assert (kept / "wal").is_dir() and not (kept / "lock").exists()
    again = free_port()
    proc = subprocess.Popen([shutil.which(prometheus.BINARY), f"--storage.tsdb.path={kept}",
                             "--config.file=/dev/null", f"--web.listen-address=127.0.0.1:{again}",
                             "--storage.tsdb.retention.time=10y"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        url = f"http://127.0.0.1:{again}/"
        assert wait_for(lambda: _probe(url), 30, interval=0.3), "the kept samples are gone"
        assert _probe(url)[0]["value"][1] == "7"
    finally:
        proc.terminate()
        proc.wait(20)


def test_the_labs_prometheus_command_line_has_no_admin_or_lifecycle_api(tmp_path):
    argv = prometheus.argv("prometheus", tmp_path / "p.yml", tmp_path / "data", 9123, "w")
    assert not any("enable-admin-api" in a or "enable-lifecycle" in a for a in argv)
    assert "--web.cors.origin=http://127\\.0\\.0\\.1:9123" in argv
    assert "--web.listen-address=127.0.0.1:9123" in argv


def test_urlopen_of_the_dashboard_still_works(monitor):
    """What the lab's own tools do (urllib sends Host 127.0.0.1:PORT)."""
    body = urllib.request.urlopen(f"http://127.0.0.1:{monitor.port}/metrics", timeout=5).read()
    assert b"testbed_port_up" in body
