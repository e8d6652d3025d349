"""Node health during a run: every NIC of each watched node probed to its leaf and back,
its error counters read, and the rule that declares a node degraded.

Probes: each leaf reflects frames of ethertype 0x88B6 (IEEE 802 local experimental 2)
that arrive on a watched node's port back out of that port (one flow per port, the
loop's cookie, above every route; removed at the end). Every NIC sends
:data:`PROBE_HZ` probes a second from a packet socket in its node's namespace; both
the send and the reflection are read by this process, so a round trip is timed on one
clock. The probes cross the NIC's cable both ways and wait in the same queues as the
node's traffic. NIC errors: the receive and transmit errors of the node's interfaces
(``/proc/PID/net/dev`` of its namespace; a veth pair never raises them, a real NIC's
bad cable does).

Rule, per window of :data:`WINDOW_S` (a probe not back within :data:`GRACE_S` of its
window's end is lost):

* a NIC is *bad* in a window when it lost at least :data:`LOSS_MAX` of its probes, or
  its median round trip exceeds what the two queues on the way can add when full
  (``2 x queue_kb x 8 / link rate``), twice the spec's link delay and
  :data:`LATENCY_MARGIN_MS` (:func:`latency_max_ms`: a congested but healthy NIC stays
  under it), or its error counters rose;
* a node is *degraded* when it has a bad NIC in :data:`CONFIRM` windows in a row;
* when more than half of the watched nodes are bad in one window, that is the fabric
  or the machine, not a node: no one is declared for it.

A degraded node is declared once (its record: when, which NIC, the window's figures);
the caller decides what to do (:mod:`testbed.operations.replace`).
"""

from __future__ import annotations

import select
import socket
import statistics
import struct
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from scapy.layers.l2 import Ether
from scapy.packet import Raw

from testbed.host import netns
from topologies.spec import FabricSpec

ETH_P_HEALTH = 0x88B6
MAGIC = b"TBHL"
HEADER = struct.Struct("!4sII")  # magic, loop id, sequence number
FRAME_BYTES = 64
COOKIE = 0x4EA17
PRIORITY = 61000  # above the routes and the acceptance check's pins
PACKET_OUTGOING = 4
PROBE_HZ = 20
WINDOW_S = 1.0
GRACE_S = 0.25
LOSS_MAX = 0.05
LATENCY_MARGIN_MS = 5.0
CONFIRM = 2


@dataclass(frozen=True)
class Nic:
    """One watched NIC: its node (short name), interface, MAC, the namespace that holds
    it, and the leaf port it is cabled to."""

    node: str
    host: str  # the full host name
    ifname: str
    mac: str
    netns: str
    leaf: str
    leaf_port: int
    label: str = ""  # the interface's short name, as reports give it

    @property
    def name(self) -> str:
        return f"{self.node}:{self.label or self.ifname}"


def nics(spec: FabricSpec, nodes: Sequence[str], host_pid: Callable[[str], int]) -> list[Nic]:
    """Every NIC of the watched ``nodes`` (short names), from the spec's host cables."""
    from topologies.spec import short
    out = []
    for lk in spec.links:
        if lk.kind != "host" or short(spec, lk.a) not in nodes:
            continue
        intf = spec.host(lk.a).interface_by_name(lk.a_intf)
        out.append(Nic(short(spec, lk.a), lk.a, lk.a_intf, intf.mac,
                       f"/proc/{host_pid(lk.a)}/ns/net", lk.b, lk.b_port,
                       short(spec, lk.a_intf)))
    return out


def latency_max_ms(spec: FabricSpec) -> float:
    """The round trip a healthy NIC stays under: both full queues on the way (the NIC's
    and its leaf port's), the cable's delay both ways, and a margin.

    >>> from topologies.leafspine import build_fabric
    >>> latency_max_ms(build_fabric(prefix="tbdoc0", nodes=4, link_mbps=20, queue_kb=64))
    57.4
    """
    queue_ms = spec.queue_kb * 1024 * 8 / (spec.link_mbps * 1e6) * 1e3
    return round(2 * queue_ms + 2 * spec.delay_ms + LATENCY_MARGIN_MS, 1)


@dataclass
class Window:
    """One NIC's figures over one window."""

    sent: int = 0
    rtts_ms: list[float] = field(default_factory=list)
    errors: int = 0

    def loss(self) -> float:
        return 1 - len(self.rtts_ms) / self.sent if self.sent else 0.0

    def median_ms(self) -> float | None:
        return round(statistics.median(self.rtts_ms), 3) if self.rtts_ms else None

    def figures(self) -> dict:
        return {"sent": self.sent, "received": len(self.rtts_ms),
                "loss": round(self.loss(), 4), "rtt_ms": self.median_ms(),
                "errors": self.errors}


class Rule:
    """The rule of the module's docstring, fed one window of every NIC at a time.

    >>> r = Rule(latency_max_ms=50)
    >>> ok, lossy = Window(20, [1.0] * 20), Window(20, [1.0] * 15)
    >>> r.feed({"n0:a": ("n0", ok), "n1:a": ("n1", lossy), "n2:a": ("n2", ok)})
    []
    >>> [d["node"] for d in r.feed({"n0:a": ("n0", ok), "n1:a": ("n1", lossy),
    ...                             "n2:a": ("n2", ok)})]
    ['n1']
    >>> r.feed({"n0:a": ("n0", ok), "n1:a": ("n1", lossy), "n2:a": ("n2", ok)})  # once
    []
    >>> slow = Window(20, [80.0] * 20)
    >>> r2 = Rule(latency_max_ms=50)
    >>> _ = r2.feed({"n0:a": ("n0", slow), "n1:a": ("n1", slow), "n2:a": ("n2", ok)})
    >>> r2.feed({"n0:a": ("n0", slow), "n1:a": ("n1", slow), "n2:a": ("n2", ok)})  # most
    []
    """

    def __init__(self, latency_max_ms: float, loss_max: float = LOSS_MAX,
                 confirm: int = CONFIRM) -> None:
        self.latency_max_ms = latency_max_ms
        self.loss_max = loss_max
        self.confirm = confirm
        self.streak: dict[str, int] = {}  # node -> bad windows in a row
        self.declared: set[str] = set()

    def bad(self, w: Window) -> str | None:
        """Why one NIC's window is bad (None: it is not)."""
        if w.sent and w.loss() >= self.loss_max:
            return f"lost {w.loss():.0%} of its probes to its leaf (at most {self.loss_max:.0%})"
        median = w.median_ms()
        if median is not None and median > self.latency_max_ms:
            return (f"round trip to its leaf {median:g} ms (at most "
                    f"{self.latency_max_ms:g} ms: full queues and the cable)")
        if w.errors:
            return f"{w.errors} NIC errors"
        return None

    def feed(self, windows: dict[str, tuple[str, Window]]) -> list[dict]:
        """One window: ``{nic: (node, figures)}``; returns the nodes declared now."""
        reasons: dict[str, tuple[str, str, Window]] = {}
        nodes = {node for node, _ in windows.values()}
        for nic, (node, w) in windows.items():
            why = self.bad(w)
            if why and node not in reasons:
                reasons[node] = (nic, why, w)
        if len(reasons) * 2 > len(nodes):  # the fabric or the machine, not a node
            self.streak.clear()
            return []
        for node in nodes:
            self.streak[node] = self.streak.get(node, 0) + 1 if node in reasons else 0
        now = []
        for node, (nic, why, w) in sorted(reasons.items()):
            if self.streak[node] >= self.confirm and node not in self.declared:
                self.declared.add(node)
                now.append({"node": node, "nic": nic, "reason": why, **w.figures()})
        return now


def nic_errors(pid: int) -> dict[str, int]:
    """Receive and transmit errors of every interface in process ``pid``'s namespace.

    >>> sample = ("Inter-|   Receive  |  Transmit\\n face |bytes packets errs drop\\n"
    ...           "  n0p0r0: 10 2 3 0 0 0 0 0 20 4 5 0 0 0 0 0\\n")
    >>> parse_dev(sample)
    {'n0p0r0': 8}
    """
    with open(f"/proc/{pid}/net/dev", encoding="ascii") as f:
        return parse_dev(f.read())


def parse_dev(text: str) -> dict[str, int]:
    out = {}
    for line in text.splitlines()[2:]:
        name, _, rest = line.partition(":")
        cols = rest.split()
        if len(cols) >= 11:
            out[name.strip()] = int(cols[2]) + int(cols[10])  # rx errs, tx errs
    return out


class Reflect:
    """The leaves' flows that send each watched NIC's probes back out of its port."""

    def __init__(self, watched: Sequence[Nic], ofctl: Callable[[str], str]) -> None:
        self.rules: dict[str, list[str]] = {}
        for n in watched:
            self.rules.setdefault(n.leaf, []).append(
                f"cookie={COOKIE:#x},priority={PRIORITY},in_port={n.leaf_port},"
                f"dl_type={ETH_P_HEALTH:#06x},actions=in_port")
        self.ofctl = ofctl

    def install(self) -> None:
        try:
            for leaf, lines in self.rules.items():
                subprocess.run(["ovs-ofctl", "-O", "OpenFlow13", "add-flows",
                                self.ofctl(leaf), "-"], input="\n".join(lines) + "\n",
                               text=True, check=True, capture_output=True, timeout=30)
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired):
            self.remove()
            raise

    def remove(self) -> None:
        for leaf in self.rules:
            subprocess.run(["ovs-ofctl", "-O", "OpenFlow13", "del-flows", self.ofctl(leaf),
                            f"cookie={COOKIE:#x}/-1"], capture_output=True, timeout=30)


class HealthLoop(threading.Thread):
    """Probe every watched NIC, judge each window with :class:`Rule`, and call
    ``declare(record)`` for each node declared degraded (in this thread)."""

    def __init__(self, watched: Sequence[Nic], pids: dict[str, int], rule: Rule,
                 declare: Callable[[dict], None], loop_id: int = 0) -> None:
        super().__init__(name="node-health", daemon=True)
        self.watched = list(watched)
        self.pids = pids  # node -> a pid in its namespace
        self.rule = rule
        self.declare = declare
        self.loop_id = loop_id & 0xFFFFFFFF
        self.stopping = threading.Event()
        self.t0 = 0.0
        self.windows: list[dict] = []  # every window's figures, for the record
        self.error: str | None = None
        self._socks: list[socket.socket] = []
        self._sent: list[dict[int, float]] = [{} for _ in self.watched]
        self._rtt: list[dict[int, float]] = [{} for _ in self.watched]

    def _frame(self, n: Nic) -> bytearray:
        head = HEADER.pack(MAGIC, self.loop_id, 0)
        pad = bytes(max(0, FRAME_BYTES - 14 - len(head)))
        return bytearray(bytes(Ether(dst=n.mac, src=n.mac, type=ETH_P_HEALTH)
                               / Raw(head + pad)))

    def _drain(self) -> None:
        now = time.monotonic()
        for i, s in enumerate(self._socks):
            while True:
                try:
                    data, addr = s.recvfrom(256)
                except OSError:  # nothing more now (or the interface went away)
                    break
                if addr[2] == PACKET_OUTGOING or len(data) < 14 + HEADER.size:
                    continue
                magic, loop_id, seq = HEADER.unpack_from(data, 14)
                if magic == MAGIC and loop_id == self.loop_id and seq in self._sent[i]:
                    self._rtt[i].setdefault(seq, now - self._sent[i][seq])

    def _errors(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for node, pid in self.pids.items():
            try:
                for ifname, errs in nic_errors(pid).items():
                    out[f"{node}:{ifname}"] = errs
            except OSError:
                pass
        return out

    def _window(self, k: int, per: int, errors_before: dict, errors_now: dict) -> None:
        windows = {}
        for i, n in enumerate(self.watched):
            key = f"{n.node}:{n.ifname}"
            seqs = range(k * per, (k + 1) * per)
            w = Window(sent=sum(1 for s in seqs if s in self._sent[i]),
                       rtts_ms=[self._rtt[i][s] * 1e3 for s in seqs if s in self._rtt[i]],
                       errors=max(0, errors_now.get(key, 0) - errors_before.get(key, 0)))
            windows[n.name] = (n.node, w)
        self.windows.append({"t_s": round((k + 1) * WINDOW_S, 2),
                             **{nic: w.figures() for nic, (_, w) in windows.items()}})
        for record in self.rule.feed(windows):
            self.declare({"declared_s": round(time.time() - self.t0, 3),
                          "declared_at": time.time(), **record})

    def run(self) -> None:
        try:
            self._socks = [netns.packet_socket(n.netns, n.ifname, ETH_P_HEALTH)
                           for n in self.watched]
            frames = [self._frame(n) for n in self.watched]
            per = round(WINDOW_S * PROBE_HZ)
            # a probe slower than the rule allows is late, not lost: wait that long too
            grace = round(max(GRACE_S, self.rule.latency_max_ms / 1e3) * PROBE_HZ)
            self.t0 = time.time()
            start = time.monotonic()
            errors = [self._errors()]
            seq, judged = 0, 0
            while not self.stopping.is_set():
                for i, (s, f) in enumerate(zip(self._socks, frames, strict=True)):
                    struct.pack_into("!I", f, 14 + 8, seq)
                    self._sent[i][seq] = time.monotonic()
                    try:
                        s.send(f)
                    except OSError:
                        pass  # a full queue or a dead link: the probe is lost
                seq += 1
                next_at = start + seq / PROBE_HZ
                while (left := next_at - time.monotonic()) > 0 and not self.stopping.is_set():
                    if select.select(self._socks, [], [], left)[0]:  # woken by reflections
                        self._drain()
                if seq >= (judged + 1) * per + grace:
                    errors.append(self._errors())
                    self._window(judged, per, errors[-2], errors[-1])
                    judged += 1
        except Exception as exc:  # noqa: BLE001 -- the run goes on; the record says why
            self.error = f"{type(exc).__name__}: {exc}"
        finally:
            for s in self._socks:
                s.close()

    def stop(self) -> None:
        self.stopping.set()
        self.join(timeout=5)
