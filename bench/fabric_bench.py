"""Benchmark: our fabric bring-up against plain Mininet building a fabric of the same size.

Both build the same nodes, switches (Open vSwitch, same datapath, OpenFlow 1.3) and
rate-limited links; plain Mininet uses its defaults (TCLink with ``bw``, shell commands
per interface), ours adds offloads off, jumbo MTU, addresses and byte-sized buffers.
Runs alternate, so both see the same machine load; the ratio of medians is printed.
Both are timed the same way: from the constructor (ours: ``Fabric(...)``; Mininet's
builds the network in its constructor) to a fabric ready for traffic (``start()``
returned).

Target: for every size, ours takes at most ``TARGET`` (1.0) times as long as plain
Mininet to come up (ratio of medians): no slower than Mininet, although it does more
(measured 0.24 for the default size and 0.46 for the larger one, 2-core development
machine, userspace datapath); exit status 1 when missed.

    python -m bench.fabric_bench [--rounds 3] [--target 1.0]
"""

from __future__ import annotations

import argparse
import statistics
import time
from contextlib import ExitStack
from functools import partial

from testbed.fabric.net import Fabric
from testbed.host.capabilities import Capabilities, probe
from testbed.host.naming import new_run_id, run_prefix
from topologies.leafspine import build_fabric
from topologies.spec import FabricSpec

TARGET = 1.0  # bring-up ratio ours / plain Mininet, at most


def verdict(up_ratios: dict[str, float], target: float = TARGET) -> bool:
    """Whether every size's bring-up ratio ours/Mininet is at most ``target``.

    >>> verdict({"small": 0.8, "larger": 0.95}), verdict({"small": 0.8, "larger": 1.3})
    (True, False)
    >>> verdict({})
    False
    """
    return bool(up_ratios) and all(r <= target for r in up_ratios.values())


SIZES = {
    "default scenario": dict(planes=2, rails=1, nodes=8, leaves_per_plane=2, spines_per_plane=2),
    "larger": dict(planes=2, rails=2, nodes=16, leaves_per_plane=8, spines_per_plane=4),
}


def ours(spec: FabricSpec, caps: Capabilities, run_id: str) -> tuple[float, float]:
    with ExitStack() as stack:
        t0 = time.monotonic()  # from the constructor, as Mininet below
        fabric = Fabric(spec, caps, run_id=run_id, controller_port=6699)
        stack.callback(fabric.stop)
        fabric.start()
        up = time.monotonic() - t0
    return up, fabric.times.stop_s


def plain_mininet(spec: FabricSpec, caps: Capabilities, prefix: str,
                  hold_s: float = 0.0, shaped: bool = True) -> tuple[float, float]:
    """Mininet's own way: Topo, TCLink(bw=...), OVSSwitch; short names so they fit 15 chars.
    ``hold_s``: seconds the network stays up between ``start()`` and ``stop()`` (idle);
    ``shaped`` False: Mininet's plain Link, no rate limits (less work than ours)."""
    from mininet.link import Link, TCLink
    from mininet.log import setLogLevel
    from mininet.net import Mininet
    from mininet.node import OVSSwitch
    from mininet.topo import Topo

    setLogLevel("critical")  # TCLink warns about HTB quanta on every link
    Mininet.inited = True
    # hexadecimal indices: "tb1a2bs7f-eth10" still fits 15 characters at 128 switches
    short = {sw.name: f"{prefix}s{i:x}" for i, sw in enumerate(spec.switches)}
    short |= {h.name: f"{prefix}h{i:x}" for i, h in enumerate(spec.hosts)}

    class Same(Topo):
        def build(self):
            for sw in spec.switches:
                self.addSwitch(short[sw.name], dpid=f"{sw.dpid:016x}")
            for h in spec.hosts:
                self.addHost(short[h.name])
            for lk in spec.links:
                self.addLink(short[lk.a], short[lk.b], **({"bw": lk.mbps} if shaped else {}))

    t0 = time.monotonic()
    net = Mininet(topo=Same(), controller=None, link=TCLink if shaped else Link,
                  autoSetMacs=True, build=False,
                  switch=partial(OVSSwitch, datapath=caps.ovs_datapath, protocols="OpenFlow13"))
    try:
        net.build()  # what the constructor does with build=True, inside the try: a failed
        net.start()  # build is stopped (and its interfaces removed) too
        up = time.monotonic() - t0
        time.sleep(hold_s)  # idle, as long as the lab's traffic runs
    finally:
        t1 = time.monotonic()
        net.stop()
        down = time.monotonic() - t1
    return up, down


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--target", type=float, default=TARGET,
                    help=f"largest bring-up ratio ours/Mininet (default {TARGET:g})")
    args = ap.parse_args(argv)
    up_ratios = {}
    caps = probe(new_run_id())
    print(f"fabric bring-up, ours vs plain Mininet ({caps.ovs_datapath} datapath, "
          f"{args.rounds} alternating rounds, medians)")
    for label, size in SIZES.items():
        times = {"ours": [], "mininet": []}
        for _ in range(args.rounds):
            rid = new_run_id()
            spec = build_fabric(prefix=run_prefix(rid), link_mbps=20, **size)
            times["ours"].append(ours(spec, caps, rid))
            times["mininet"].append(plain_mininet(spec, caps, run_prefix(new_run_id())))
        up = {k: statistics.median(t[0] for t in v) for k, v in times.items()}
        down = {k: statistics.median(t[1] for t in v) for k, v in times.items()}
        counts = spec.counts()
        print(f"  {label} ({counts['switches']} switches, {counts['hosts']} hosts, "
              f"{counts['links']} links):")
        up_ratios[label] = up["ours"] / up["mininet"]
        print(f"    start: ours {up['ours']:.2f} s, Mininet {up['mininet']:.2f} s, "
              f"ratio ours/Mininet {up_ratios[label]:.2f}")
        print(f"    stop:  ours {down['ours']:.2f} s, Mininet {down['mininet']:.2f} s, "
              f"ratio ours/Mininet {down['ours'] / down['mininet']:.2f}")
    ok = verdict(up_ratios, args.target)
    print(f"bring-up ratio ours/Mininet <= {args.target:g} for every size: "
          f"{'PASS' if ok else 'MISS'}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
