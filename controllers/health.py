"""Link health from active link probes: loss of each switch-to-switch link, and drains.

Why probes and not port counters: on a veth, a frame dropped on its way out (a
degraded link: nftables egress here, a bad optic in the field) is counted neither as
sent at one end nor as received at the other, so ``1 - rx/tx`` from OpenFlow port
stats stays 0 (measured: 50 % loss injected, the leaf's tx and the spine's rx both
103). So the controller sends ``probes`` small frames per link direction and interval
(OpenFlow packet-out on one end; a flow on the other end returns them as packet-in)
and counts what arrives, the way BFD-style link monitors do.

Pure: the controller feeds it counts, it answers which links to drain. A link
direction's loss over the last ``samples`` intervals is ``1 - received / sent``; when
it exceeds ``loss_threshold`` (with at least ``min_packets`` probes in the window) the
link is drained. Drains are sticky (operations undrain by hand), so a drained link
does not flap back once traffic has left it. Two guards keep the monitor from doing
harm: it never drains a switch's last undrained uplink (the link's lower-tier end: a
leaf's last uplink), and when more than half of the
links look lossy in the same sample it drains nothing (a fabric-wide loss is the
measurement failing, e.g. an overloaded controller, not every link at once).

>>> from topologies.leafspine import build_fabric
>>> spec = build_fabric(prefix="tbdoc0", nodes=4, leaves_per_plane=2, spines_per_plane=2)
>>> mon = HealthMonitor(spec, loss_threshold=0.05, min_packets=10, samples=2)
>>> edge = ("tbdoc0p0l0", "tbdoc0p0s1")
>>> mon.sample(1.0, {(edge, "up"): (10, 10)})
[]
>>> [(d.edge, d.direction, d.loss) for d in mon.sample(2.0, {(edge, "up"): (10, 6)})]
[(('tbdoc0p0l0', 'tbdoc0p0s1'), 'up', 0.2)]
>>> mon.drained
{('tbdoc0p0l0', 'tbdoc0p0s1')}
"""

from __future__ import annotations

import struct
from collections import deque
from dataclasses import dataclass, field

from topologies.spec import FabricSpec

Edge = tuple[str, str]
Direction = tuple[Edge, str]  # (edge, "up" = lower to higher tier, or "down")
#: Ethernet type of link probes (IEEE 802 local experimental)
PROBE_ETHERTYPE = 0x88B5
PROBE = struct.Struct("!6s6sH4sHBI")  # dst, src, type, magic, link index, direction, seq
PROBE_MAGIC = b"TBLP"
PROBE_DST = bytes.fromhex("027462000001")  # locally administered unicast


def encode_probe(link: int, up: bool, seq: int) -> bytes:
    """A link probe frame (padded to the Ethernet minimum).

    >>> decode_probe(encode_probe(3, True, 7))
    (3, True, 7)
    """
    frame = PROBE.pack(PROBE_DST, bytes(6), PROBE_ETHERTYPE, PROBE_MAGIC, link, int(up), seq)
    return frame.ljust(60, b"\0")


def decode_probe(data: bytes) -> tuple[int, bool, int] | None:
    if len(data) < PROBE.size:
        return None
    _, _, etype, magic, link, up, seq = PROBE.unpack_from(data)
    if etype != PROBE_ETHERTYPE or magic != PROBE_MAGIC:
        return None
    return link, bool(up), seq


@dataclass(frozen=True)
class Drain:
    """A decision: ``edge`` lost ``loss`` in ``direction`` (``up`` = from the lower
    tier, e.g. leaf to spine)."""

    t: float
    edge: Edge
    direction: str
    loss: float
    sent: int
    received: int


@dataclass
class HealthMonitor:
    """Keeps the last ``samples`` intervals per link direction; :meth:`sample` decides."""

    spec: FabricSpec
    loss_threshold: float = 0.05
    min_packets: int = 20
    samples: int = 2
    drained: set[Edge] = field(default_factory=set)
    last_loss: dict[Direction, float] = field(default_factory=dict)
    suspect_samples: int = 0
    _window: dict[Direction, deque] = field(default_factory=dict)

    def links(self) -> list[Edge]:
        """Every fabric (switch-to-switch) link, in spec order (the probe's link index)."""
        return [(lk.a, lk.b) for lk in self.spec.links if lk.kind == "fabric"]

    def sample(self, t: float, counts: dict[Direction, tuple[int, int]]) -> list[Drain]:
        """Take one interval's (sent, received) per link direction; return new drains."""
        lossy = self._judge(t, counts)
        if len({d.edge for d in lossy}) > max(1, len(self.links()) // 2):
            self.suspect_samples += 1
            return []
        drains = []
        for d in lossy:
            low = d.edge[0]  # the lower-tier end: keep at least one of its uplinks
            left = [e for e in self.links() if e[0] == low and e not in self.drained]
            if d.edge in self.drained or left == [d.edge]:
                continue
            self.drained.add(d.edge)
            for key in [k for k in self.last_loss if k[0] == d.edge]:
                del self.last_loss[key]
            drains.append(d)
        return drains

    def _judge(self, t: float, counts: dict[Direction, tuple[int, int]]) -> list[Drain]:
        lossy = []
        for key, (sent, received) in counts.items():
            window = self._window.setdefault(key, deque(maxlen=self.samples))
            window.append((sent, received))
            edge, direction = key
            total = sum(s for s, _ in window)
            if edge in self.drained or total < self.min_packets:
                continue
            got = sum(r for _, r in window)
            loss = max(0.0, round(1 - got / total, 4))
            self.last_loss[key] = loss
            if loss > self.loss_threshold:
                lossy.append(Drain(t, edge, direction, loss, total, got))
        return lossy
