"""The per-side forwarding process of a userspace protected link.

Run inside one namespace (``ip netns exec NS python -m testbed.macsec.forwarder
--config CFG --side a --workdir DIR``). It reads plaintext frames from the TAP,
protects them with the side's :class:`~testbed.macsec.secy.SecY` and sends them
on the veth (an AF_PACKET socket), after the link's propagation delay when it has
one (``delay_ms``: where the kernel has no netem); frames from the veth are validated
and only the delivered ones are written to the TAP. A UNIX datagram control socket in
the work directory takes JSON commands (stats, SA install/switch/removal, used
for key rotation); stats go to ``stats-SIDE.json`` every second and on SIGTERM.

The config file holds no SAK (:meth:`LinkConfig.public_dict`, it may stay in a results
folder); the SAKs come through an inherited file descriptor (``--keys-fd N``: a memfd,
no path on any file system, that :func:`key_channel` fills), never on a command line.
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
from collections import deque
from collections.abc import Callable, Iterable
from pathlib import Path

from testbed.host import netlink
from testbed.host.files import unix_address
from testbed.numbers import flag

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
TUNSETCARRIER = 0x400454E2
SIOCGIFFLAGS = 0x8913
SIOCSIFFLAGS = 0x8914
IFF_UP = 0x1
IFF_RUNNING = 0x40


def control_path(workdir: Path, side: str) -> Path:
    """Where the control socket of a side lives."""
    return workdir / f"ctl-{side}.sock"


def stats_path(workdir: Path, side: str) -> Path:
    """Where a side writes its stats JSON."""
    return workdir / f"stats-{side}.json"


def key_channel(configs: Iterable[LinkConfig]) -> int:
    """A file descriptor holding the SAKs of ``configs`` (link run id -> side -> AN ->
    hex) for a forwarder started with ``--keys-fd``: an anonymous memory file, so the keys
    are in no file a run could leave behind and on no command line. The caller passes it
    to the child (``pass_fds``) and closes its own copy once the child is started; each
    reader reads it from the start (:func:`read_keys`), so one serves several children."""
    fd = os.memfd_create("tb-macsec-keys")  # close-on-exec: only where passed
    data = json.dumps({cfg.run_id: cfg.keys_dict() for cfg in configs}).encode()
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_keys(fd: int) -> dict[str, dict[str, dict[str, str]]]:
    """The SAKs :func:`key_channel` wrote to ``fd`` (read from offset 0, leaving the
    shared offset alone); ``fd`` is closed."""
    try:
        size = os.fstat(fd).st_size
        return json.loads(os.pread(fd, size, 0) if size else b"{}")
    finally:
        os.close(fd)


def load_config(path: Path, keys: dict[str, dict[str, dict[str, str]]] | None) -> LinkConfig:
    """A link end's config file, with its SAKs from ``keys`` (:func:`read_keys`) when the
    file holds none."""
    data = json.loads(path.read_text())
    run_id = data.get("run_id")
    if keys is not None and run_id in keys:
        return LinkConfig.from_dict(data, keys=keys[run_id])
    return LinkConfig.from_dict(data)


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


def wire_state(ifname: str) -> tuple[bool, bool]:
    """``(up, running)`` of ``ifname`` now (from sysfs of this namespace)."""
    try:
        sysfs = Path(f"/sys/class/net/{ifname}")
        up = bool(int(sysfs.joinpath("flags").read_text(), 16) & IFF_UP)
        return up, up and sysfs.joinpath("operstate").read_text().strip() == "up"
    except (OSError, ValueError):
        return False, False


def set_admin(ifname: str, up: bool) -> None:
    """Set ``ifname`` administratively up or down (SIOCSIFFLAGS, in this namespace)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        req = struct.pack("16sh22x", ifname.encode(), 0)
        flags = struct.unpack("16sh22x", fcntl.ioctl(sock, SIOCGIFFLAGS, req))[1]
        flags = (flags | IFF_UP) if up else (flags & ~IFF_UP)
        fcntl.ioctl(sock, SIOCSIFFLAGS, struct.pack("16sh22x", ifname.encode(), flags))


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
        #: the link's propagation delay: protected frames wait here, in order, until due
        self.delay_s = cfg.delay_ms / 1000
        self.held: deque[tuple[float, bytes]] = deque()
        self.stop = False
        self.tap = open_tap(self.me.tap)
        self.wire = open_wire(self.me.veth)
        self.wire_index = socket.if_nametoindex(self.me.veth)
        self.state: tuple[bool, bool] | None = None  # the wire's (up, running)
        self.carrier_changes = 0
        path = control_path(workdir, side)
        path.unlink(missing_ok=True)
        self.ctl = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        with unix_address(path) as address:
            self.ctl.bind(address)
        self.ctl.setblocking(False)

    # control -------------------------------------------------------------
    def follow_wire(self, up: bool, running: bool) -> None:
        """Give the TAP the wire's state: admin up/down and carrier (TUNSETCARRIER)."""
        if (up, running) == self.state:
            return
        old_up = self.state[0] if self.state else True
        if running:  # carrier first, so that an admin up finds it
            fcntl.ioctl(self.tap, TUNSETCARRIER, struct.pack("i", 1))
        if up != old_up:
            set_admin(self.me.tap, up)
        if not running:
            fcntl.ioctl(self.tap, TUNSETCARRIER, struct.pack("i", 0))
        if self.state is not None:
            self.carrier_changes += 1
            log.info("side %s: %s %s, %s", self.side, self.me.veth, "up" if up else "down",
                     "carrier" if running else "no carrier")
        self.state = (up, running)

    def stats(self) -> dict[str, object]:
        """Forwarding counters plus the SecY's."""
        return {"side": self.side, "time": time.time(), "io": dict(self.io),
                "wire_up": self.state[0] if self.state else None,
                "carrier": self.state[1] if self.state else None,
                "carrier_changes": self.carrier_changes,
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
            if self.delay_s:
                self.held.append((time.monotonic() + self.delay_s, out))
                continue
            try:
                wire.send(out)
                io["wire_tx"] += 1
            except OSError:
                io["wire_write_errors"] += 1

    def release(self, now: float) -> float | None:
        """Send the held frames that are due; returns when the next one is (None: none)."""
        held, io = self.held, self.io
        while held and held[0][0] <= now:
            try:
                self.wire.send(held.popleft()[1])
                io["wire_tx"] += 1
            except OSError:
                io["wire_write_errors"] += 1
        return held[0][0] if held else None

    def _from_wire(self) -> None:
        io, secy, wire, tap = self.io, self.secy, self.wire, self.tap
        for _ in range(BATCH):
            try:
                frame, addr = wire.recvfrom(MAX_FRAME)
            except BlockingIOError:
                return
            except OSError:  # ENETDOWN once when the wire goes down; reading clears it
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
        serve([self], lambda: self.stop)

    def close(self) -> None:
        """Release the TAP, the sockets and the control socket path."""
        os.close(self.tap)
        self.wire.close()
        self.ctl.close()
        control_path(self.workdir, self.side).unlink(missing_ok=True)


def serve(forwarders: list[Forwarder], stopped: Callable[[], bool]) -> None:
    """One poll loop for every link end of the process, plus the carrier watch."""
    poller = select.poll()
    handlers: dict[int, Callable[[], None]] = {}
    watch = netlink.link_watch()
    by_index = {f.wire_index: f for f in forwarders}

    def on_link() -> None:
        while True:
            try:
                data = watch.recv(1 << 16)
            except BlockingIOError:
                return
            except OSError as exc:  # ENOBUFS: events lost, read the state again
                log.warning("link watch: %s", exc)
                for f in forwarders:
                    f.follow_wire(*wire_state(f.me.veth))
                continue
            for index, up, running in netlink.link_events(data):
                if index in by_index:
                    by_index[index].follow_wire(up, running)

    for f in forwarders:
        handlers[f.tap] = f._from_tap
        handlers[f.wire.fileno()] = f._from_wire
        handlers[f.ctl.fileno()] = f._serve_control
    handlers[watch.fileno()] = on_link
    for fd in handlers:
        poller.register(fd, select.POLLIN)
    for f in forwarders:  # after the watch is open, so no change is missed
        f.follow_wire(*wire_state(f.me.veth))
    next_stats = 0.0
    delayed = [f for f in forwarders if f.delay_s]
    due: float | None = None  # the next held frame's time
    try:
        while not stopped():
            wait = 200.0 if due is None else max(0.0, (due - time.monotonic()) * 1000)
            try:
                events = poller.poll(min(200.0, wait))
            except InterruptedError:
                continue
            for fd, _ in events:
                handlers[fd]()
            now = time.monotonic()
            if delayed:
                times = [t for t in (f.release(now) for f in delayed) if t is not None]
                due = min(times) if times else None
            if now >= next_stats:
                for f in forwarders:
                    f.write_stats()
                next_stats = now + 1.0
    finally:
        watch.close()
        for f in forwarders:
            f.write_stats()


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point of the forwarder."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path)
    parser.add_argument("--side", choices=["a", "b"])
    parser.add_argument("--workdir", type=Path)
    parser.add_argument("--link", nargs=3, action="append", default=[],
                        metavar=("CONFIG", "SIDE", "WORKDIR"),
                        help="serve one more link end (repeatable)")
    parser.add_argument("--keys-fd", type=flag(0, 2**31 - 1, integer=True), metavar="N",
                        help="read the links' SAKs from this inherited file descriptor "
                             "(key_channel); the config files hold none")
    args = parser.parse_args(argv)
    keys = read_keys(args.keys_fd) if args.keys_fd is not None else None
    ends = [(Path(c), s, Path(w)) for c, s, w in args.link]
    if args.config:
        if not (args.side and args.workdir):
            parser.error("--config needs --side and --workdir")
        ends.insert(0, (args.config, args.side, args.workdir))
    if not ends:
        parser.error("give --config/--side/--workdir or at least one --link")
    for _, side, _ in ends:
        if side not in ("a", "b"):
            parser.error(f"side must be a or b, got {side!r}")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    forwarders: list[Forwarder] = []
    stop = False

    def _stop(signum: int, _frame: object) -> None:
        nonlocal stop
        stop = True
        for f in forwarders:
            f.stop = True

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    try:
        for cfg_path, side, workdir in ends:
            cfg = load_config(cfg_path, keys)
            forwarders.append(Forwarder(cfg, side, workdir))
            log.info("side %s forwarding %s <-> %s", side, forwarders[-1].me.tap,
                     forwarders[-1].me.veth)
        serve(forwarders, lambda: stop)
    finally:
        for f in forwarders:
            f.close()
    for f in forwarders:
        log.info("side %s (%s) stopped: %s", f.side, f.me.tap, json.dumps(f.io))
    return 0


if __name__ == "__main__":
    sys.exit(main())
