"""HTTP for a browser on the lab's own machine (the live dashboard, the results pages):
bound to 127.0.0.1, it answers only requests addressed to it by that name or
``localhost`` with its own port (a page whose DNS name was rebound to 127.0.0.1 sends its
own name: refused with 421), none that a page of another origin sent (an ``Origin``
header of anyone else: 403), and only GET and HEAD (anything else: 405), so nothing a
web page elsewhere makes the browser send reaches the lab's handlers.

>>> allowed_hosts(8080)
('127.0.0.1:8080', 'localhost:8080')
>>> refusal({"Host": "127.0.0.1:8080"}, 8080) is None
True
>>> refusal({"Host": "attacker.example:8080"}, 8080)[0]
421
>>> refusal({"Host": "localhost:8080", "Origin": "http://attacker.example"}, 8080)[0]
403
"""

from __future__ import annotations

from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler

TEXT = "text/plain; charset=utf-8"
#: what every answer says besides its body: no sniffing a type, no framing by other pages
HEADERS = {"X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer",
           "Cross-Origin-Resource-Policy": "same-origin", "X-Frame-Options": "DENY"}
ALLOW = "GET, HEAD"


def allowed_hosts(port: int) -> tuple[str, ...]:
    """The ``Host`` values a request to this server on ``port`` may carry."""
    return (f"127.0.0.1:{port}", f"localhost:{port}")


def refusal(headers: Mapping[str, str], port: int) -> tuple[int, str] | None:
    """Why a request with ``headers`` is refused (status and a line), or None."""
    hosts = allowed_hosts(port)
    host = (headers.get("Host") or "").strip().lower()
    if host not in hosts:
        return 421, (f"this server answers only http://{hosts[0]}/ and http://{hosts[1]}/ "
                     "(through an ssh tunnel, use the same port on both ends)")
    origin = headers.get("Origin")
    if origin is not None and origin.strip().lower() not in {f"http://{h}" for h in hosts}:
        return 403, "requests from pages of other origins are refused"
    return None


class LoopbackHandler(BaseHTTPRequestHandler):
    """A request handler that checks :func:`refusal` and the method before it asks
    :meth:`answer` (path and query) for ``(status, content type, body, headers)``; the body
    is bytes, or ``(open file, size)``: streamed to the client, then closed."""

    def version_string(self) -> str:  # no versions of Python or the lab to a client
        return "testbed"

    def answer(self, path: str) -> tuple[int, str, bytes | tuple, dict]:
        raise NotImplementedError

    def do_GET(self) -> None:  # noqa: N802 (http.server's names)
        self._serve(head=False)

    def do_HEAD(self) -> None:  # noqa: N802
        self._serve(head=True)

    def _refuse_method(self) -> None:
        self._send(405, TEXT, f"{self.command} is not answered here: {ALLOW} only\n".encode(),
                   {"Allow": ALLOW}, head=False)

    do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = do_TRACE = do_CONNECT = _refuse_method

    def _serve(self, *, head: bool) -> None:
        refused = refusal(self.headers, self.server.server_address[1])
        if refused is not None:
            status, line = refused
            self._send(status, TEXT, f"{line}\n".encode(), {}, head=head)
            return
        try:
            status, ctype, body, extra = self.answer(self.path)
        except Exception as exc:  # noqa: BLE001 -- one bad request, the server lives
            status, ctype, body, extra = 500, TEXT, f"{exc}\n".encode(), {}
        self._send(status, ctype, body, extra, head=head)

    def _send(self, status: int, ctype: str, body, extra: dict, *, head: bool) -> None:
        stream, size = (None, len(body)) if isinstance(body, bytes) else body
        try:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(size))
            self.send_header("Cache-Control", "no-store")
            for key, value in {**HEADERS, **extra}.items():
                self.send_header(key, value)
            self.end_headers()
            if head:
                return
            if stream is None:
                self.wfile.write(body)
                return
            while chunk := stream.read(1 << 16):
                self.wfile.write(chunk)
        finally:
            if stream is not None:
                stream.close()

    def log_message(self, *args) -> None:
        pass
