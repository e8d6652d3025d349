"""Link health from OpenFlow port counters: loss of each leaf-spine link, and drains.

Pure: the controller feeds it port-stats samples, it answers which links lose more than
the threshold. A link's loss in one direction over a sampling interval is
``1 - rx / tx``, where ``tx`` is the growth of the transmit counter at one end and
``rx`` the growth of the receive counter at the other end (both from OpenFlow port
stats). Intervals with fewer than ``min_packets`` transmitted are not judged (too
little traffic to tell loss from noise). A link is drained after ``samples``
consecutive judged intervals above the threshold; drains are sticky (operations
undrain by hand), so a drained link does not flap back once traffic left it.

>>> from topologies.leafspine import build_fabric
>>> spec = build_fabric(prefix="tbdoc0", nodes=4, leaves_per_plane=2, spines_per_plane=2)
>>> mon = HealthMonitor(spec, loss_threshold=0.05, min_packets=10, samples=1)
>>> l0, s1 = "tbdoc0p0l0", "tbdoc0p0s1"
>>> mon.sample(1.0, {(l0, 4): (0, 0), (s1, 1): (0, 0)})
[]
>>> [(d.edge, d.direction, d.loss) for d in mon.sample(2.0, {(l0, 4): (100, 0), (s1, 1): (0, 80)})]
[(('tbdoc0p0l0', 'tbdoc0p0s1'), 'up', 0.2)]
>>> mon.drained
{('tbdoc0p0l0', 'tbdoc0p0s1')}
"""

from __future__ import annotations

from dataclasses import dataclass, field

from topologies.spec import FabricSpec

Edge = tuple[str, str]
#: (switch name, port number) -> (tx_packets, rx_packets)
Counters = dict[tuple[str, int], tuple[int, int]]


@dataclass(frozen=True)
class Drain:
    """A decision: ``edge`` lost ``loss`` in ``direction`` (``up`` = leaf to spine)."""

    t: float
    edge: Edge
    direction: str
    loss: float
    tx: int
    rx: int


@dataclass
class HealthMonitor:
    """Keeps the previous sample; :meth:`sample` returns the links to drain now."""

    spec: FabricSpec
    loss_threshold: float = 0.05
    min_packets: int = 50
    samples: int = 2
    drained: set[Edge] = field(default_factory=set)
    last_loss: dict[tuple[Edge, str], float] = field(default_factory=dict)
    _prev: Counters = field(default_factory=dict)
    _over: dict[tuple[Edge, str], int] = field(default_factory=dict)

    def directions(self) -> list[tuple[Edge, str, tuple[str, int], tuple[str, int]]]:
        """(edge, direction, sending end, receiving end) for both directions of every link."""
        out = []
        for lk in self.spec.links:
            if lk.kind == "uplink":
                edge = (lk.a, lk.b)
                out.append((edge, "up", (lk.a, lk.a_port), (lk.b, lk.b_port)))
                out.append((edge, "down", (lk.b, lk.b_port), (lk.a, lk.a_port)))
        return out

    def sample(self, t: float, counters: Counters) -> list[Drain]:
        """Take counters read at ``t``; return the drains this sample decided."""
        prev, self._prev = self._prev, {**self._prev, **counters}
        drains = []
        for edge, direction, sender, receiver in self.directions():
            if edge in self.drained:
                continue
            if not all(k in prev and k in counters for k in (sender, receiver)):
                continue
            tx = counters[sender][0] - prev[sender][0]
            rx = counters[receiver][1] - prev[receiver][1]
            if tx < self.min_packets:
                continue
            loss = max(0.0, round(1 - rx / tx, 4))
            key = (edge, direction)
            self.last_loss[key] = loss
            self._over[key] = self._over.get(key, 0) + 1 if loss > self.loss_threshold else 0
            if self._over[key] >= self.samples:
                self.drained.add(edge)
                drains.append(Drain(t, edge, direction, loss, tx, rx))
        return drains
