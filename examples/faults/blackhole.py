"""A fault kind of one's own: a link that silently drops everything (a "black hole").

Carrier stays up on both ends, so neither the switches nor fast failover notice: only
probes (the health monitor) or the chains that time out do. Named in a scenario by its
dotted path, with no parameters::

    faults:
      - {at_s: 12, action: examples.faults.blackhole:Blackhole, target: p0l0-p0s1}
      - {at_s: 13, action: restore, target: p0l0-p0s1}

``restore`` undoes it, as it undoes ``degrade``: a black hole is a degrade at loss 1.
"""

from __future__ import annotations

from testbed.faults.kinds import FaultKind


class Blackhole(FaultKind):
    """Every frame leaving either end of the link is dropped; carrier stays up."""

    NAME = "blackhole"
    TARGET = "link"

    def apply(self, faults, target, **params):
        return faults.degrade(target, 1.0)
