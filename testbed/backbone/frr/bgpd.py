"""bgpd: eBGP between every pair of linked routers, each router its own AS, BFD on
every session, ECMP over equal AS-path lengths (``multipath-relax``).

Every PoP and every region is an AS of its own (private ASNs from 64512): a session per
link, on the link's addresses. A PoP announces its loopback; a region its loopback and
its site prefix. A region is a stub: it sends only its own routes (as-path ``^$``), so
a dual-homed region never carries traffic between two PoPs (what ``max-metric`` does
for OSPF). Keepalive and hold follow the variant's hello and dead timers (hold at least
3 s, BGP's minimum); BFD does the fast detection, as for OSPF.

>>> from pathlib import Path
>>> from testbed.backbone.frr.router import (BgpNeighbor, Router, RouterInterface,
...     RouterPaths, Timers)
>>> r = Router("ra", "tbdemora", "10.255.1.1", (RouterInterface("l0b"),),
...            Timers(hello_s=1, dead_s=3), transit=False, asn=64520,
...            neighbors=(BgpNeighbor("10.1.0.1", 64512, "l0b"),),
...            networks=("10.255.1.1/32", "172.16.0.0/24"))
>>> text = Bgpd(r, RouterPaths(Path("/tmp"))).render()
>>> "router bgp 64520" in text, " neighbor 10.1.0.1 remote-as 64512" in text
(True, True)
>>> " neighbor 10.1.0.1 bfd profile backbone" in text, "route-map LOCAL-ONLY out" in text
(True, True)
>>> " timers bgp 1 3" in text, "  network 172.16.0.0/24" in text
(True, True)
"""

from __future__ import annotations

from .bfdd import PROFILE
from .daemon import FrrDaemon, template
from .zebra import Zebra

#: the first private AS number (RFC 6996); router i of the backbone gets BASE_ASN + i
BASE_ASN = 64512
MIN_HOLD_S = 3
#: a stub (region) sends only the routes it originates
STUB_POLICY = ("bgp as-path access-list LOCAL seq 5 permit ^$\n"
               "route-map LOCAL-ONLY permit 10\n match as-path LOCAL\nexit\n!\n")


class Bgpd(FrrDaemon):
    NAME = "bgpd"
    TEMPLATE = "bgpd.conf.tmpl"
    NEIGHBOR = "bgpd.neighbor.tmpl"
    DEPENDS = (Zebra,)

    def render(self) -> str:
        r, t = self.router, self.router.timers
        neighbor = template(self.NEIGHBOR)
        neighbors = ""
        for n in r.neighbors:
            neighbors += neighbor.substitute(address=n.address, asn=n.asn, ifname=n.ifname)
            if r.bfd:
                neighbors += f" neighbor {n.address} bfd profile {PROFILE}\n"
        networks = "".join(f"  network {prefix}\n" for prefix in r.networks)
        outbound = "" if r.transit else "".join(
            f"  neighbor {n.address} route-map LOCAL-ONLY out\n" for n in r.neighbors)
        return template(self.TEMPLATE).substitute(
            hostname=r.name, asn=r.asn, router_id=r.router_id, neighbors=neighbors,
            networks=networks, outbound=outbound, max_paths=r.max_paths,
            keepalive_s=max(1, t.hello_s), hold_s=max(MIN_HOLD_S, t.dead_s),
            policy="" if r.transit else STUB_POLICY)
