"""The backbone on the host: one namespace per PoP and region, one veth per link.

Addressing: link ``i`` gets ``10.1.i.0/30`` (``.1`` on side a, ``.2`` on side b);
PoP ``j`` has loopback ``10.255.0.(j+1)/32``; region ``r`` has its site prefix
``172.16.r.0/24`` on a site interface (``.1`` is where its probes and flows live)
and loopback ``10.255.1.(r+1)/32``. OSPF cost is the link's delay in ms (min 1), so
the best path is the shortest in time; equal costs share traffic (ECMP).

Link rate is shaped with TBF where HTB/TBF exists; propagation delay is netem's where
the kernel has it, else the userspace MACsec forwarders' (they hold each frame for the
link's delay), else recorded as not applied. Faults: a link cut sets
both ends down (both lose carrier); a risk-group cut does that to every link of the
group; a PoP failure drops every packet in the PoP (nftables, carrier stays up, as
with a hung router), so its neighbours only notice it through BFD or OSPF.

With MACsec (:mod:`.secure`) each link end is a protected interface (the name
above, carrying the address, where FRR runs) on a wire veth (``<prefix>w<i><side>``)
that carries only 802.1AE frames. Shaping, delay, cuts and loss then act on the
wire; the protected interface follows the wire's carrier.
"""

from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path

from testbed.errors import BringUpError
from testbed.host.commands import cmd, in_netns, ip, run_commands
from testbed.host.naming import register_owned
from testbed.host.nft import loss_rules, port_loss_rules
from topologies.backbone import Backbone, Link

from .frr import (
    BASE_ASN,
    DAEMONS,
    BgpNeighbor,
    FrrDaemon,
    Router,
    RouterInterface,
    RouterPaths,
    Timers,
    vtysh,
)
from .secure import SecureLinks

SITE_IF = "site0"
SITE_PEER = "site1"
FAIL_TABLE = "tbfail"
PROBE_NET = "172.16.{r}.0/24"






class BackboneNet:
    """Namespaces, links and FRR routers of one backbone; undo steps go on ``stack``."""

    def __init__(self, bb: Backbone, prefix: str, run_folder: Path, stack: ExitStack,
                 macsec: dict | None = None, macsec_backend: str = "userspace") -> None:
        self.bb, self.prefix, self.folder, self.stack = bb, prefix, run_folder, stack
        self.links = {lk.name: (i, lk) for i, lk in enumerate(bb.all_links)}
        self.daemons: dict[str, list[FrrDaemon]] = {}
        self.addr_owner: dict[str, tuple[str, str]] = {}  # address -> (node, ifname)
        self.link_of = {self.ifname(name, side): name for name in self.links for side in "ab"}
        self.shaped = False
        #: whether netem qdiscs carry the delay; where the links' delay is applied at
        #: all: "netem", "forwarders" (the userspace MACsec forwarders hold frames) or None
        self.netem = False
        self.delay_by: str | None = None
        self.protocol = "ospfd"
        self.bfd = True
        self.secure = (SecureLinks(self, macsec, macsec_backend)
                       if macsec and macsec.get("enabled") else None)

    # names and addresses ---------------------------------------------------
    def ns(self, node: str) -> str:
        return self.prefix + node

    def ifname(self, link: str, side: str) -> str:
        return f"{self.prefix}l{self.links[link][0]}{side}"

    def wire(self, link: str, side: str) -> str:
        """The veth end under a protected interface (only used with MACsec)."""
        return f"{self.prefix}w{self.links[link][0]}{side}"

    def phys(self, link: str, side: str) -> str:
        """The interface on the wire: the veth, under the protected one with MACsec."""
        return self.wire(link, side) if self.secure else self.ifname(link, side)

    def link_addr(self, link: str, side: str) -> str:
        return f"10.1.{self.links[link][0]}.{1 if side == 'a' else 2}"

    def region_addr(self, region: str) -> str:
        r = [x.name for x in self.bb.regions].index(region)
        return f"172.16.{r}.1"

    def loopback(self, node: str) -> str:
        pops = [p.name for p in self.bb.pops]
        if node in pops:
            return f"10.255.0.{pops.index(node) + 1}"
        return f"10.255.1.{[r.name for r in self.bb.regions].index(node) + 1}"

    @staticmethod
    def cost(link: Link) -> int:
        return max(1, round(link.delay_ms))

    # bring-up --------------------------------------------------------------
    def build(self, *, shape: bool, delay: bool) -> None:
        """Namespaces, sysctls, links (protected ones with MACsec), addresses; undone at the end.

        IPv6 is off in every namespace before any link exists, so no router
        solicitation or MLD frame ever crosses a wire (the backbone is IPv4 only).
        """
        for node in self.bb.nodes:
            ns = self.ns(node)
            ip(["netns", "add", ns])
            register_owned("netns", ns)
            self.stack.callback(ip, ["netns", "del", ns], None, False)
        for node in self.bb.nodes:
            in_netns(self.ns(node), ["sysctl", "-q", "-w", "net.ipv4.ip_forward=1",
                                   "net.ipv4.conf.all.rp_filter=0",
                                   "net.ipv4.conf.default.rp_filter=0",
                                   "net.ipv4.fib_multipath_hash_policy=1",
                                   "net.ipv4.conf.all.ignore_routes_with_linkdown=1",
                                   "net.ipv6.conf.all.disable_ipv6=1",
                                   "net.ipv6.conf.default.disable_ipv6=1"])
        cmds = []
        for node in self.bb.nodes:
            ns = self.ns(node)
            cmds += [cmd(ns, "link", "set", "lo", "up"),
                     cmd(ns, "addr", "add", f"{self.loopback(node)}/32", "dev", "lo")]
        for r, region in enumerate(self.bb.regions):
            ns = self.ns(region.name)
            # the site LAN: a veth whose peer stays in the namespace (no dummy module here)
            cmds += [cmd(ns, "link", "add", SITE_IF, "type", "veth", "peer", "name", SITE_PEER),
                     cmd(ns, "addr", "add", f"172.16.{r}.1/24", "dev", SITE_IF),
                     cmd(ns, "link", "set", SITE_PEER, "up"),
                     cmd(ns, "link", "set", SITE_IF, "up")]
        veths = []
        for name, (_, lk) in self.links.items():
            pa, pb = self.phys(name, "a"), self.phys(name, "b")
            na, nb = self.ns(lk.a), self.ns(lk.b)
            veths.append(cmd(None, "link", "add", pa, "netns", na, "type", "veth",
                              "peer", "name", pb, "netns", nb))
            for side, ns, ifn in (("a", na, self.ifname(name, "a")),
                                  ("b", nb, self.ifname(name, "b"))):
                addr = self.link_addr(name, side)
                self.addr_owner[addr] = (lk.a if side == "a" else lk.b, ifn)
                if not self.secure:
                    cmds += [cmd(ns, "addr", "add", f"{addr}/30", "dev", ifn),
                             cmd(ns, "link", "set", ifn, "up")]
        run_commands(veths)
        run_commands(cmds + (self.secure.commands() if self.secure else []))
        if shape or delay:
            self._qdiscs(shape, delay)
        if self.secure and not delay and self.secure.backend == "userspace":
            self.secure.set_delays()  # no netem: the forwarders hold frames instead
            self.delay_by = "forwarders"
        if self.secure:
            self.secure.start(self.stack)

    def _qdiscs(self, shape: bool, delay: bool) -> None:
        cmds = []
        for name, (_, lk) in self.links.items():
            for side, node in (("a", lk.a), ("b", lk.b)):
                dev = ("qdisc", "add", "dev", self.phys(name, side), "root")
                if delay:
                    cmds.append(cmd(self.ns(node), *dev, "netem", "delay", f"{lk.delay_ms}ms",
                                     "rate", f"{lk.capacity_mbps}mbit", "limit", "100000"))
                else:
                    cmds.append(cmd(self.ns(node), *dev, "tbf", "rate",
                                     f"{lk.capacity_mbps}mbit", "burst", "64kb",
                                     "latency", "50ms"))
        run_commands(cmds, tool="tc")
        self.shaped, self.netem = True, delay
        self.delay_by = "netem" if delay else None

    def asn(self, node: str) -> int:
        """The node's own AS (BGP): one private ASN per PoP and region."""
        return BASE_ASN + list(self.bb.nodes).index(node)

    def routers(self, timers: Timers, *, bfd: bool = True) -> list[Router]:
        out = []
        for node in self.bb.nodes:
            intfs, peers = [], []
            for lk in self.bb.links_of(node):
                side, other = ("a", "b") if lk.a == node else ("b", "a")
                ifname = self.ifname(lk.name, side)
                intfs.append(RouterInterface(ifname, cost=self.cost(lk)))
                peer = lk.b if side == "a" else lk.a
                peers.append(BgpNeighbor(self.link_addr(lk.name, other), self.asn(peer), ifname))
            intfs.append(RouterInterface("lo", passive=True))
            region = node not in {p.name for p in self.bb.pops}
            networks = [f"{self.loopback(node)}/32"]
            if region:
                intfs.append(RouterInterface(SITE_IF, passive=True))
                networks.append(self.region_addr(node).rsplit(".", 1)[0] + ".0/24")
            out.append(Router(node, self.ns(node), self.loopback(node), tuple(intfs), timers,
                              transit=not region, bfd=bfd, asn=self.asn(node),
                              neighbors=tuple(peers), networks=tuple(networks)))
        return out

    def start_routing(self, timers: Timers, timeout: float = 20.0,
                      daemons: tuple[type[FrrDaemon], ...] = DAEMONS) -> None:
        """Render, dry-run, then start the daemons (zebra, bfdd, ospfd by default; or
        bgpd instead of ospfd) in every namespace, each level once the last is ready."""
        import shutil

        from testbed.host.procs import wait_for

        frr_root = self.folder / "frr"
        helper_dir = self.folder / "pids"
        helper_dir.mkdir(parents=True, exist_ok=True)
        self.protocol = "bgpd" if any(d.NAME == "bgpd" for d in daemons) else "ospfd"
        self.bfd = any(d.NAME == "bfdd" for d in daemons)
        for router in self.routers(timers, bfd=self.bfd):
            paths = RouterPaths(frr_root / router.name)
            paths.root.mkdir(parents=True, exist_ok=True)
            shutil.chown(paths.root, "frr", "frr")
            self.daemons[router.name] = [cls(router, paths) for cls in daemons]
            for d in self.daemons[router.name]:
                d.write()
        # one vtysh -C per daemon (three a router): independent processes that only read
        # their own file, so they run side by side; the first error is raised
        every = [d for ds in self.daemons.values() for d in ds]
        with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
            list(pool.map(lambda d: d.dry_run(), every))
        for level in range(len(daemons)):
            started = []
            for daemons in self.daemons.values():
                d = daemons[level]
                helper = d.start(helper_dir)
                self.stack.callback(helper.stop, 3.0)
                started.append(d)
            if not wait_for(lambda s=started: all(d.ready() for d in s), timeout, 0.05):
                late = [f"{d.router.name}/{d.NAME}" for d in started if not d.ready()]
                raise BringUpError(f"FRR daemons not ready in {timeout:g} s: {', '.join(late)}")

    def converged(self) -> bool:
        """Every region has a route to every other region's site prefix."""
        for r, region in enumerate(self.bb.regions):
            table = ip(["-j", "route", "show"], self.ns(region.name), check=False)
            routes = {x.get("dst") for x in json.loads(table or "[]")}
            for k in range(len(self.bb.regions)):
                if k != r and f"172.16.{k}.0/24" not in routes:
                    return False
        return True

    def fib(self) -> dict[str, list[tuple]]:
        """Every router's kernel routes (destination, gateways): to see routing settle."""
        tables = {}
        for node in self.bb.nodes:
            table = ip(["-j", "route", "show"], self.ns(node), check=False)
            tables[node] = sorted(
                (r.get("dst"), r.get("gateway"), r.get("dev"),
                 tuple(sorted((h.get("gateway"), h.get("dev")) for h in r.get("nexthops", []))))
                for r in json.loads(table or "[]"))
        return tables

    def vty(self, node: str, command: str) -> str:
        """Output of ``vtysh -c command`` in ``node``'s routers ("" when it fails)."""
        d = self.daemons[node][0]
        return vtysh(d.router, d.paths, command)

    def adjacency_gaps(self) -> list[str]:
        """Links whose two ends do not both see a Full OSPF adjacency (or an Established
        BGP session), by name.

        FIBs can stay quiet for a while before the last adjacencies form (with the
        userspace MACsec forwarders, start-up takes tens of seconds): a run must not
        take the routes of a half-formed topology for the settled ones.
        """
        if self.protocol == "bgpd":
            return self._session_gaps()
        full: dict[str, set[str]] = {}
        for node in self.daemons:
            try:
                nbrs = json.loads(self.vty(node, "show ip ospf neighbor json") or "{}")
            except json.JSONDecodeError:
                nbrs = {}
            full[node] = {str(nbr.get("ifaceName", "")).split(":")[0]
                          for entries in nbrs.get("neighbors", {}).values() for nbr in entries
                          if str(nbr.get("nbrState", "")).startswith("Full")}
        return [name for name, (_, lk) in self.links.items()
                if self.ifname(name, "a") not in full.get(lk.a, set())
                or self.ifname(name, "b") not in full.get(lk.b, set())]

    def spf_pending(self) -> list[str]:
        """Why OSPF's routes may not yet be the final ones, per router; none once every
        router announces all its Full adjacencies, every router holds the same router-LSAs
        and no SPF run is waiting (always none with BGP).

        A quiet FIB is not enough: a router re-announces its links at most once per
        MinLSInterval (5 s) and an SPF run waits up to its maximum hold time (5 s), so the
        FIB can stay unchanged for seconds over a path that is not the best one.
        """
        if self.protocol == "bgpd":
            return []
        pending, lsdbs = [], set()
        for node in self.daemons:
            try:
                ospf = json.loads(self.vty(node, "show ip ospf json") or "{}")
                own = json.loads(self.vty(node, "show ip ospf database router self-originate json")
                                 or "{}")
            except json.JSONDecodeError:
                pending.append(f"{node}: no answer")
                continue
            area = ospf.get("areas", {}).get("0.0.0.0", {})
            lsdbs.add((area.get("lsaRouterNumber"), area.get("lsaRouterChecksum")))
            if "spfTimerDueInMsecs" in ospf:
                pending.append(f"{node}: SPF due in {ospf['spfTimerDueInMsecs']} ms")
            links = [lk for lsa in own.get("Router Link States", {}).get("0.0.0.0", {}).values()
                     for lk in lsa.get("routerLinks", {}).values()]
            announced = sum("point-to-point" in str(lk.get("linkType")) for lk in links)
            if announced != area.get("nbrFullAdjacentCounter"):
                pending.append(f"{node}: announces {announced} of "
                               f"{area.get('nbrFullAdjacentCounter')} adjacencies")
        if len(lsdbs) > 1:
            pending.append(f"link-state databases differ ({len(lsdbs)} versions)")
        return pending

    def established(self, node: str) -> set[str]:
        """Peer addresses of ``node``'s Established BGP sessions."""
        try:
            summary = json.loads(self.vty(node, "show bgp ipv4 unicast summary json") or "{}")
        except json.JSONDecodeError:
            return set()
        return {addr for addr, peer in summary.get("peers", {}).items()
                if peer.get("state") == "Established"}

    def _session_gaps(self) -> list[str]:
        up = {node: self.established(node) for node in self.daemons}
        return [name for name, (_, lk) in self.links.items()
                if self.link_addr(name, "b") not in up.get(lk.a, set())
                or self.link_addr(name, "a") not in up.get(lk.b, set())]

    def bfd_gaps(self) -> list[str]:
        """Full OSPF adjacencies (Established BGP sessions) without a BFD session that is
        up, as ``node:peer``; none when the backbone runs without bfdd.

        Such an adjacency only goes down after the OSPF dead interval when its
        neighbour hangs (carrier up), so a run must not start with any.
        """
        if not self.bfd:
            return []
        gaps = []
        if self.protocol == "bgpd":
            for node in self.daemons:
                try:
                    peers = json.loads(self.vty(node, "show bfd peers json") or "[]")
                except json.JSONDecodeError:
                    peers = []
                up = {p.get("peer") for p in peers if p.get("status") == "up"}
                gaps += [f"{node}:{a}" for a in sorted(self.established(node) - up)]
            return gaps
        for node in self.daemons:
            try:
                nbrs = json.loads(self.vty(node, "show ip ospf neighbor json") or "{}")
                peers = json.loads(self.vty(node, "show bfd peers json") or "[]")
            except json.JSONDecodeError:
                gaps.append(f"{node}:?")
                continue
            up = {p.get("peer") for p in peers if p.get("status") == "up"}
            for entries in nbrs.get("neighbors", {}).values():
                for nbr in entries:
                    addr = nbr.get("ifaceAddress") or nbr.get("address")
                    if str(nbr.get("nbrState", "")).startswith("Full") and addr not in up:
                        gaps.append(f"{node}:{addr}")
        return gaps

    # faults ----------------------------------------------------------------
    def _set_link(self, name: str, state: str) -> None:
        _, lk = self.links[name]
        run_commands([cmd(self.ns(lk.a), "link", "set", self.phys(name, "a"), state),
                   cmd(self.ns(lk.b), "link", "set", self.phys(name, "b"), state)])

    def cut_link(self, name: str) -> None:
        self._set_link(name, "down")

    def restore_link(self, name: str) -> None:
        self._set_link(name, "up")

    def cut_risk_group(self, name: str) -> None:
        self._group(name, "down")

    def restore_risk_group(self, name: str) -> None:
        self._group(name, "up")

    def _group(self, name: str, state: str) -> None:
        cmds = []
        for link in self.bb.group(name).links:
            _, lk = self.links[link]
            cmds += [cmd(self.ns(lk.a), "link", "set", self.phys(link, "a"), state),
                     cmd(self.ns(lk.b), "link", "set", self.phys(link, "b"), state)]
        run_commands(cmds)

    def fail_pop(self, name: str) -> None:
        rules = (f"table inet {FAIL_TABLE} {{\n"
                 + "".join(f" chain {h} {{ type filter hook {h} priority -400; policy drop; }}\n"
                           for h in ("prerouting", "input", "forward", "output"))
                 + "}\n")
        in_netns(self.ns(name), ["nft", "-f", "-"], stdin=rules)

    def restore_pop(self, name: str) -> None:
        in_netns(self.ns(name), ["nft", "delete", "table", "inet", FAIL_TABLE])

    def loss_table(self, link: str) -> str:
        """Name of the nftables table that degrades ``link`` (one per link and run)."""
        return f"{self.prefix}loss{self.links[link][0]}"

    def _ends(self, name: str) -> list[tuple[str, str]]:
        _, lk = self.links[name]
        return [(self.ns(lk.a), self.phys(name, "a")), (self.ns(lk.b), self.phys(name, "b"))]

    def degrade_link(self, name: str, loss: float) -> None:
        """Drop ``loss`` of the packets leaving either end of ``name``.

        With netem the root netem qdisc gets ``loss``; without it, an nftables table
        (named with the run prefix, removed again at teardown) drops at random.
        """
        if self.netem:
            self._set_netem_loss(name, loss)
            return
        table, family = self.loss_table(name), self._loss_family
        rules = port_loss_rules if self.secure else loss_rules
        for ns, ifn in self._ends(name):
            in_netns(ns, ["nft", "-f", "-"], stdin=rules(table, ifn, loss))
            self.stack.callback(in_netns, ns, ["nft", "delete", "table", family, table], False)

    def _set_netem_loss(self, name: str, loss: float) -> None:
        """Both ends' netem root qdiscs: the link's delay and rate, and ``loss``."""
        _, lk = self.links[name]
        tail = ("loss", f"{loss * 100:g}%") if loss else ()
        run_commands([cmd(ns, "qdisc", "change", "dev", ifn, "root", "netem", "delay",
                        f"{lk.delay_ms}ms", "rate", f"{lk.capacity_mbps}mbit", "limit", "100000",
                        *tail)
                   for ns, ifn in self._ends(name)], tool="tc")

    def restore_degraded_link(self, name: str) -> None:
        if self.netem:
            self._set_netem_loss(name, 0.0)
            return
        for ns, _ifn in self._ends(name):
            in_netns(ns, ["nft", "delete", "table", self._loss_family, self.loss_table(name)])

    @property
    def delay_applied(self) -> bool:
        return self.delay_by is not None

    @property
    def _loss_family(self) -> str:
        # protected links: the forwarder's packet socket bypasses the IP hooks
        return "netdev" if self.secure else "inet"

    # paths from the routing tables ------------------------------------------
    def trace(self, src: str, dst: str, max_hops: int = 12) -> tuple[list[str], list[str]]:
        """Nodes and links a packet from region ``src`` to ``dst`` crosses, per the FIBs.

        Each hop asks the kernel (``ip route get .. from .. iif ..``) which next hop
        it would forward to; an ECMP hop shows the member the flow hashes to.
        """
        s_addr, d_addr = self.region_addr(src), self.region_addr(dst)
        nodes, links, node, iif = [src], [], src, None
        for _ in range(max_hops):
            args = ["-j", "route", "get", d_addr, "from", s_addr]
            if iif:
                args += ["iif", iif]
            out = ip(args, self.ns(node), check=False)
            try:
                route = json.loads(out)[0]
            except (json.JSONDecodeError, IndexError):
                return nodes + ["unreachable"], links
            if route.get("type") == "local" or route.get("dev") == SITE_IF:
                return nodes, links
            gw = route.get("gateway")
            if gw not in self.addr_owner:
                return nodes + ["unreachable"], links
            node, iif = self.addr_owner[gw]
            nodes.append(node)
            links.append(self.link_of[iif])
            if node == dst:
                return nodes, links
        return nodes + ["loop"], links

    def paths(self) -> dict[str, dict[str, list[str]]]:
        """``{"src>dst": {"nodes": [...], "links": [...]}}`` for every pair of regions.

        The pairs are traced side by side: each hop is an ``ip`` process, and a reading
        that takes seconds (under the lab VM's emulation) must be started that much
        before the fault it precedes, closer to the fault before it."""
        names = [r.name for r in self.bb.regions]
        pairs = [(a, b) for a in names for b in names if a != b]
        with ThreadPoolExecutor(max_workers=max(1, min(len(pairs), os.cpu_count() or 1))) \
                as pool:
            traces = list(pool.map(lambda pair: self.trace(*pair), pairs))
        return {f"{a}>{b}": {"nodes": nodes, "links": links}
                for (a, b), (nodes, links) in zip(pairs, traces, strict=True)}
