"""Faults on a live fabric: the scenario's ``faults:`` list, validated, and its actions.

Validation (:func:`parse_faults`) is pure: every target is checked against the
variant's spec and named in the canonical short form (the name without the run
prefix). The actions (:class:`FabricFaults`) act on real interfaces and processes:

* ``link_down`` / ``link_up``: both veth ends of a link go down (both ends lose
  carrier) or up. Targets: any link of the spec by its ends' short names in either
  order (``p0l0-p0s1``, ``p0e0-p0a1`` in a fat-tree, ``l1-s1`` in an explicit graph,
  ``n0-p0l0``), a switch port (``p0l0e3``), or a host interface (``n0p0r0``).
* ``link_flap``: ``count`` down/up cycles of ``period_s``; expanded at validation into
  link_down/link_up faults, so each transition has its own record.
* ``switch_fail`` / ``switch_restore``: every link of any switch down/up (the
  neighbours see what they would see of a dead switch: carrier gone on every port).
* ``plane_fail`` / ``plane_restore``: every switch of a plane (``p1`` or ``1``).
* ``rail_fail`` / ``rail_restore``: one NIC of a node: ``n2p0r0`` (node 2, plane 0,
  rail 0).
* ``controller_kill`` (SIGKILL to its process group: a crash, not a shutdown) and
  ``controller_restart`` (same argv, same port; the switches reconnect by themselves).
* ``degrade`` (``loss``, a fraction) / ``restore``: nftables drops that fraction of the
  frames leaving each switch end of the link (and the host end of a host link).

>>> from topologies.leafspine import build_fabric
>>> spec = build_fabric(prefix="tbdoc0", planes=2, nodes=4, leaves_per_plane=2,
...                     spines_per_plane=2)
>>> [(f.at_s, f.action, f.target) for f in parse_faults(
...     [{"at_s": 2, "action": "link_flap", "target": "p0s1-p0l0", "period_s": 0.4,
...       "count": 1}, {"at_s": 5, "action": "plane_fail", "target": 1}], spec)]
[(2.0, 'link_down', 'p0l0-p0s1'), (2.2, 'link_up', 'p0l0-p0s1'), (5.0, 'plane_fail', 'p1')]
>>> parse_faults([{"at_s": 1, "action": "rail_fail", "target": "n9p0r0"}], spec)
Traceback (most recent call last):
...
testbed.errors.ConfigError: faults[0].target: no rail 'n9p0r0' (a host interface such as 'n0p0r0')
"""

from __future__ import annotations

import math
import os
import signal
import socket
import zlib
from collections.abc import Callable, Iterable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from pyroute2 import IPRoute
from pyroute2.netlink.exceptions import NetlinkError

from testbed.core import layout
from testbed.errors import ConfigError, HostError
from testbed.fabric.net import HTB_MINOR, burst_bytes
from testbed.faults import kinds as fault_kinds
from testbed.faults.schedule import Fault
from testbed.host import netns
from testbed.host.hosts import Host, RootHost
from testbed.host.naming import forget, register, run_id_of
from testbed.host.nft import port_loss_rules
from testbed.host.procs import Helper
from topologies.spec import FabricSpec, Link, find_link, link_name, short


def swap_identities(ipr, x: str, y: str) -> None:
    """Exchange two interfaces' names, MACs and IPv4 addresses (``ipr``: pyroute2's
    IPRoute in their namespace); both are down while it happens, up after."""
    def state(name: str) -> tuple[int, str, list[tuple[str, int]]]:
        index = ipr.link_lookup(ifname=name)
        if not index:
            raise HostError(f"no interface {name}")
        link = ipr.link("get", index=index[0])[0]
        addrs = [(a.get_attr("IFA_ADDRESS"), a["prefixlen"])
                 for a in ipr.get_addr(index=index[0], family=socket.AF_INET)]
        return index[0], link.get_attr("IFLA_ADDRESS"), addrs

    (ix, mac_x, addr_x), (iy, mac_y, addr_y) = state(x), state(y)
    for index in (ix, iy):
        ipr.link("set", index=index, state="down")
    ipr.link("set", index=ix, ifname=f"tbswap{ix}"[:15])
    ipr.link("set", index=iy, ifname=x)
    ipr.link("set", index=ix, ifname=y)
    for index, mac, old, new in ((ix, mac_y, addr_x, addr_y), (iy, mac_x, addr_y, addr_x)):
        ipr.link("set", index=index, address=mac)
        for address, length in old:
            ipr.addr("del", index=index, address=address, prefixlen=length)
        for address, length in new:
            ipr.addr("add", index=index, address=address, prefixlen=length)
    for index in (ix, iy):
        ipr.link("set", index=index, state="up")


def _target(spec: FabricSpec, kind: str | None, value: Any, where: str) -> str:
    if kind is None:
        if value not in (None, "", "controller"):
            raise ConfigError(where, "takes no target (the run's controller)")
        return "controller"
    if value is None or isinstance(value, bool):
        raise ConfigError(where, f"missing: give the {kind} to act on")
    text = short(spec, str(value))
    if kind == "link":
        lk = find_link(spec, text)
        if lk is None:
            raise ConfigError(where, f"no link {text!r} in this fabric (e.g. "
                              f"{link_name(spec, spec.links[-1])!r} or a port name)")
        return link_name(spec, lk)
    if kind == "switch":
        names = [short(spec, s.name) for s in spec.switches]
        if text not in names:
            raise ConfigError(where, f"no switch {text!r} in this fabric "
                              f"(switches: {', '.join(names)})")
        return text
    if kind == "plane":
        plane = text[1:] if text.startswith("p") else text
        if not plane.isdigit() or int(plane) >= spec.planes:
            raise ConfigError(where, f"no plane {value!r} (planes p0..p{spec.planes - 1})")
        return f"p{int(plane)}"
    names = [short(spec, i.name) for i in spec.interfaces()]
    if text not in names:
        raise ConfigError(where, f"no rail {text!r} (a host interface such as {names[0]!r})")
    return text


def parse_faults(raw: Any, spec: FabricSpec, where: str = "faults",
                 duration_s: float | None = None) -> tuple[Fault, ...]:
    """Validate a ``faults:`` list against ``spec`` (every kind from
    :mod:`testbed.faults.kinds`), each at a time within ``duration_s`` when given, every
    action of a repeating kind too (a link_flap's last link_up); raises
    :class:`ConfigError`."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ConfigError(where, "must be a list of faults")
    out: list[Fault] = []
    for i, entry in enumerate(raw):
        at = f"{where}[{i}]"
        if not isinstance(entry, dict):
            raise ConfigError(at, "must be a mapping with at_s, action, target")
        cls = fault_kinds.kind(entry.get("action"), f"{at}.action")
        at_s = entry.get("at_s")
        if isinstance(at_s, bool) or not isinstance(at_s, int | float) or at_s < 0 \
                or not math.isfinite(at_s):
            raise ConfigError(f"{at}.at_s", f"must be a number of seconds, 0 or more, "
                                            f"got {at_s!r}")
        if duration_s is not None and at_s >= duration_s:
            raise ConfigError(f"{at}.at_s", f"must be within the run's {duration_s:g} s, "
                                            f"got {at_s!r}")
        target = _target(spec, cls.TARGET, entry.get("target"), f"{at}.target")
        params = fault_kinds.parameters(cls, entry, at)
        kind = cls()
        kind.check(spec, params, at)
        actions = kind.expand(float(at_s), target, params)
        last = max(actions, key=lambda f: f.at_s, default=None)
        if duration_s is not None and last is not None and last.at_s >= duration_s:
            # a repeating kind (link_flap) whose later actions the run would never apply
            raise kind.outlasts(float(at_s), params, last, duration_s, at)
        out += actions
    return tuple(sorted(out, key=lambda f: f.at_s))


def needs(faults: tuple[Fault, ...]) -> dict[str, str]:
    """The kernel features the faults need: Capabilities field -> the first kind."""
    out: dict[str, str] = {}
    for f in faults:
        feature = fault_kinds.kind(f.action).NEEDS
        if feature:
            out.setdefault(feature, f.action)
    return out


class FabricFaults:
    """The fault actions bound to one live fabric; undo steps go on the run's stack."""

    def __init__(self, live, stack: ExitStack, *, on_restart: Callable[[Helper], None]
                 | None = None, seed: int = 1) -> None:
        self.live = live
        self.stack = stack
        self.seed = seed  # draws what a fault plants at random (add_rack's plant)
        self.on_restart = on_restart
        self._degraded: dict[str, list[tuple[str | None, str]]] = {}

    @property
    def spec(self) -> FabricSpec:
        """The fabric's spec as it is now (a rack added while the run goes on grows it)."""
        return self.live.spec

    def add_rack(self, leaves: int, nodes: int, plant: list[dict] | None = None) -> dict:
        """A rack cabled in, accepted and routed (:mod:`testbed.operations.expand`)."""
        from testbed.operations.expand import expand

        out = Path(self.live.status).parent
        record, _ = expand(self.live, self.stack, out, self.spec.prefix, leaves, nodes,
                           plant=plant or [], seed=self.seed)
        return {"accepted": record["acceptance"]["accepted"],
                "excluded": record["acceptance"]["excluded_links"]
                + record["acceptance"]["excluded_nodes"],
                "old_fabric_lost": record["old_fabric"]["lost"],
                "traffic_after_s": (record["routed"] or {}).get("traffic_after_s")}

    def actions(self, names: Iterable[str] = ()) -> dict[str, Callable[..., object]]:
        """Every registered kind (and the plug-in kinds ``names``) bound to this fabric."""
        kinds = {**fault_kinds.KINDS, **{n: fault_kinds.kind(n) for n in names}}
        return {name: (lambda t, *args, c=cls, **p: c().apply(self, t, *args, **p))
                for name, cls in kinds.items()}

    def link(self, target: str) -> Link:
        return find_link(self.spec, target)

    def switch_links(self, name: str) -> list[Link]:
        return self._switch_links(name)

    def plane_links(self, plane: str) -> list[Link]:
        return self._plane_links(plane)

    def set_links(self, links: list[Link], *, up: bool) -> int:
        return self._links(links, up=up)

    def pfc_storm(self, rail: str, *, on: bool) -> str:
        """Start (or stop) a PAUSE storm from a host NIC: a file named after it in the
        run's storm folder, which the PFC agent watches."""
        ifname = f"{self.spec.prefix}{rail}"
        flag = Path(self.live.status).parent / layout.PFC_STORMS / ifname
        if not flag.parent.is_dir():
            raise ConfigError("action", f"pfc_storm {rail}: this fabric runs without PFC "
                                        "(qos.pfc.enabled: false)")
        if on:
            flag.touch()
        else:
            flag.unlink(missing_ok=True)
        return ifname

    def swap_rails(self, rail: str) -> str:
        """Swap the cables of a node's NIC ``rail`` (``n1p0r0``) and of its NIC on the
        next rail of the same plane: each NIC, with its name, MAC and addresses, now
        reaches the other rail's leaf, as when two cables are plugged into each other's
        ports. Done in the host's namespace by exchanging the two veth ends' identities;
        swapping again mends it."""
        nic = short(self.spec, rail)
        host = next((h for h in self.spec.hosts
                     if any(short(self.spec, i.name) == nic for i in h.interfaces)), None)
        if host is None:
            raise ConfigError("target", f"no NIC {nic!r} in this fabric")
        me = host.interface_by_name(self.spec.prefix + nic)
        if self.spec.rails < 2:
            raise ConfigError("target", f"swap_rails {nic}: the fabric has one rail a plane, "
                                        "no other NIC to swap with")
        other = host.interface(me.plane, (me.rail + 1) % self.spec.rails)
        where = netns.of_pid(self.live.fabric.host_pid(host.name))
        with netns.made_in(where, IPRoute) as ipr:
            swap_identities(ipr, me.name, other.name)
        return f"{nic} <-> {short(self.spec, other.name)}"

    # -- links -------------------------------------------------------------------------
    def _switch_links(self, name: str) -> list[Link]:
        full = self.spec.prefix + name
        return [lk for lk in self.spec.links if full in (lk.a, lk.b)]

    def _plane_links(self, plane: str) -> list[Link]:
        return [lk for lk in self.spec.links if lk.plane == int(plane[1:])]

    def _links(self, links: list[Link], *, up: bool) -> int:
        """Set both ends of every link down (switch ends first, in one socket, then the
        host ends) or up (host ends first, so that carrier returns at once on both)."""
        if up:
            self._host_ends(links, "up")
        self._switch_ends(links, "up" if up else "down")
        if not up:
            self._host_ends(links, "down")
        return len(links)

    def _switch_ends(self, links: list[Link], state: str) -> None:
        with IPRoute() as ipr:
            for lk in links:
                ends = [lk.b_intf] + ([lk.a_intf] if lk.kind == "fabric" else [])
                for name in ends:
                    index = ipr.link_lookup(ifname=name)
                    if not index:
                        raise HostError(f"switch port {name} is gone")
                    ipr.link("set", index=index[0], state=state)

    def _host_ends(self, links: list[Link], state: str) -> None:
        by_host: dict[str, list[str]] = {}
        for lk in links:
            if lk.kind == "host":
                by_host.setdefault(lk.a, []).append(lk.a_intf)
        for host, names in by_host.items():  # netlink made in the host's namespace
            where = netns.of_pid(self.live.fabric.host_pid(host))
            with netns.made_in(where, IPRoute) as ipr:
                for name in names:
                    index = ipr.link_lookup(ifname=name)
                    if not index:
                        raise HostError(f"{host}: its NIC {name} is gone")
                    try:
                        ipr.link("set", index=index[0], state=state)
                    except NetlinkError as exc:
                        raise HostError(f"{host}: {name} {state}: "
                                        f"{os.strerror(exc.code)}") from None

    # -- controller --------------------------------------------------------------------
    def kill_controller(self) -> int:
        """SIGKILL the controller's process group (a crash: no goodbye to the switches)."""
        helper: Helper | None = self.live.controller
        if helper is None:
            raise HostError("the fabric runs with a remote controller, not ours")
        if not helper.alive():
            raise HostError("controller is not running")
        os.killpg(helper.pid, signal.SIGKILL)
        helper.wait(5)
        return helper.pid

    def restart_controller(self) -> int:
        """Start the controller again with the same argv (same OpenFlow port)."""
        old: Helper | None = self.live.controller
        if old is None:
            raise HostError("the fabric runs with a remote controller, not ours")
        if old.alive():
            raise HostError("controller is still running")
        log = self.live.status.parent / layout.CONTROLLER_LOG
        new = Helper(old.name, old.argv, pid_dir=self.live.pid_dir, log=log)
        self.stack.callback(new.stop)
        self.live.controller = new
        if self.on_restart:
            self.on_restart(new)
        return new.pid

    # -- delay and rate ----------------------------------------------------------------
    def _ends(self, target: str) -> list[tuple[str | None, str]]:
        """Every end of a link: (host namespace or None for the root one, interface)."""
        lk = find_link(self.spec, target)
        return [(None, lk.b_intf), (lk.a if lk.kind == "host" else None, lk.a_intf)]

    def _host(self, host: str | None) -> Host:
        """A fabric host by name, or the root namespace (None: the switch ports')."""
        return self.live.fabric.host(host) if host is not None else RootHost()

    def _tc(self, host: str | None, argv: list[str]) -> None:
        self._host(host).check(["tc", *argv], timeout=10)

    def delay(self, target: str, delay_ms: float, jitter_ms: float = 0.0) -> float:
        """netem delay (and jitter) as every end's egress queue, the link's buffer kept."""
        fabric = self.live.fabric
        for host, ifname in self._ends(target):
            netem = ["netem", "delay", f"{delay_ms:g}ms"]
            if jitter_ms:
                netem.append(f"{jitter_ms:g}ms")
            self._tc(host, ["qdisc", "replace", "dev", ifname, "parent",
                            f"1:{HTB_MINOR:x}", "handle", f"{HTB_MINOR:x}:", *netem,
                            "limit", str(fabric.queue_packets())])
        return delay_ms

    def undelay(self, target: str) -> int:
        """Every end's own egress queue again (as the fabric built it)."""
        fabric = self.live.fabric
        lk = find_link(self.spec, target)
        ends = self._ends(target)
        for host, ifname in ends:
            if fabric.red and host is None:
                argv = fabric.red_argv(ifname, lk.mbps)[1:]
                argv[1] = "replace"
            else:
                leaf = (["netem", "delay", f"{self.spec.delay_ms:g}ms", "limit",
                         str(fabric.queue_packets())] if fabric.delay_applied else
                        ["bfifo", "limit", str(self.spec.queue_kb * 1000)])
                argv = ["qdisc", "replace", "dev", ifname, "parent", f"1:{HTB_MINOR:x}",
                        "handle", f"{HTB_MINOR:x}:", *leaf]
            self._tc(host, argv)
        return len(ends)

    def set_rate(self, target: str, mbps: float | None) -> float:
        """The link's rate at every end (its HTB class), or its configured rate (None)."""
        lk = find_link(self.spec, target)
        rate = lk.mbps if mbps is None else mbps
        for host, ifname in self._ends(target):
            self._htb(host, ifname, rate, burst_bytes(rate, self.spec.mtu))
        return rate

    def throttle(self, rail: str, rate_mbps: float, burst_kb: float) -> float:
        """The host end of a NIC's cable: ``burst_kb`` at full rate, then ``rate_mbps``."""
        lk = find_link(self.spec, rail)
        self._htb(lk.a, lk.a_intf, rate_mbps, int(burst_kb * 1000))
        return rate_mbps

    def _htb(self, host: str | None, ifname: str, mbps: float, burst: int) -> None:
        """An end's HTB class changed in place: rate and ceil ``mbps``, each with a
        bucket of ``burst`` bytes."""
        self._tc(host, ["class", "change", "dev", ifname, "parent", "1:", "classid",
                        f"1:{HTB_MINOR:x}", "htb", "rate", f"{mbps:g}mbit", "ceil",
                        f"{mbps:g}mbit", "burst", str(burst), "cburst", str(burst)])

    # -- loss --------------------------------------------------------------------------
    def _table(self, target: str, end: int) -> str:
        """The nftables table of a degraded link's end: named by the link (not by its
        place in the spec, which a rack added to the fabric moves)."""
        lk = find_link(self.spec, target)
        return f"{self.spec.prefix}deg{zlib.crc32(link_name(self.spec, lk).encode()):08x}x{end}"

    def degrade(self, target: str, loss: float) -> float:
        """Drop ``loss`` of the frames leaving every end of the link (nftables egress)."""
        if target in self._degraded:
            self.restore(target)
        lk = find_link(self.spec, target)
        ends: list[tuple[str | None, str]] = [(None, lk.b_intf)]
        ends.append((lk.a if lk.kind == "host" else None, lk.a_intf))
        applied = []
        for i, (host, ifname) in enumerate(ends):
            table = self._table(target, i)
            self._nft(host, ["-f", "-"], port_loss_rules(table, ifname, loss))
            if host is None:  # in the root namespace (a host's table goes with its namespace)
                register(run_id_of(table), "nft", f"netdev {table}")
            self.stack.callback(self._nft, host, ["delete", "table", "netdev", table], None,
                                False)
            applied.append((host, table))
        self._degraded[target] = applied
        return loss

    def restore(self, target: str) -> int:
        applied = self._degraded.pop(target, [])
        for host, table in applied:
            self._nft(host, ["delete", "table", "netdev", table], None)
            if host is None:
                forget(run_id_of(table), "nft", f"netdev {table}")
        return len(applied)

    def _nft(self, host: str | None, args: list[str], stdin: str | None,
             check: bool = True) -> None:
        where = self._host(host)
        if check:
            where.check(["nft", *args], timeout=10, stdin=stdin)
        else:
            where.run(["nft", *args], timeout=10, stdin=stdin)
