"""The monitor's HTTP server, on 127.0.0.1 only, for a browser on the lab's machine (GET
and HEAD addressed to 127.0.0.1 or localhost with its port, from no other origin:
:mod:`testbed.monitor.loopback`); no route changes anything:

- ``/metrics``: Prometheus's text format (:mod:`testbed.monitor.metrics`);
- ``/``: the dashboard page, and ``/static/...`` its scripts (``page/``);
- ``/api/topology``: the lab drawn as nodes and links (once per page load);
- ``/api/state?since=T``: the latest sample, and the timeline's points and events
  after ``T`` (the page asks once a second with the last time it has).
"""

from __future__ import annotations

import json
import threading
from http.server import ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse

from testbed.monitor.loopback import LoopbackHandler
from testbed.monitor.metrics import exposition

PAGE = Path(__file__).parent / "page"
TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
         ".css": "text/css; charset=utf-8", ".md": "text/plain; charset=utf-8",
         ".LICENSE": "text/plain; charset=utf-8"}
#: every file the page may load, by its path under /static/
STATIC = {str(p.relative_to(PAGE)): p for p in PAGE.rglob("*")
          if p.is_file() and p.suffix in TYPES}
#: the page runs its own scripts only (no inline ones, no handler attributes), loads
#: nothing from elsewhere and is framed by no other page
POLICY = ("default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
          "img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; "
          "frame-ancestors 'none'")


class MonitorServer:
    """Serves one lab's watch; ``lock`` is held by the sampler while it samples."""

    def __init__(self, *, watch, timeline, collector, lab: dict, port: int,
                 lock: threading.Lock) -> None:
        monitor = self

        class Handler(LoopbackHandler):
            def answer(self, path: str) -> tuple[int, str, bytes, dict]:
                return (*monitor.answer(path), {"Content-Security-Policy": POLICY})

        self.watch, self.timeline, self.collector = watch, timeline, collector
        self.lab, self.lock = lab, lock
        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.httpd.daemon_threads = True
        self.port: int = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="http",
                                       daemon=True)

    def start(self) -> None:
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def answer(self, path: str) -> tuple[int, str, bytes]:
        url = urlparse(path)
        if url.path == "/metrics":
            with self.lock:
                body = exposition(self.collector)
            return 200, "text/plain; version=0.0.4; charset=utf-8", body
        if url.path in ("/", "/index.html"):
            return 200, TYPES[".html"], (PAGE / "index.html").read_bytes()
        if url.path.startswith("/static/"):
            file = STATIC.get(url.path.removeprefix("/static/"))
            if file is None:
                return 404, TYPES[".md"], b"not found\n"
            return 200, TYPES[file.suffix], file.read_bytes()
        if url.path == "/api/topology":
            return self._json({**self.lab, **self.watch.topology()})
        if url.path == "/api/state":
            try:
                since = float(parse_qs(url.query).get("since", ["0"])[0])
            except ValueError:
                return 400, TYPES[".md"], b"since: not a number\n"
            with self.lock:
                state = {**self.watch.latest, **self.timeline.view(since)}
                return self._json(state)
        return 404, TYPES[".md"], b"not found\n"

    @staticmethod
    def _json(data: dict) -> tuple[int, str, bytes]:
        return 200, "application/json", json.dumps(data, separators=(",", ":")).encode()
