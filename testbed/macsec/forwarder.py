"""The per-side forwarding process of a userspace protected link.

Run inside one namespace (``ip netns exec NS python -m testbed.macsec.forwarder
--config CFG --side a --workdir DIR``). It reads plaintext frames from the TAP,
protects them with the side's :class:`~testbed.macsec.secy.SecY` and sends them
on the veth (an AF_PACKET socket); frames from the veth are validated and only
the delivered ones are written to the TAP. A UNIX datagram control socket in
the work directory takes JSON commands (stats, SA install/switch/removal, used
for key rotation); stats go to ``stats-SIDE.json`` every second and on SIGTERM.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import logging
import os
import select
import signal
import socket
import struct
import sys
import time
from pathlib import Path

from .config import LinkConfig
from .errors import MacsecError
from .secy import SecY

log = logging.getLogger("testbed.macsec.forwarder")

TUNSETIFF = 0x400454CA
IFF_TAP = 0x0002
IFF_NO_PI = 0x1000
ETH_P_ALL = 0x0003
SOL_PACKET = 263
SO_SNDBUFFORCE = 32
SO_RCVBUFFORCE = 33
PACKET_IGNORE_OUTGOING = 23
PACKET_OUTGOING = 4
BATCH = 64
MAX_FRAME = 65536 + 64


def control_path(workdir: Path, side: str) -> Path:
    """Where the control socket of a side lives."""
    return workdir / f"ctl-{side}.sock"


def stats_path(workdir: Path, side: str) -> Path:
    """Where a side writes its stats JSON."""
    return workdir / f"stats-{side}.json"


def open_tap(name: str) -> int:
    """Attach to an existing TAP device; return a non-blocking fd."""
    fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK)
    fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", name.encode(), IFF_TAP | IFF_NO_PI))
    return fd


def open_wire(ifname: str) -> socket.socket:
    """A raw AF_PACKET socket on the veth that does not see its own transmissions."""
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    sock.setsockopt(SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)
    for opt in (SO_RCVBUFFORCE, SO_SNDBUFFORCE):
        sock.setsockopt(socket.SOL_SOCKET, opt, 8 << 20)
    sock.bind((ifname, ETH_P_ALL))
    sock.setblocking(False)
    return sock


def build_secy(cfg: LinkConfig, side: str) -> SecY:
    """The SecY of one side, with its transmit SAs and the peer's receive SAs."""
    me, peer = cfg.side(side), cfg.peer(side)
    salt = bytes.fromhex(cfg.salt) if cfg.salt else None
    secy = SecY(bytes.fromhex(me.sci), cfg.suite, encrypt=cfg.encrypt,
                validate=cfg.validate, replay_protect=cfg.replay_protect,
                replay_window=cfg.replay_window)
    for an, key in sorted(me.keys.items()):
        secy.add_tx_sa(an, bytes.fromhex(key), ssci=me.ssci, salt=salt, use=False)
    for an, key in sorted(peer.keys.items()):
        secy.add_rx_sa(bytes.fromhex(peer.sci), an, bytes.fromhex(key), ssci=peer.ssci, salt=salt)
    secy.set_encoding_sa(cfg.initial_an)
    return secy


class Forwarder:
    """The poll loop between one TAP and one veth, plus its control socket."""

    def __init__(self, cfg: LinkConfig, side: str, workdir: Path) -> None:
        self.cfg, self.side, self.workdir = cfg, side, workdir
        self.me, self.peer = cfg.side(side), cfg.peer(side)
        self.salt = bytes.fromhex(cfg.salt) if cfg.salt else None
        self.secy = build_secy(cfg, side)
        self.io = {"tap_rx": 0, "tap_tx": 0, "wire_rx": 0, "wire_tx": 0,
                   "tx_errors": 0, "tap_write_errors": 0, "wire_write_errors": 0}
        self.stop = False
        self.tap = open_tap(self.me.tap)
        self.wire = open_wire(self.me.veth)
        path = control_path(workdir, side)
        path.unlink(missing_ok=True)
        self.ctl = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.ctl.bind(str(path))
        self.ctl.setblocking(False)

    # control -------------------------------------------------------------
    def stats(self) -> dict[str, object]:
        """Forwarding counters plus the SecY's."""
        return {"side": self.side, "time": time.time(), "io": dict(self.io),
                **self.secy.stats()}

    def write_stats(self) -> None:
        """Atomically replace the stats JSON file."""
        path = stats_path(self.workdir, self.side)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.stats()))
        os.replace(tmp, path)

    def command(self, msg: dict[str, object]) -> dict[str, object]:
        """Apply one control command; see the module docstring."""
        op = msg.get("op")
        an = int(msg.get("an", 0))  # type: ignore[call-overload]
        key = bytes.fromhex(str(msg.get("key", "")))
        pn = int(msg.get("pn", 1))  # type: ignore[call-overload]
        if op == "ping":
            return {"ok": True}
        if op == "stats":
            return {"ok": True, "stats": self.stats()}
        if op == "add_rx_sa":
            self.secy.add_rx_sa(bytes.fromhex(self.peer.sci), an, key, pn,
                                ssci=self.peer.ssci, salt=self.salt)
        elif op == "add_tx_sa":
            self.secy.add_tx_sa(an, key, pn, ssci=self.me.ssci, salt=self.salt,
                                use=bool(msg.get("use", False)))
        elif op == "use_tx_sa":
            self.secy.set_encoding_sa(an)
        elif op == "del_rx_sa":
            self.secy.remove_rx_sa(bytes.fromhex(self.peer.sci), an)
        elif op == "del_tx_sa":
            self.secy.remove_tx_sa(an)
        else:
            return {"ok": False, "error": f"unknown op {op!r}"}
        return {"ok": True, "encoding_an": self.secy.encoding_an}

    def _serve_control(self) -> None:
        while True:
            try:
                data, addr = self.ctl.recvfrom(65536)
            except BlockingIOError:
                return
            try:
                reply = self.command(json.loads(data))
            except (MacsecError, ValueError, TypeError) as exc:
                reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
            if addr:
                try:
                    self.ctl.sendto(json.dumps(reply).encode(), addr)
                except OSError as exc:
                    log.warning("control reply to %s failed: %s", addr, exc)

    # data path -----------------------------------------------------------
    def _from_tap(self) -> None:
        io, secy, wire, tap = self.io, self.secy, self.wire, self.tap
        for _ in range(BATCH):
            try:
                frame = os.read(tap, MAX_FRAME)
            except BlockingIOError:
                return
            io["tap_rx"] += 1
            try:
                out = secy.protect(frame)
            except MacsecError:
                io["tx_errors"] += 1
                continue
            try:
                wire.send(out)
                io["wire_tx"] += 1
            except OSError:
                io["wire_write_errors"] += 1

    def _from_wire(self) -> None:
        io, secy, wire, tap = self.io, self.secy, self.wire, self.tap
        for _ in range(BATCH):
            try:
                frame, addr = wire.recvfrom(MAX_FRAME)
            except BlockingIOError:
                return
            if addr[2] == PACKET_OUTGOING:
                continue
            io["wire_rx"] += 1
            plain = secy.validate(frame)
            if plain is None:
                continue
            try:
                os.write(tap, plain)
                io["tap_tx"] += 1
            except OSError:
                io["tap_write_errors"] += 1

    def run(self) -> None:
        """Forward until SIGTERM/SIGINT; write stats periodically and at the end."""
        poller = select.poll()
        tap_fd, wire_fd, ctl_fd = self.tap, self.wire.fileno(), self.ctl.fileno()
        for fd in (tap_fd, wire_fd, ctl_fd):
            poller.register(fd, select.POLLIN)
        next_stats = 0.0
        self.write_stats()
        while not self.stop:
            try:
                events = poller.poll(200)
            except InterruptedError:
                continue
            for fd, _ in events:
                if fd == tap_fd:
                    self._from_tap()
                elif fd == wire_fd:
                    self._from_wire()
                else:
                    self._serve_control()
            now = time.monotonic()
            if now >= next_stats:
                self.write_stats()
                next_stats = now + 1.0
        self.write_stats()

    def close(self) -> None:
        """Release the TAP, the sockets and the control socket path."""
        os.close(self.tap)
        self.wire.close()
        self.ctl.close()
        control_path(self.workdir, self.side).unlink(missing_ok=True)


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point of the forwarder."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, type=Path)
    parser.add_argument("--side", required=True, choices=["a", "b"])
    parser.add_argument("--workdir", required=True, type=Path)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    cfg = LinkConfig.from_dict(json.loads(args.config.read_text()))
    fwd = Forwarder(cfg, args.side, args.workdir)

    def _stop(signum: int, _frame: object) -> None:
        fwd.stop = True

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    log.info("side %s forwarding %s <-> %s", args.side, fwd.me.tap, fwd.me.veth)
    try:
        fwd.run()
    finally:
        fwd.close()
    log.info("side %s stopped: %s", args.side, json.dumps(fwd.io))
    return 0


if __name__ == "__main__":
    sys.exit(main())
