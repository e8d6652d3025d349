"""DCQCN: the reaction point's rate law (sender side) and the notification point's pacing.

Zhu et al., "Congestion Control for Large-Scale RDMA Deployments" (SIGCOMM 2015), as
RoCE NICs implement it.  The sender keeps a current rate ``Rc``, a target rate ``Rt``
and an estimate ``alpha`` of how congested the path is:

- on a CNP: ``Rt = Rc``, ``Rc = Rc * (1 - alpha/2)``, ``alpha = (1-g)*alpha + g``, and the
  increase machinery starts over;
- every ``alpha_timer_us`` without a CNP: ``alpha = (1-g)*alpha``;
- a rate-increase event happens every ``timer_us`` (timer stage ``T``) and every
  ``byte_counter_kb`` sent (byte stage ``BC``); on each one
  fast recovery while ``max(T, BC) < F``: ``Rc = (Rt + Rc)/2``;
  hyper increase once ``min(T, BC) > F``: ``Rt += i * Rhai`` with ``i = min(T, BC) - F``;
  additive increase otherwise: ``Rt += Rai``; then ``Rc = (Rt + Rc)/2``.

Rates stay within ``[min_rate_mbps, line rate]``.  Everything here is pure: time is
passed in (seconds, any monotonic origin), so the law is unit-tested with synthetic
CNP sequences.

The defaults are not the paper's. The paper runs 40 Gb/s NICs with ``g = 1/256`` and
55 us rate-increase and alpha timers. The sender here is a Python loop with millisecond
resolution on 20 Mb/s links, so the timers are 2 ms (about 36 times longer) and the
byte counter and rate steps are sized for those links. With 2 ms alpha steps,
``g = 1/256`` would make alpha settle over about 256 x 2 ms = 0.5 s, longer than a
training iteration; ``g = 1/16`` brings that back to 16 x 2 ms = 32 ms, the same order
as the paper's 256 x 55 us = 14 ms. Set ``training.dcqcn.g: 0.00390625`` for the
paper's value.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

#: rate-increase events handled per ``advance`` at most: after a long idle the rate has
#: long since reached the line rate, and the loop must not spin.
MAX_EVENTS = 256


@dataclass(frozen=True)
class DcqcnParams:
    """Reaction-point parameters (``training.dcqcn`` in a scenario)."""

    enabled: bool = False
    g: float = 1 / 16
    rai_mbps: float = 0.5
    rhai_mbps: float = 2.0
    timer_us: float = 2000.0
    alpha_timer_us: float = 2000.0
    byte_counter_kb: float = 64.0
    f: int = 5
    min_rate_mbps: float = 0.5

    @classmethod
    def from_dict(cls, raw: dict[str, Any] | None) -> DcqcnParams:
        """Build from a mapping with a subset of the fields (the rest take defaults).

        >>> DcqcnParams.from_dict({"enabled": True, "g": 0.5}).g
        0.5
        """
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in (raw or {}).items() if k in known})


class ReactionPoint:
    """One flow's DCQCN rate: feed it CNPs, bytes sent and the clock; read ``rate_mbps``.

    >>> rp = ReactionPoint(DcqcnParams(enabled=True), line_rate_mbps=20.0, now=0.0)
    >>> rp.on_cnp(0.0); round(rp.rate_mbps, 3)  # alpha starts at 1: the first cut halves
    10.0
    """

    def __init__(self, params: DcqcnParams, line_rate_mbps: float, now: float) -> None:
        if line_rate_mbps <= 0:
            raise ValueError(f"line rate must be positive, got {line_rate_mbps}")
        self.p = params
        self.line = float(line_rate_mbps)
        self.rc = self.line
        self.rt = self.line
        self.alpha = 1.0
        self.timer_stage = 0
        self.byte_stage = 0
        self.bytes_since = 0.0
        self.cnps = 0
        self._timer_s = params.timer_us / 1e6
        self._alpha_s = params.alpha_timer_us / 1e6
        self._byte_limit = params.byte_counter_kb * 1000
        self.next_increase = now + self._timer_s
        self.next_alpha = now + self._alpha_s

    @property
    def rate_mbps(self) -> float:
        return self.rc

    def on_cnp(self, now: float) -> None:
        """A CNP arrived: cut the rate, raise alpha, restart the increase stages."""
        self.advance(now)
        self.cnps += 1
        self.rt = self.rc
        self.rc = max(self.p.min_rate_mbps, self.rc * (1 - self.alpha / 2))
        self.alpha = (1 - self.p.g) * self.alpha + self.p.g
        self.timer_stage = 0
        self.byte_stage = 0
        self.bytes_since = 0.0
        self.next_increase = now + self._timer_s
        self.next_alpha = now + self._alpha_s

    def on_sent(self, nbytes: int, now: float) -> None:
        """Count bytes sent; every ``byte_counter_kb`` is a rate-increase event."""
        self.advance(now)
        self.bytes_since += nbytes
        while self.bytes_since >= self._byte_limit:
            self.bytes_since -= self._byte_limit
            self.byte_stage += 1
            self._increase()

    def advance(self, now: float) -> None:
        """Run the alpha-decay and rate-increase timers that expired by ``now``, in order."""
        for _ in range(MAX_EVENTS):
            due = min(self.next_alpha, self.next_increase)
            if due > now:
                return
            if self.next_alpha <= self.next_increase:
                self.alpha *= 1 - self.p.g
                self.next_alpha += self._alpha_s
            else:
                self.timer_stage += 1
                self._increase()
                self.next_increase += self._timer_s
        # far behind (a long idle): skip the remaining periods, the rate is settled
        self.next_alpha = max(self.next_alpha, now)
        self.next_increase = max(self.next_increase, now)

    def _increase(self) -> None:
        f = self.p.f
        if max(self.timer_stage, self.byte_stage) < f:
            pass  # fast recovery: towards the rate before the cut
        elif min(self.timer_stage, self.byte_stage) > f:
            self.rt += (min(self.timer_stage, self.byte_stage) - f) * self.p.rhai_mbps
        else:
            self.rt += self.p.rai_mbps
        self.rt = min(self.rt, self.line)
        self.rc = min(self.line, (self.rt + self.rc) / 2)

    def stage(self) -> str:
        """The increase stage the timer and byte counters are in now (for traces)."""
        f = self.p.f
        if max(self.timer_stage, self.byte_stage) < f:
            return "fast_recovery"
        if min(self.timer_stage, self.byte_stage) > f:
            return "hyper_increase"
        return "additive_increase"


class CnpPacer:
    """The notification point's limit: at most one CNP per flow per ``interval_us``.

    >>> pacer = CnpPacer(50)
    >>> [pacer.allow("f", t) for t in (0.0, 0.00002, 0.00005)]
    [True, False, True]
    """

    def __init__(self, interval_us: float) -> None:
        self.interval = interval_us / 1e6
        self.last: dict[Any, float] = {}

    def allow(self, flow: Any, now: float) -> bool:
        last = self.last.get(flow)
        if last is not None and now - last < self.interval - 1e-12:
            return False
        self.last[flow] = now
        return True
