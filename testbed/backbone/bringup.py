"""A backbone brought up and converged: namespaces, links, FRR, every adjacency Full with
its BFD session up, routing settled. The one place that does it, for a run's variant and
for a lab that stays up (``testbed up``); every undo step goes on the caller's stack.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path

from testbed.errors import BringUpError
from testbed.host.procs import wait_for
from topologies.backbone import Backbone

from .frr import Timers, daemon_classes
from .net import BackboneNet

DEFAULT_DAEMONS = ("zebra", "bfdd", "ospfd")


def settled(net: BackboneNet, quiet_s: float, timeout_s: float) -> bool:
    """Wait until no router's FIB has changed for ``quiet_s`` (SPF and FIB installs done).

    "Every region has a route" is reached while adjacencies still come up, over paths
    that are not yet the best ones; the path before a fault must be the settled one.
    """
    deadline = time.monotonic() + timeout_s
    last, since = net.fib(), time.monotonic()
    while time.monotonic() - since < quiet_s:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.25)
        now = net.fib()
        if now != last:
            last, since = now, time.monotonic()
    return True


def bring_up(bb: Backbone, *, prefix: str, folder: Path, stack: ExitStack, cfg: dict,
             timers: Timers, macsec_backend: str, shape: bool, delay: bool,
             progress: Callable[[str], None] | None = None, name: str = "",
             t_start: float | None = None) -> tuple[BackboneNet, float]:
    """Build ``bb`` (validated section ``cfg``: macsec, converge_timeout_s, settle_s), start
    FRR with ``timers`` and wait until it has converged and settled.

    Returns the live net and the seconds from ``t_start`` (default: now) to convergence.
    """
    t_start = time.monotonic() if t_start is None else t_start
    net = BackboneNet(bb, prefix, folder, stack, macsec=cfg["macsec"],
                      macsec_backend=macsec_backend)
    net.build(shape=shape, delay=delay)
    net.start_routing(timers, daemons=daemon_classes(cfg.get("daemons", DEFAULT_DAEMONS)))
    timeout = cfg["converge_timeout_s"]
    if not wait_for(net.converged, timeout, 0.25):
        raise BringUpError(f"backbone did not converge in {timeout:g} s")
    if not wait_for(lambda: not net.adjacency_gaps(), timeout, 0.25):
        raise BringUpError("adjacencies (OSPF Full / BGP Established) missing on links: "
                           + ", ".join(net.adjacency_gaps()))
    # every adjacency must have its BFD session up, or a hung neighbour is only
    # noticed after the OSPF dead interval
    if not wait_for(lambda: not net.bfd_gaps(), timeout, 0.25):
        raise BringUpError("adjacencies without a BFD session up: "
                           + ", ".join(net.bfd_gaps()))
    start_s = round(time.monotonic() - t_start, 3)
    if progress:
        progress(f"  {name}: {len(bb.nodes)} routers converged in {start_s:g} s")
    # routers still to announce a link, or SPF runs still waiting, leave the FIB quiet
    # over paths that are not the best ones
    if not wait_for(lambda: not net.spf_pending(), timeout, 0.25):
        raise BringUpError("OSPF did not settle: " + "; ".join(net.spf_pending()))
    if not settled(net, cfg["settle_s"], timeout):
        raise BringUpError(f"routing did not settle for {cfg['settle_s']:g} s "
                           f"within {timeout:g} s")
    return net, start_s
