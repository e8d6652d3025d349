"""Headless Chromium driven over the DevTools protocol on a pipe (``--remote-debugging-pipe``:
commands on the browser's fd 3, replies on its fd 4, each a JSON message ended by a NUL),
the way Playwright talks to it, with no driver and no listening socket: a page is opened,
scripts run in it, screenshots taken. The dashboard's browser test, the monitor bench
(a page open while a run is measured) and the docs' screenshots use it."""

from __future__ import annotations

import base64
import fcntl
import json
import os
import select
import shutil
import subprocess
import time
from pathlib import Path

CHROMIUM = shutil.which("chromium-headless-shell") or shutil.which("chromium")
#: what keeps a headless browser off the network and quiet (no updates, no sync, no
#: first-run pages): it reaches only the page it is given
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-quic", "--disable-extensions", "--mute-audio"]


class BrowserError(RuntimeError):
    pass


class Browser:
    """One headless Chromium with one page; ``with Browser(profile) as b: b.open(url)``."""

    def __init__(self, profile: Path, *, width: int = 1400, height: int = 1000) -> None:
        if CHROMIUM is None:
            raise BrowserError("no headless Chromium on this machine")
        to_r, to_w = os.pipe()      # our commands: the browser reads them on fd 3
        from_r, from_w = os.pipe()  # its replies: written on fd 4
        # above fd 4, so that bash can move them to 3 and 4 without clobbering either
        high = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10) for fd in (to_r, from_w)]
        for fd in (to_r, from_w):
            os.close(fd)
        argv = [CHROMIUM, *FLAGS, "--remote-debugging-pipe", f"--user-data-dir={profile}",
                f"--window-size={width},{height}", "about:blank"]
        profile.mkdir(parents=True, exist_ok=True)
        with open(profile.parent / f"{profile.name}-chromium.log", "wb") as log:
            self.proc = subprocess.Popen(
                ["bash", "-c", f'exec 3<&{high[0]} 4>&{high[1]} {high[0]}<&- {high[1]}>&-; '
                             'exec "$@"', "chromium", *argv],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log,
                pass_fds=high, start_new_session=True)
        for fd in high:
            os.close(fd)
        self.out, self.inp = to_w, from_r
        self.buffer, self.next_id, self.session = b"", 0, None

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        try:
            self.call("Browser.close", timeout=5)
        except (BrowserError, OSError):
            pass
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
        for fd in (self.out, self.inp):
            try:
                os.close(fd)
            except OSError:
                pass

    # -- the protocol ----------------------------------------------------------------
    def call(self, method: str, params: dict | None = None, *, timeout: float = 30,
             session: bool = True) -> dict:
        self.next_id += 1
        message = {"id": self.next_id, "method": method, "params": params or {}}
        if session and self.session:
            message["sessionId"] = self.session
        os.write(self.out, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            for reply in self._messages(deadline):
                if reply.get("id") == self.next_id:
                    if "error" in reply:
                        raise BrowserError(f"{method}: {reply['error']}")
                    return reply.get("result", {})

    def _messages(self, deadline: float) -> list[dict]:
        while b"\0" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise BrowserError("no reply from the browser in time")
            ready, _, _ = select.select([self.inp], [], [], left)
            if ready:
                data = os.read(self.inp, 1 << 20)
                if not data:
                    raise BrowserError("the browser closed its pipe")
                self.buffer += data
        *done, self.buffer = self.buffer.split(b"\0")
        return [json.loads(m) for m in done if m]

    # -- what a test does ------------------------------------------------------------
    def open(self, url: str) -> None:
        target = self.call("Target.createTarget", {"url": "about:blank"}, session=False)
        attached = self.call("Target.attachToTarget",
                             {"targetId": target["targetId"], "flatten": True}, session=False)
        self.session = attached["sessionId"]
        self.call("Page.enable")
        self.call("Page.navigate", {"url": url})

    def evaluate(self, expression: str):
        """The value of a JavaScript expression in the page (promises awaited)."""
        result = self.call("Runtime.evaluate", {"expression": expression,
                                                "returnByValue": True, "awaitPromise": True})
        if "exceptionDetails" in result:
            raise BrowserError(f"{expression}: {result['exceptionDetails'].get('text')}")
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout: float, interval: float = 0.1):
        """Poll ``expression`` until it is truthy; its value, or BrowserError."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = self.evaluate(expression)
            if value:
                return value
            time.sleep(interval)
        raise BrowserError(f"not true within {timeout} s: {expression}")

    def screenshot(self, path: Path) -> Path:
        data = self.call("Page.captureScreenshot", {"format": "png",
                                                    "captureBeyondViewport": True})
        path.write_bytes(base64.b64decode(data["data"]))
        return path
