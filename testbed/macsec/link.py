"""A protected link between two network namespaces, built in userspace.

Layout (names from :class:`~testbed.macsec.config.LinkConfig`, ``R`` = run id)::

    netns tbRa                                   netns tbRb
    10.x.y.1 on TAP tbRta                        10.x.y.2 on TAP tbRtb
        |  plaintext                                 |  plaintext
    forwarder a (SecY a)                         forwarder b (SecY b)
        |  MACsec frames                             |  MACsec frames
    veth tbRva  <------------------------------>  veth tbRvb

Use it as a context manager; everything it creates is removed on exit, even
when starting fails half-way. :meth:`UserspaceLink.rotate` installs the next
AN with fresh SAKs during traffic: receive SAs first on both sides, then the
transmit switch, and the old receive SA is kept so that frames in flight are
still accepted.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

from testbed.host.files import unix_address, write_json
from testbed.host.procs import python_env

from .config import OVERHEAD, LinkConfig
from .errors import BackendError
from .forwarder import control_path, key_channel, stats_path
from .netns import (
    add_netns,
    close_uncontrolled_port,
    del_netns,
    link_stats,
    no_ipv6,
    run,
    spawn,
    stop_group,
)

#: Builds the wire between the two namespaces: creates ``a.veth`` in ``a.netns`` and
#: ``b.veth`` in ``b.netns`` (a veth pair by default, see :func:`direct_wire`).
Wire = Callable[[LinkConfig], None]

log = logging.getLogger(__name__)



def ctl_request(path: Path, msg: dict[str, object], timeout: float = 5.0) -> dict[str, object]:
    """Send one JSON command to a forwarder's control socket and return the reply."""
    with tempfile.TemporaryDirectory(prefix="tbctl") as tmp:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            sock.bind(os.path.join(tmp, "c"))
            sock.settimeout(timeout)
            with unix_address(path) as address:
                sock.sendto(json.dumps(msg).encode(), address)
            reply = json.loads(sock.recv(1 << 20))
        except OSError as exc:
            raise BackendError(f"control request {msg.get('op')} to {path} failed: {exc}") from exc
        finally:
            sock.close()
    if not reply.get("ok"):
        raise BackendError(f"control request {msg.get('op')} refused: {reply.get('error')}")
    return reply


def direct_wire(cfg: LinkConfig) -> None:
    """The default wire: one veth pair straight from namespace a to namespace b."""
    run(["ip", "link", "add", cfg.a.veth, "netns", cfg.a.netns, "type", "veth",
         "peer", "name", cfg.b.veth, "netns", cfg.b.netns])


class UserspaceLink:
    """Two namespaces joined by a veth carrying frames protected by :class:`SecY`.

    ``workdir`` holds the config, logs, control sockets and stats files; ``wire``
    builds the veths (a direct pair by default; a caller may put a bridge between).
    """

    backend = "userspace"
    #: the sides whose SecY runs here as a forwarder behind a TAP (see ``MixedLink``)
    userspace_sides = "ab"

    def __init__(self, config: LinkConfig, workdir: Path | str,
                 python: str | None = None, wire: Wire | None = None) -> None:
        self.config = config
        self.wire = wire or direct_wire
        self.workdir = Path(workdir)
        self.python = python or os.environ.get("TB_PYTHON") or _default_python()
        self.procs: dict[str, object] = {}
        self.keys: dict[str, dict[int, str]] = {s: dict(config.side(s).keys) for s in "ab"}
        self.tx_an = config.initial_an

    # lifecycle -----------------------------------------------------------
    def __enter__(self) -> UserspaceLink:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def start(self) -> None:
        """Create namespaces, interfaces and forwarders; wait until both answer."""
        try:
            self._build_namespaces()
            self._start_forwarders()
        except BaseException:
            self.stop()
            raise

    def _build_namespaces(self) -> None:
        cfg = self.config
        a, b = cfg.a, cfg.b
        for side in (a, b):
            add_netns(side.netns)
            no_ipv6(side.netns)
            close_uncontrolled_port(side.netns)
        self.wire(cfg)
        for side in (cfg.side(s) for s in self.userspace_sides):
            ns = side.netns
            run(["ip", "link", "set", side.veth, "mtu", str(cfg.mtu + OVERHEAD), "up"], netns=ns)
            run(["ip", "tuntap", "add", "dev", side.tap, "mode", "tap"], netns=ns)
            run(["ip", "link", "set", side.tap, "address", side.mac, "mtu", str(cfg.mtu),
                 "up"], netns=ns)
            run(["ip", "addr", "add", side.ip, "dev", side.tap], netns=ns)

    def _start_forwarders(self) -> None:
        """The forwarders, from ``link.json`` (no SAK in it: it stays in the workdir) and
        the SAKs through an inherited memory file (:func:`key_channel`)."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        cfg_path = self.workdir / "link.json"
        write_json(cfg_path, self.config.public_dict())
        env = python_env()
        keys = key_channel([self.config])
        try:
            for s in self.userspace_sides:
                self.procs[s] = spawn(
                    [self.python, "-m", "testbed.macsec.forwarder", "--config", str(cfg_path),
                     "--side", s, "--workdir", str(self.workdir), "--keys-fd", str(keys)],
                    self.config.side(s).netns, self.workdir / f"forwarder-{s}.log", env=env,
                    pass_fds=(keys,))
        finally:
            os.close(keys)
        deadline = time.monotonic() + 15
        for s in self.userspace_sides:
            while True:
                proc = self.procs[s]
                if proc.poll() is not None:  # type: ignore[attr-defined]
                    raise BackendError(f"forwarder {s} exited: {self.log_tail(s)}")
                try:
                    self.request(s, {"op": "ping"}, timeout=0.5)
                    break
                except BackendError as exc:
                    if time.monotonic() > deadline:
                        raise BackendError(
                            f"forwarder {s} did not start: {self.log_tail(s)}") from exc
                    time.sleep(0.1)

    def log_tail(self, side: str, n: int = 2000) -> str:
        """The end of a forwarder's log, for error messages."""
        path = self.workdir / f"forwarder-{side}.log"
        return path.read_text(errors="replace")[-n:] if path.exists() else "(no log)"

    def stop(self) -> None:
        """Stop the forwarders (process groups) and delete both namespaces."""
        for s, proc in list(self.procs.items()):
            stop_group(proc)  # type: ignore[arg-type]
            del self.procs[s]
        for side in (self.config.a, self.config.b):
            del_netns(side.netns)

    # control ---------------------------------------------------------------
    def request(self, side: str, msg: dict[str, object], timeout: float = 5.0) -> dict[str, object]:
        """Send a control command to one side's forwarder."""
        return ctl_request(control_path(self.workdir, side), msg, timeout)

    def stats(self, side: str) -> dict[str, object]:
        """Live stats of a side: ``io`` (forwarding) and ``counters`` (SecY)."""
        return self.request(side, {"op": "stats"})["stats"]  # type: ignore[return-value]

    def counters(self, side: str) -> dict[str, int]:
        """The SecY counters of one side (names as in :class:`SecYCounters`)."""
        return self.stats(side)["counters"]  # type: ignore[return-value,index]

    def saved_stats(self, side: str) -> dict[str, object]:
        """The stats JSON a forwarder last wrote (also after it stopped)."""
        return json.loads(stats_path(self.workdir, side).read_text())

    def tap_stats(self, side: str) -> dict[str, int]:
        """Kernel counters of a side's TAP (rx = frames the forwarder delivered)."""
        s = self.config.side(side)
        return link_stats(s.tap, s.netns)

    def rotate(self, keys: dict[str, str] | None = None) -> int:
        """Move both directions to the next AN with new SAKs, without losing frames.

        Returns the new AN. ``keys`` maps side -> hex SAK; random by default.
        """
        new_an = (self.tx_an + 1) % 4
        key_len = self.config.cipher_suite.key_len
        keys = keys or {s: os.urandom(key_len).hex() for s in "ab"}
        for s in "ab":  # 1: the receivers learn the peer's new SAK
            peer = "b" if s == "a" else "a"
            self.request(peer, {"op": "add_rx_sa", "an": new_an, "key": keys[s]})
        for s in "ab":  # 2: the transmitters switch; old receive SAs stay
            self.request(s, {"op": "add_tx_sa", "an": new_an, "key": keys[s], "use": True})
            self.keys[s][new_an] = keys[s]
        self.tx_an = new_an
        return new_an

    def retire(self, an: int) -> None:
        """Remove an old SA on both sides once no frame with it can be in flight."""
        for s in "ab":
            self.request(s, {"op": "del_rx_sa", "an": an})
            self.request(s, {"op": "del_tx_sa", "an": an})
            self.keys[s].pop(an, None)


def _default_python() -> str:
    import sys

    return sys.executable
