"""Priority flow control (IEEE 802.1Qbb) on the fabric's ports, by one agent process.

What a switch MAC does in silicon is done here in userspace, on real frames:

- **Congestion point.** Every ``poll_ms`` the agent reads the lossless classes' queues of
  every switch port (one netlink dump). When a class's queue at a port of switch S is
  over XOFF, S sends PAUSE for that class's priority out of the ports whose arrivals can
  leave through that port: under up-down routing an uplink is fed only by the
  downlinks, a downlink by every other port (so pauses never form a cycle, as they do
  not in a Clos fabric). The emulation has no ingress buffers, so it cannot, like an
  ASIC, pause only the ingress ports whose share of the buffer passed XOFF; it pauses
  every port that could have fed the queue, which is more head-of-line blocking. PAUSE
  is refreshed every half pause time, and taken back (a zero pause time) from a port as
  soon as every queue it feeds has fallen below XON.
- **Reaction point.** Every port (switch ports and host NICs) has a packet socket for
  EtherType 0x8808. A PAUSE received on a port stops that port's queue of the class (its
  token bucket goes to 1 kbit/s) until the pause time has passed or a zero time
  arrives. A paused host NIC queue fills and the host's sender gets ENOBUFS: the
  training's sender waits, as a RoCE NIC's QP does, and loses nothing; a kernel UDP or
  TCP socket loses what the paused queue cannot hold (its drops are the host's, not
  counted here).
- **Watchdog.** A queue paused for longer than ``watchdog_ms`` goes into drop mode for
  ``restore_ms``: it ignores PAUSE and drops what arrives for it, so a stuck receiver
  cannot hold the fabric.
- **Storms.** A host NIC listed in the run's ``storm`` folder (a file named after it)
  sends PAUSE for every lossless priority continuously: a receiver that stopped draining.

Departures from an ASIC, recorded in every run: the reaction time is milliseconds (the
poll interval, the frame's way through the kernel, a netlink call), where silicon takes
about a microsecond; at the scaled link rates (20 Mb/s: 2.5 KB a millisecond) that is a
few frames, so headroom is sized from the measured time, not from cable length.

Writes ``pfc.json`` (counters, per port and class) at SIGTERM, and as it goes
``pfc-events.jsonl`` (pause, storm and watchdog events) and ``class-telemetry.jsonl``
(every switch port's per-class bytes, drops and backlog, ten times a second).
"""

from __future__ import annotations

import argparse
import ctypes
import errno
import fcntl
import json
import os
import resource
import select
import signal
import socket
import struct
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

from testbed.fabric import qos
from testbed.host import netlink, netns
from testbed.host.netlink import Queue, QueueReader, tbf_change
from traffic import stats

ETH_P_PAUSE = 0x8808
PFC_OPCODE = 0x0101
PFC_DST = bytes.fromhex("0180c2000001")
#: Ethernet + opcode + class-enable vector + eight times, padded to the minimum frame
FRAME = struct.Struct("!6s6sHHH8H")
MIN_FRAME = 60
QUANTUM_BITS = 512
MAX_QUANTA = 0xFFFF
SOL_PACKET = 263
PACKET_QDISC_BYPASS = 20
PACKET_OUTGOING = 4
ETH_P_ALL = 0x0003
SO_ATTACH_FILTER = 26
SIOCGIFHWADDR = 0x8927
#: how often queues are read when PFC is off (per-class counters and sampled peaks)
COUNTER_POLL_S = 0.02
#: how often every port's class counters go into the class telemetry
SAMPLE_S = 0.1


def pfc_frame(src_mac: bytes, times: dict[int, int]) -> bytes:
    """A PFC frame from ``src_mac`` with pause ``times`` (quanta) per priority 0..7.

    >>> f = pfc_frame(bytes(6), {3: 0xFFFF})
    >>> len(f), f[12:16].hex(), f[16:18].hex(), f[24:26].hex()
    (60, '88080101', '0008', 'ffff')
    """
    vector = sum(1 << p for p in times)
    frame = FRAME.pack(PFC_DST, src_mac, ETH_P_PAUSE, PFC_OPCODE, vector,
                       *(times.get(p, 0) for p in range(8)))
    return frame.ljust(MIN_FRAME, b"\0")


def parse_pfc(frame: bytes) -> dict[int, int] | None:
    """Pause times (quanta) by priority of a PFC frame; None for anything else.

    >>> parse_pfc(pfc_frame(bytes(6), {3: 7, 6: 0}))
    {3: 7, 6: 0}
    """
    if len(frame) < FRAME.size:
        return None
    _, _, ethertype, opcode, vector, *times = FRAME.unpack_from(frame)
    if ethertype != ETH_P_PAUSE or opcode != PFC_OPCODE:
        return None
    return {p: times[p] for p in range(8) if vector >> p & 1}


class _Filter:
    """A classic BPF program that accepts only MAC control frames (EtherType 0x8808)."""

    def __init__(self) -> None:
        code = [(0x28, 0, 0, 12),            # ldh [12]: the EtherType
                (0x15, 0, 1, ETH_P_PAUSE),   # jeq #0x8808
                (0x06, 0, 0, 0xFFFF),        # ret #65535: accept
                (0x06, 0, 0, 0)]             # ret #0: drop
        self.buf = ctypes.create_string_buffer(b"".join(struct.pack("HBBI", *c) for c in code))
        self.program = struct.pack("HL", len(code), ctypes.addressof(self.buf))


PAUSE_FILTER = _Filter()


def quanta(seconds: float, mbps: float) -> int:
    """Pause quanta (512 bit times at the link rate) for ``seconds``, at most 65535."""
    return min(MAX_QUANTA, max(1, round(seconds * mbps * 1e6 / QUANTUM_BITS)))


@dataclass
class ClassState:
    """One lossless class of one port, as a reaction point."""

    paused_until: float = 0.0
    since: float | None = None
    paused_s: float = 0.0
    pauses: int = 0
    drop_until: float = 0.0
    watchdog_events: int = 0


@dataclass
class Port:
    """A port with traffic classes: a switch port (root namespace) or a host NIC."""

    ifname: str
    netns: str | None
    mbps: float
    switch: str | None
    peer: str
    rx: socket.socket
    tx: socket.socket
    kick: socket.socket
    netlink: socket.socket
    index: int
    mac: bytes
    classes: dict[int, ClassState] = field(default_factory=dict)  # by priority
    #: the netlink request that puts a class's queue in a state, by (priority, state)
    messages: dict[tuple[int, str], bytes] = field(default_factory=dict)
    frames_rx: int = 0
    frames_tx: int = 0
    xoff_tx: int = 0
    xon_tx: int = 0


class Agent:
    """The congestion and reaction points of every port with classes (see the module).

    ``open_port`` and ``reader`` stand in for the sockets and the netlink dump in tests.
    """

    def __init__(self, cfg: dict, open_port=None, reader=None):
        self.cfg = cfg
        # without PFC only counters are read: a sampled peak is enough, at less CPU
        self.poll_s = cfg["poll_ms"] / 1000 if cfg["pfc"] else COUNTER_POLL_S
        # what one frame can ask for: 65535 quanta, 3.4 ms at 10 Gb/s (refreshed at half)
        fastest = max((d["mbps"] for d in cfg["ports"]), default=1.0)
        self.pause_s = min(cfg["pause_ms"] / 1000, MAX_QUANTA * QUANTUM_BITS / (fastest * 1e6))
        self.watchdog_s = cfg["watchdog_ms"] / 1000
        self.restore_s = cfg["restore_ms"] / 1000
        self.mtu = cfg["mtu"]
        self.lossless = [c for c in cfg["classes"] if c["lossless"]]
        self.by_priority = {c["priority"]: c for c in self.lossless}
        self.ports: dict[str, Port] = {}
        for dev in cfg["ports"]:
            self.ports[dev["ifname"]] = (open_port or self._open)(dev)
        self.switches: dict[str, list[str]] = cfg["switches"]
        #: the ports whose arrivals can leave through a port (:func:`qos.feeders`)
        self.feeders = qos.feeders([(d["switch"], d["ifname"], d["role"])
                                    for d in cfg["ports"] if d["switch"]])
        self.reader = reader or QueueReader([p for ports in self.switches.values()
                                             for p in ports])
        #: per (switch, priority): ports sent XOFF, and when last refreshed
        self.asserted: dict[tuple[str, int], set[str]] = {}
        self.refreshed: dict[tuple[str, int], float] = {}
        #: per (switch, priority): its queues between XOFF and XON, on the way down
        self.hot: dict[tuple[str, int], set[str]] = {}
        #: per (switch port, class leaf major): highest backlog seen, last counters
        self.peak: dict[tuple[str, int], int] = {}
        self.last: dict[tuple[str, int], Queue] = {}
        self.sent_at: dict[tuple[str, int], float] = {}  # (receiving port, prio): tx time
        self.poll_gaps: list[float] = []
        self.transit: list[float] = []
        self.apply: list[float] = []
        self.events = open(cfg["events"], "a", buffering=1)
        #: class telemetry: a header line (the classes), then one line a sample
        self.samples = open(cfg["samples"], "a", buffering=1)
        self.samples.write(json.dumps({"classes": [c["name"] for c in cfg["classes"]],
                                       "fields": ["bytes", "drops", "backlog"]}) + "\n")
        self.next_sample = 0.0
        self.storm_dir = Path(cfg["storm_dir"])
        self.storming: set[str] = set()
        #: storms as they happened: port, start, stop (agent seconds)
        self.storm_log: list[dict] = []
        #: ports whose queue was paused while a storm went on, with the first time
        self.storm_paused: dict[str, float] = {}
        self.watchdog_log: list[float] = []  # when queues went into drop mode
        #: ports paused before any storm (congestion, not the storm)
        self.paused_before_storm: set[str] = set()
        self.t0 = time.monotonic()

    def _open(self, dev: dict) -> Port:
        name = dev["ifname"]

        def make():
            nl = netlink.route_socket()
            nl.settimeout(1.0)
            # every frame (a socket for 0x8808 alone gets none on a port of Open vSwitch's
            # kernel datapath: its receive hook takes them first), filtered in the kernel
            rx = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
            rx.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, PAUSE_FILTER.program)
            rx.bind((name, ETH_P_ALL))
            rx.setblocking(False)
            tx = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
            tx.setsockopt(SOL_PACKET, PACKET_QDISC_BYPASS, 1)  # MAC control: no queue
            tx.bind((name, 0))
            kick = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
            kick.bind((name, 0))
            index = socket.if_nametoindex(name)
            mac = fcntl.ioctl(rx.fileno(), SIOCGIFHWADDR, struct.pack("256s", name.encode()))
            return rx, tx, kick, nl, index, mac[18:24]

        rx, tx, kick, nl, index, mac = netns.made_in(dev["netns"], make)
        port = Port(name, dev["netns"], dev["mbps"], dev.get("switch"), dev["peer"], rx, tx,
                    kick, nl, index, mac)
        port.classes = {c["priority"]: ClassState() for c in self.lossless}
        link_bps, burst = int(port.mbps * 1e6), qos.burst(port.mbps, self.mtu)
        for c in self.lossless:
            minor, prio = c["minor"], c["priority"]
            port.messages[(prio, "paused")] = tbf_change(index, minor, qos.PAUSED_BPS, burst,
                                                         c["limit"])
            port.messages[(prio, "running")] = tbf_change(index, minor, link_bps, burst,
                                                          c["limit"])
            port.messages[(prio, "dropping")] = tbf_change(index, minor, link_bps, burst, 0)
        return port

    # -- the wire -------------------------------------------------------------------------
    def _event(self, **kw) -> None:
        self.events.write(json.dumps({"t": round(time.monotonic() - self.t0, 4), **kw}) + "\n")

    def send(self, port: Port, priority: int, seconds: float) -> None:
        q = quanta(seconds, port.mbps) if seconds > 0 else 0
        try:
            port.tx.send(pfc_frame(port.mac, {priority: q}))
        except OSError:
            return  # the link is down: nothing to pause
        port.frames_tx += 1
        if q:
            port.xoff_tx += 1
        else:
            port.xon_tx += 1
        self.sent_at[(port.peer, priority)] = time.monotonic()

    def receive(self, port: Port) -> None:
        while True:
            try:
                frame, addr = port.rx.recvfrom(2048)
            except BlockingIOError:
                return
            except OSError:  # ENETDOWN once when the port went down: reading clears it
                return
            if addr[2] == PACKET_OUTGOING:
                continue
            now = time.monotonic()
            times = parse_pfc(frame)
            if times is None:
                continue
            port.frames_rx += 1
            sent = self.sent_at.pop((port.ifname, next(iter(times), -1)), None)
            if sent is not None:
                self.transit.append(now - sent)
            for priority, q in times.items():
                if priority not in port.classes:
                    continue
                st = port.classes[priority]
                if now < st.drop_until:
                    continue  # the watchdog holds this queue in drop mode
                if q:
                    st.paused_until = now + q * QUANTUM_BITS / (port.mbps * 1e6)
                    if st.since is None:
                        self._set(port, priority, "paused")
                        st.since, st.pauses = now, st.pauses + 1
                elif st.since is not None:
                    self._resume(port, priority, now)

    def _set(self, port: Port, priority: int, state: str) -> None:
        """The port's queue of ``priority``: paused, running or dropping."""
        t = time.monotonic()
        try:
            port.netlink.send(port.messages[(priority, state)])
            error = struct.unpack_from("=i", port.netlink.recv(4096), netlink.NLMSG.size)[0]
        except OSError as exc:  # socket.timeout has no errno: no answer in a second
            error = -(exc.errno or errno.ETIMEDOUT)
        if error:  # a port that went away: record, go on
            self._event(port=port.ifname, priority=priority, failed=state,
                        error=os.strerror(-error))
            return
        if state != "paused":  # a resumed bucket sends at the next enqueue: make one
            try:
                port.kick.send(b"\xff" * 6 + port.mac + struct.pack("!H", qos.KICK_ETHERTYPE)
                               + bytes(46))
            except OSError:
                pass  # dropped by the kick class's empty FIFO, as it should be
        self.apply.append(time.monotonic() - t)
        self._event(port=port.ifname, priority=priority, state=state)
        if state == "paused" and self.storming:
            self.storm_paused.setdefault(port.ifname, round(t - self.t0, 4))
        elif state == "paused" and not self.storm_log:
            self.paused_before_storm.add(port.ifname)

    def _resume(self, port: Port, priority: int, now: float) -> None:
        st = port.classes[priority]
        self._set(port, priority, "running")
        st.paused_s += now - st.since
        st.since = None

    # -- the loop -------------------------------------------------------------------------
    def poll(self, now: float) -> None:
        leaves = self.reader.read_leaves()
        for key, q in leaves.items():  # every class's counters and peak
            self.last[key] = q
            if q.backlog_bytes > self.peak.get(key, 0):
                self.peak[key] = q.backlog_bytes
        if now >= self.next_sample:  # class telemetry: every port's classes, 10 a second
            self.next_sample = now + SAMPLE_S
            minors = [c["minor"] for c in self.cfg["classes"]]
            ports = {p: [[q.sent_bytes, q.drops, q.backlog_bytes] if q else None
                         for q in (leaves.get((p, m)) for m in minors)]
                     for ports in self.switches.values() for p in ports}
            self.samples.write(json.dumps({"t": round(now - self.t0, 3), "ports": ports},
                                          separators=(",", ":")) + "\n")
        if not self.cfg["pfc"]:
            return
        for sw, ports in self.switches.items():
            for cls in self.lossless:
                prio, major = cls["priority"], cls["minor"]
                backlog = {p: leaves[(p, major)].backlog_bytes for p in ports
                           if (p, major) in leaves}
                key = (sw, prio)
                # a queue is hot from over XOFF until below XON; the ports that feed a
                # hot queue are paused, each resumed as soon as no hot queue needs it
                # (one switch-wide XON would keep feeders of a drained queue paused while
                # another queue is full, and pauses would wait on each other in a cycle)
                hot = self.hot.setdefault(key, set())
                hot |= {p for p, b in backlog.items() if b > self.cfg["xoff"]}
                hot -= {p for p, b in backlog.items() if b <= self.cfg["xon"]}
                target = set().union(*(self.feeders[p] for p in hot))
                asserted = self.asserted.setdefault(key, set())
                gone, new = asserted - target, target - asserted
                for p in sorted(gone):
                    self.send(self.ports[p], prio, 0)
                if gone:
                    self._event(switch=sw, priority=prio, xon=sorted(gone))
                for p in sorted(new):
                    self.send(self.ports[p], prio, self.pause_s)
                if new:
                    self._event(switch=sw, priority=prio, xoff=sorted(new),
                                congested=sorted(hot))
                    if not asserted - gone:
                        self.refreshed[key] = now
                self.asserted[key] = asserted = target
                if asserted and now - self.refreshed.get(key, now) >= self.pause_s / 2:
                    for p in sorted(asserted):
                        self.send(self.ports[p], prio, self.pause_s)
                    self.refreshed[key] = now

    def timers(self, now: float) -> None:
        for port in self.ports.values():
            for prio, st in port.classes.items():
                if st.since is not None and now >= st.paused_until:
                    self._resume(port, prio, now)
                elif (st.since is not None and self.watchdog_s
                      and now - st.since >= self.watchdog_s):
                    st.paused_s += now - st.since
                    st.since, st.drop_until = None, now + self.restore_s
                    st.watchdog_events += 1
                    self.watchdog_log.append(round(now - self.t0, 4))
                    self._set(port, prio, "dropping")
                    self._event(port=port.ifname, priority=prio, watchdog="drop")
                elif st.drop_until and now >= st.drop_until:
                    st.drop_until = 0.0
                    self._set(port, prio, "running")
                    self._event(port=port.ifname, priority=prio, watchdog="restored")

    def storms(self, now: float) -> None:
        try:
            wanted = {p.name for p in self.storm_dir.iterdir()} & set(self.ports)
        except FileNotFoundError:
            wanted = set()
        for name in wanted - self.storming:
            self._event(port=name, storm="start")
            self.storm_log.append({"port": name, "start_s": round(now - self.t0, 4),
                                   "stop_s": None})
        for name in self.storming - wanted:
            self._event(port=name, storm="stop")
            for s in self.storm_log:
                if s["port"] == name and s["stop_s"] is None:
                    s["stop_s"] = round(now - self.t0, 4)
            for prio in self.by_priority:
                self.send(self.ports[name], prio, 0)
        self.storming = wanted
        for name in wanted:  # a stuck receiver repeats PAUSE long before it expires
            for prio in self.by_priority:
                self.send(self.ports[name], prio, self.pause_s)

    def run(self, stop: list[bool]) -> None:
        sockets = {p.rx.fileno(): p for p in self.ports.values()}
        poller = select.epoll()
        for fd in sockets:
            poller.register(fd, select.EPOLLIN)
        next_poll = last_poll = time.monotonic()
        next_storm = next_poll
        while not stop:
            timeout = max(0.0, next_poll - time.monotonic())
            for fd, _ in poller.poll(timeout):
                self.receive(sockets[fd])
            now = time.monotonic()
            if now >= next_poll:
                self.poll_gaps.append(now - last_poll)
                last_poll = now
                self.poll(now)
                next_poll = max(next_poll + self.poll_s, now + self.poll_s / 4)
            self.timers(now)
            if now >= next_storm:
                self.storms(now)
                next_storm = now + min(self.pause_s / 4, 0.02)

    def release_all(self) -> None:
        """Every paused or dropping queue back to running (the agent is ending)."""
        now = time.monotonic()
        for port in self.ports.values():
            for prio, st in port.classes.items():
                if st.since is not None:
                    self._resume(port, prio, now)
                elif st.drop_until:
                    st.drop_until = 0.0
                    self._set(port, prio, "running")

    # -- the record -----------------------------------------------------------------------
    def summary(self) -> dict:
        now = time.monotonic()
        ports = {}
        for port in self.ports.values():
            classes = {}
            for cls in self.cfg["classes"]:
                key = (port.ifname, cls["minor"])
                if key in self.last:
                    classes[cls["name"]] = {"bytes": self.last[key].sent_bytes,
                                            "drops": self.last[key].drops,
                                            "peak_backlog_bytes": self.peak.get(key, 0)}
            for prio, st in port.classes.items():
                paused = st.paused_s + (now - st.since if st.since is not None else 0)
                classes.setdefault(self.by_priority[prio]["name"], {}).update(
                    paused_s=round(paused, 4), pauses=st.pauses,
                    watchdog_events=st.watchdog_events)
            ports[port.ifname] = {"switch": port.switch, "frames_rx": port.frames_rx,
                                  "frames_tx": port.frames_tx, "xoff_tx": port.xoff_tx,
                                  "xon_tx": port.xon_tx, "classes": classes}
        kicks = {p: q.drops for (p, major), q in self.last.items()
                 if major == qos.KICK_MINOR and q.drops}
        return {"ports": ports, "kick_drops": kicks,
                "storms": self.storm_log, "storm_paused": self.storm_paused,
                "paused_before_storm": sorted(self.paused_before_storm),
                "watchdog_log": self.watchdog_log,
                "reaction": {
            "poll_gap_ms": _spread(self.poll_gaps), "frame_transit_ms": _spread(self.transit),
            "apply_ms": _spread(self.apply)}}


def _spread(values: list[float]) -> dict:
    """How many, p50, p99 and max in ms (:func:`traffic.stats.summary`; None for none)."""
    ms = stats.summary([v * 1000 for v in values], (50, 99))
    return {"n": len(values), **(ms or {"p50": None, "p99": None, "max": None})}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m testbed.fabric.pfc",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("--config", required=True, type=Path)
    args = ap.parse_args(argv)
    cfg = json.loads(args.config.read_text())
    stop: list[bool] = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
    signal.signal(signal.SIGINT, lambda *_: stop.append(True))
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)  # four sockets a port
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    agent = Agent(cfg)
    Path(cfg["ready"]).write_text("ready\n")
    error = None
    try:
        agent.run(stop)
    except Exception:  # recorded in pfc.json (the run reports it), then re-raised
        error = traceback.format_exc(limit=4)
        raise
    finally:
        agent.release_all()  # no queue stays paused or dropping after the agent
        record = agent.summary()
        if error:
            record["error"] = error
        Path(cfg["out"]).write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
