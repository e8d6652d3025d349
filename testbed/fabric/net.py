"""Fabric bring-up and teardown: Mininet hosts, Open vSwitch switches, shaped links.

Mininet builds the namespaces and veth pairs from the spec (names, ports and MACs come
from the spec, never from Mininet's defaults). Switches speak OpenFlow 1.3 to the run's
controller with fail_mode=secure. The rest is set here: every link shaped to its rate with
HTB and a short FIFO (the switch buffer; on switch ports a RED queue that marks CE instead
when the run asks for switch-side ECN and the kernel has RED), offloads off on every veth
when the userspace datapath is used (or TCP stalls), addresses and sysctls in each host
namespace.
"""

from __future__ import annotations

import errno
import functools
import logging
import os
import shlex
import socket
import subprocess
import time
import zlib
from collections.abc import Callable, Collection, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path

from pyroute2 import IPRoute
from pyroute2.ethtool import Ethtool
from pyroute2.netlink.exceptions import NetlinkError
from pyroute2.netlink.rtnl.tcmsg import plugins as tc_plugins
from pyroute2.netlink.rtnl.tcmsg import sched_pfifo

from testbed.errors import BringUpError, HostError
from testbed.fabric import drops, ovs_socket, qos, switchd
from testbed.fabric.qos import TrafficClass
from testbed.fabric.switchd import SwitchDaemons, SwitchSettings
from testbed.host import netns
from testbed.host import sysctls as host_settings
from testbed.host.capabilities import Capabilities
from testbed.host.hosts import MininetHost, RootHost
from testbed.host.naming import OVS_EXTERNAL_ID, register, register_netns, run_dir
from testbed.host.netlink import QueueReader
from testbed.host.procs import Helper, host_switch_pid, stop_strays
from topologies.spec import FabricSpec, HostInterface

log = logging.getLogger(__name__)

#: after the run's prefix: the bridge added to and deleted from the host's ovs-vswitchd
#: before a userspace fabric's own (:func:`warm_host_switch`)
WARM_BRIDGE = "warm"


def warm_host_switch(prefix: str, run_id: str) -> None:
    """Add one userspace bridge to the host's ovs-vswitchd and delete it again, before a
    userspace fabric's bridges.

    A freshly started ovs-vswitchd forwarded its first userspace datapath at 2.5 times
    the CPU of every later one: the sizing bench's small fabric (3 switches, 8 ports)
    with four agent chains on one leaf took 0.375-0.405 cores of its forwarding thread
    over 8 s windows, 1.3 million minor page faults a window and its heap's top moved
    (``brk``) 3,000 times a second, where the next fabric on the same daemon, same load,
    took 0.15 cores and no page fault (``bench/fresh_switch_bench.py``). Every poll frees
    a batch of frame buffers; whatever a deleted datapath frees ends the churn for the
    life of the process (most likely glibc's allocator raising its trim threshold once a
    large block is freed), and the host's Open vSwitch gives no way to tune its allocator
    short of changing how it is started (the lab's own switch processes are started with
    it tuned instead, :data:`switchd.MALLOC`). The bridge is the run's (its name
    registered and the run's id on it), so ``testbed clean`` removes it if the run dies
    in between; nothing else of the host's Open vSwitch changes. On a daemon whose
    datapath other bridges hold, nothing is freed and nothing changes.
    """
    name = prefix + WARM_BRIDGE
    register(run_id, "bridge", name)
    for argv in (["--may-exist", "add-br", name, "--", "set", "Bridge", name,
                  "datapath_type=netdev", f"external_ids:{OVS_EXTERNAL_ID}={run_id}"],
                 ["--if-exists", "del-br", name]):
        done = RootHost().run(["ovs-vsctl", *argv])
        if done.returncode:
            raise BringUpError(f"ovs-vsctl {argv[1]} {name}: {done.stderr.strip()}")


# pyroute2 0.9 has no bfifo plugin; bfifo's options are pfifo's (struct tc_fifo_qopt)
tc_plugins.setdefault("bfifo", sched_pfifo)

#: ethtool feature names turned off on every veth for the userspace datapath
OFFLOAD_WORDS = ("checksum", "segmentation", "rx-gro", "tx-scatter-gather", "rx-lro")
HTB_MINOR = 0x10
#: socket buffer that ovs-vswitchd's packet sockets get while the fabric comes up
OVS_SOCKET_BUFFER = 8 * 1024 * 1024


def _mininet():
    try:
        from mininet.link import Intf, Link
        from mininet.log import setLogLevel
        from mininet.net import Mininet
        from mininet.node import OVSSwitch, RemoteController
    except ImportError as exc:  # the venv must see the distribution's Mininet
        raise HostError(
            "Mininet is not importable: install the 'mininet' package and use the venv made "
            "with --system-site-packages (make setup)"
        ) from exc

    class QuietRemote(RemoteController):
        """Mininet's remote controller without its listening check: that check telnets
        to the controller's port and decodes what comes back as UTF-8, and an OpenFlow
        HELLO arriving first (its xid is random bytes) raised UnicodeDecodeError after
        the node's shell had started, leaving the shell behind. The lab waits for its
        controller's own events instead."""

        def checkListening(self) -> None:  # noqa: N802 (Mininet's)
            return None

    return Mininet, OVSSwitch, QuietRemote, (Link, Intf), setLogLevel


def lab_switch_class(ovs_switch, daemons: SwitchDaemons):
    """Mininet's OVSSwitch for bridges of the lab's own switch processes: every ovs-vsctl
    command goes to the database of the bridge's process, the bridge is of the lab's
    datapath type (:data:`testbed.fabric.switchd.DATAPATH_TYPE`) with the veths as its
    AF_PACKET ports, ovs-ofctl reaches a bridge through its management socket, and the
    host's Open vSwitch is never asked (Mininet's ``setup`` checks it)."""

    class LabSwitch(ovs_switch):
        isSetup = True  # noqa: N815 (Mininet's)
        OVSVersion = "3.1"  # noqa: N815 (Mininet's)

        def vsctl(self, *args, **kwargs):
            return super().vsctl(f"--db={daemons.remote(self.name)}", *args, **kwargs) \
                if not self.batch else super().vsctl(*args, **kwargs)

        def dpctl(self, *args):
            return self.cmd("ovs-ofctl", args[0], daemons.mgmt(self.name), *args[1:])

        def bridgeOpts(self) -> str:  # noqa: N802 (Mininet's)
            return (super().bridgeOpts().replace(" datapath_type=netdev", "")
                    + f" datapath_type={switchd.DATAPATH_TYPE}")

        @classmethod
        def batchStartup(cls, switches, run=None):  # noqa: N802 (Mininet's)
            """Each process's bridges in one ovs-vsctl transaction on its database."""
            for inst in daemons.instances:
                mine = [sw for sw in switches if sw.name in set(inst.bridges)]
                words = " ".join(cmd.strip() for sw in mine for cmd in sw.commands)
                for sw in mine:
                    sw.commands, sw.batch = [], False
                if not words:
                    continue
                # Mininet writes each switch's commands as shell words: split as a
                # shell would, run without one
                done = RootHost().run(["ovs-vsctl", f"--db={inst.remote}",
                                       *shlex.split(words)])
                if done.returncode:
                    raise BringUpError(f"switch process {inst.index}: ovs-vsctl: "
                                       f"{done.stderr.strip()[:300]}")
            return switches

        def stop(self, deleteIntfs=True):  # noqa: N803 (Mininet's)
            """Nothing per bridge: the process goes, with every bridge it has."""

    return LabSwitch


def _netlink_link(link_cls, intf_cls, ipr: IPRoute, mtu: int, group: int,
                  seal: bool = True):
    """Mininet's Link, with its veth pair made over netlink instead of shell commands.

    Mininet makes each pair with an ``ip link add`` and then sets each end up (and a
    host end's MAC: down, hw ether, up) with ``ifconfig``, each a command through a
    node's shell: six on a host link, 4,600 process starts on a 128-switch fabric. Here
    one netlink request makes the pair with its MACs, the host end already in its
    namespace (set up there with the rest of the host's configuration) and the root end
    up, both with the fabric's MTU, the root end in the run's interface ``group`` (which
    :meth:`Fabric.stop` deletes at once); the interfaces' ``config`` has nothing left to
    do.
    """

    class NetlinkIntf(intf_cls):
        def config(self, **_params) -> dict:
            return {}

    class NetlinkLink(link_cls):
        def __init__(self, node1, node2, **params):
            super().__init__(node1, node2, **{**params, "intf": NetlinkIntf})

        def makeIntfPair(self, intf1, intf2, addr1=None, addr2=None,  # noqa: N802 (Mininet's)
                         node1=None, node2=None, deleteIntfs=True):  # noqa: N803
            make_veth(ipr, (intf1, addr1, node1), (intf2, addr2, node2), mtu=mtu,
                      group=group, seal=seal)

    return NetlinkLink


def make_tunnel(ipr: IPRoute, tunnel: Tunnel, node, *, mtu: int, group: int,
                intf_cls) -> None:
    """The gretap end of a link between two machines, in the run's interface ``group``
    with the fabric's MTU: a switch's port (Mininet adds it to the bridge with the
    link's port number), or moved into a host's namespace (the tunnel's own packets
    stay in the root namespace, where the machine's address is)."""
    where = f"link end {tunnel.ifname} ({tunnel.kind} to {tunnel.remote})"
    done = RootHost().run(["ip", "link", "add", "name", tunnel.ifname, "type",
                           *tunnel.ip_args()])
    if done.returncode:
        raise BringUpError(f"{where}: {done.stderr.strip()}")
    try:
        index = ipr.link_lookup(ifname=tunnel.ifname)[0]
        args = {"address": tunnel.mac} if tunnel.mac else {}
        ipr.link("set", index=index, mtu=mtu, group=group, **args)
        if node.inNamespace:
            ipr.link("set", index=index, net_ns_pid=node.pid)
            return
        seal_from_host(tunnel.ifname)
        ipr.link("set", index=index, state="up")
    except (IndexError, NetlinkError) as exc:
        raise BringUpError(f"{where}: {exc}") from None
    intf_cls(tunnel.ifname, node=node, port=tunnel.port, up=None)  # it is up already


def make_veth(ipr: IPRoute, end1: tuple, end2: tuple, *, mtu: int, group: int,
              seal: bool = True) -> None:
    """A veth pair between two Mininet nodes' ends ``(name, MAC or None, node)``: made in
    the root namespace (where switches live), a host's end moved into its namespace; the
    end made first is in interface ``group`` (deleting it deletes its peer)."""
    ends = sorted((end1, end2), key=lambda e: e[2].inNamespace)  # a root end first
    (name, mac, node), (peer_name, peer_mac, peer_node) = ends
    if node.inNamespace:
        raise BringUpError(f"link {name}-{peer_name}: veths between two hosts are not built")
    peer: dict = {"ifname": peer_name, "mtu": mtu}
    if peer_mac:
        peer["address"] = peer_mac
    if peer_node.inNamespace:
        peer["net_ns_pid"] = peer_node.pid
    args = {"address": mac} if mac else {}
    try:
        ipr.link("add", ifname=name, kind="veth", mtu=mtu, group=group, peer=peer, **args)
        roots = [name] if peer_node.inNamespace else [name, peer_name]
        for root_end in roots if seal else ():  # quiet before they come up
            seal_from_host(root_end)
        for root_end in roots:
            ipr.link("set", index=ipr.link_lookup(ifname=root_end)[0], state="up")
    except NetlinkError as exc:
        raise BringUpError(f"link {name}-{peer_name}: {exc}") from None


#: per-interface sysctls of a switch port in the host's namespace: the host's own stack
#: takes no part in the lab (the userspace datapath reads the port with a packet socket,
#: and the kernel still sees every frame; on either datapath the stack would send its own
#: frames out of the port): no IPv6 at all, no ARP reply for any of the
#: host's addresses, and IPv4 from the lab to a host address dropped by the strict
#: reverse-path check (no route to the lab's hosts goes through the port)
ROOT_PORT_SYSCTLS = (("ipv6", "disable_ipv6", "1"), ("ipv4", "arp_ignore", "8"),
                     ("ipv4", "rp_filter", "1"), ("ipv4", "accept_local", "0"))


def seal_from_host(ifname: str, proc_sys: Path = Path("/proc/sys/net")) -> None:
    """Set :data:`ROOT_PORT_SYSCTLS` on ``ifname`` (a family the kernel lacks is
    skipped); they go with the interface."""
    for family, key, value in ROOT_PORT_SYSCTLS:
        path = proc_sys / family / "conf" / ifname / key
        try:
            path.write_text(value)
        except FileNotFoundError:
            if (proc_sys / family / "conf" / "all" / key).exists():
                raise BringUpError(f"{ifname}: no {path}") from None


def offloads_off(ethtool: Ethtool, ifname: str) -> None:
    """Checksum, segmentation and receive offloads off on ``ifname`` (the userspace
    datapath forwards frames as the veth hands them over: a TCP segment left for a
    later offload stalls the flow)."""
    features = ethtool.get_features(ifname)
    for name, feature in features.features.items():
        if any(word in name for word in OFFLOAD_WORDS):
            feature.enable = False
    ethtool.set_features(ifname, features)


def _no_ipv6(proc_sys: Path = Path("/proc/sys/net/ipv6/conf")) -> None:
    """IPv6 off in the calling thread's namespace (a host's: the lab speaks IPv4 only,
    and a host's stack would send router and neighbour solicitations into it); nothing
    to do where the kernel has no IPv6."""
    for key in ("all", "default"):
        path = proc_sys / key / "disable_ipv6"
        if path.exists():
            path.write_text("1")


def burst_bytes(mbps: float, mtu: int) -> int:
    """HTB burst: one 1 ms timer tick at the rate, and at least two full frames.

    >>> burst_bytes(100, 1500), burst_bytes(100, 9000), burst_bytes(10000, 9000)
    (12500, 18028, 1250000)
    """
    return max(2 * (mtu + 14), int(mbps * 1e6 / 8 / 1000))


def socket_buffer_defaults(size: int) -> AbstractContextManager[None]:
    """Raise ``net.core.{r,w}mem_default`` to ``size`` for a moment, then restore them.

    The userspace datapath reads and writes every port through AF_PACKET sockets that
    ovs-vswitchd opens when a port is added (receive) and on its first send (one socket
    shared by all ports). With the 208 KB default, a few milliseconds in which
    ovs-vswitchd is not scheduled overflow them and drop packets that no emulated queue
    dropped; and all egress queues of all switches share one 208 KB send budget. Sockets
    keep the size they were created with, so the host's defaults go back at once.

    They are the whole host's: :mod:`testbed.host.sysctls` changes them under a lock,
    keeps the originals under /run/testbed while any run holds them raised, and lets
    ``testbed clean`` put them back after a run that was killed meanwhile.
    """
    return host_settings.raised({"net.core.rmem_default": size, "net.core.wmem_default": size})


#: seconds the first and last host may take to reach each other on every plane
REACH_S = 20.0
#: the kernel's switch for expedited RCU grace periods (sysfs, not a sysctl)
RCU_EXPEDITED = "/sys/kernel/rcu_expedited"


def fast_rcu() -> AbstractContextManager[None]:
    """Expedite the kernel's RCU grace periods for a moment (while a fabric comes up or
    goes), then put the host's setting back.

    Building and removing a fabric waits for an RCU grace period (about 17 ms on the
    2-core development machine) at every veth deleted, every root qdisc grafted onto an
    up interface and every packet socket ovs-vswitchd closes when a port leaves its
    userspace datapath: 1,280 switch ports made a 128-switch fabric's ``ovs-vsctl
    del-br`` take 30 s, nearly all of it asleep. Expedited, a grace period takes
    microseconds (measured: 64 bridges deleted in 1.8 s instead of 6.5 s). It is the
    whole host's setting, so it is held like the socket buffers
    (:mod:`testbed.host.sysctls`: shared between runs, put back by the last one, and
    by ``testbed clean`` after a killed run); a kernel without it is left as it is.
    """
    if not host_settings.sysctl_path(RCU_EXPEDITED).exists():
        return nullcontext()
    return host_settings.raised({RCU_EXPEDITED: 1})


@dataclass(frozen=True)
class Growth:
    """What :meth:`Fabric.grow` cabled in."""

    switches: list[str]
    hosts: list[str]
    links: list


@dataclass(frozen=True)
class Tunnel:
    """The end on this machine of a link whose other end runs on another machine: a
    gretap device (Linux's Ethernet in GRE; or a VXLAN device where the kernels lack
    GRE) named as the link's interface, between the two machines' addresses, with a key
    of its own (:mod:`testbed.cluster.runtime`)."""

    ifname: str
    node: str
    port: int
    local: str
    remote: str
    key: int
    #: the interface's MAC when the end is a host's (a switch port takes the kernel's)
    mac: str | None = None
    #: ``gretap`` or ``vxlan`` (:data:`testbed.cluster.placement.TUNNELS`)
    kind: str = "gretap"

    def ip_args(self) -> list[str]:
        """``ip link add NAME type ...``'s words for this end."""
        if self.kind == "vxlan":
            return ["vxlan", "id", str(self.key), "local", self.local, "remote", self.remote,
                    "dstport", str(VXLAN_PORT), "ttl", "64"]
        return ["gretap", "local", self.local, "remote", self.remote, "key", str(self.key),
                "ttl", "64"]


#: the UDP port of the lab's VXLAN tunnels (IANA's)
VXLAN_PORT = 4789


@dataclass
class FabricTimes:
    build_s: float = 0.0
    configure_s: float = 0.0
    start_s: float = 0.0
    paths_s: float = 0.0
    stop_s: float = 0.0


class Fabric:
    """One emulated fabric, built from a spec; ``start`` then ``stop`` (always)."""

    def __init__(
        self,
        spec: FabricSpec,
        caps: Capabilities,
        *,
        run_id: str,
        controller_port: int,
        red: dict | None = None,
        classes: tuple[TrafficClass, ...] = (),
        switches: SwitchSettings | None = None,
        log_dir: Path | None = None,
        here: Collection[str] | None = None,
        tunnels: Sequence[Tunnel] = (),
    ):
        """``red``: ECN-marking RED thresholds for every switch port's queue (``min_kb``,
        ``max_kb``, ``probability``) instead of the byte FIFO; needs ``caps.red``.
        ``classes``: traffic classes on every port (:mod:`testbed.fabric.qos`); none: one FIFO.
        ``switches``: which Open vSwitch processes forward (:mod:`testbed.fabric.switchd`: the
        host's unless they name the lab's own); the lab processes' logs go to
        ``log_dir`` (else the run folder). ``here``: the switches and hosts this machine
        runs when the fabric is spread over several (None: all); ``tunnels``: the ends
        here of the links to the others."""
        self.spec = spec
        self.red = red
        self.classes = classes
        self.caps = caps
        self.run_id = run_id
        self.controller_port = controller_port
        self.times = FabricTimes()
        self.net = None
        self.switch_settings = switches or SwitchSettings()
        self.log_dir = log_dir
        #: the lab's own switch processes, or None on the host's Open vSwitch
        self.daemons: SwitchDaemons | None = None
        #: why ovs-vswitchd's send socket could not be made OVS_SOCKET_BUFFER large, or None
        self.send_socket_problem: str | None = None
        self.here = None if here is None else frozenset(here)
        self.tunnels = {t.ifname: t for t in tunnels}

    def is_here(self, name: str) -> bool:
        """Whether the switch or host ``name`` runs on this machine."""
        return self.here is None or name in self.here

    # -- bring-up ----------------------------------------------------------------------
    def start(self, await_paths: Callable[[], None] | None = None, *,
              check: bool = True) -> FabricTimes:
        """Build, configure and check the fabric (``check``: hosts reach each other on
        every plane; off for a controller that is not ours).

        ``await_paths`` blocks until the controller has installed the paths; the first
        packets then cross the fabric (a ping on every plane) while the socket buffers are
        raised, so that ovs-vswitchd's shared send socket is created large as well.
        """
        if os.geteuid() != 0:
            raise HostError("building a fabric needs root (namespaces, Open vSwitch)")
        mininet, ovs_switch, remote, (link_base, intf_base), set_log_level = _mininet()
        set_log_level("error")
        mininet.inited = True  # skip Mininet's fixLimits(): it rewrites host-wide sysctls
        t0 = time.monotonic()
        self.net = net = mininet(
            topo=None, build=False, controller=None, autoSetMacs=False,
            autoStaticArp=False, waitConnected=False,
        )
        # Mininet starts a node's shell when the node is added, deletes an interface of
        # the same name before it makes a link, and a bridge before it adds one: the
        # names below are the run's from that moment on (the run id was chosen so that
        # no name with its prefix existed), so they are registered before Mininet acts.
        controller = f"{self.spec.prefix}c"
        register(self.run_id, "mininet", controller)
        net.addController(remote(controller, ip="127.0.0.1", port=self.controller_port))
        switch_cls = ovs_switch
        if self.switch_settings.lab_daemons(self.caps.ovs_kernel_datapath):
            shards = [[n for n in shard if self.is_here(n)]
                      for shard in switchd.plan(self.spec, self.switch_settings.shards)]
            self.daemons = SwitchDaemons(
                [shard for shard in shards if shard],
                folder=run_dir(self.run_id) / switchd.FOLDER, log_dir=self.log_dir,
                malloc=self.switch_settings.malloc)
            self.daemons.start()
            switch_cls = lab_switch_class(ovs_switch, self.daemons)
        elif self.caps.ovs_datapath == "user":
            warm_host_switch(self.spec.prefix, self.run_id)
        for sw in self.spec.switches:
            if not self.is_here(sw.name):
                continue
            register(self.run_id, "mininet", sw.name)
            register(self.run_id, "bridge", sw.name)
            net.addSwitch(
                sw.name, cls=switch_cls, dpid=f"{sw.dpid:016x}", datapath=self.caps.ovs_datapath,
                protocols="OpenFlow13", failMode="secure", batch=True,
            )
        for host in self.spec.hosts:
            if not self.is_here(host.name):
                continue
            register(self.run_id, "mininet", host.name)
            self._record_namespace(net.addHost(host.name, ip=None))
        with IPRoute() as ipr:
            # every root-side port is sealed from the host's stack: the userspace datapath
            # reads a port with a packet socket, so the stack sees every frame too; on the
            # kernel datapath OVS takes a port's frames first, but the stack would still
            # send its own (IPv6 router and neighbour solicitations, MLD) into the lab
            link_cls = _netlink_link(link_base, intf_base, ipr, self.spec.mtu,
                                     link_group(self.run_id))
            for lk in self.spec.links:
                if not (self.is_here(lk.a) and self.is_here(lk.b)):
                    continue
                register(self.run_id, "link", lk.a_intf)
                register(self.run_id, "link", lk.b_intf)
                params = {}
                if lk.kind == "host":
                    params["addr1"] = self.spec.host(lk.a).interface_by_name(lk.a_intf).mac
                net.addLink(
                    lk.a, lk.b, port1=lk.a_port, port2=lk.b_port,
                    intfName1=lk.a_intf, intfName2=lk.b_intf, cls=link_cls, **params,
                )
            for tunnel in self.tunnels.values():
                register(self.run_id, "link", tunnel.ifname)
                make_tunnel(ipr, tunnel, net.get(tunnel.node), mtu=self.spec.mtu,
                            group=link_group(self.run_id), intf_cls=intf_base)
        buffers = (socket_buffer_defaults(OVS_SOCKET_BUFFER) if self.caps.ovs_datapath == "user"
                   else nullcontext())
        with buffers, fast_rcu():
            net.build()
            net.start()
            self.times.build_s = time.monotonic() - t0
            t1 = time.monotonic()
            self._tag_bridges()
            self._configure_switch_ports()
            for host in self.spec.hosts:
                if self.is_here(host.name):
                    self._configure_host(host.name, host.interfaces)
            self.times.configure_s = time.monotonic() - t1
            self.times.start_s = time.monotonic() - t0
            if await_paths is not None:
                t2 = time.monotonic()
                await_paths()
                self.times.paths_s = time.monotonic() - t2
                if check:
                    self.check_reachability()
        if self.caps.ovs_datapath == "user" and await_paths is not None:
            # created small (another bridge sent first, or none of a process's bridges sent
            # while the defaults were raised): raise it in place
            if self.daemons is not None:
                self._first_sends()
            self.send_socket_problem = ovs_socket.enlarge(OVS_SOCKET_BUFFER, self.switch_pids())
        return self.times

    def _record_namespace(self, node) -> None:
        """Record the namespace of a host just added (its shell's), so that ``testbed
        clean`` finds what runs there after the shell has died with this process."""
        if register_netns(self.run_id, f"/proc/{node.pid}/ns/net") is None:
            raise BringUpError(f"host {node.name}: its shell (pid {node.pid}) has no network "
                               "namespace of its own")

    def grow(self, spec: FabricSpec) -> Growth:
        """Cable what ``spec`` has beyond this fabric's spec into the running fabric (a
        rack: its switches, hosts and links, and the ports its links add to switches that
        run): nothing that runs is restarted or changed. New switches get switch
        processes of their own (the lab's) or bridges on the host's Open vSwitch, connect
        to the controller as the others did, and forward nothing until it knows them.

        ``spec`` must keep every switch, host and link of the fabric as it is
        (:class:`BringUpError` otherwise, before anything is made)."""
        old = self.spec
        old_switches = {sw.name for sw in old.switches}
        for what, before, after in (("switch", old.switches, spec.switches),
                                    ("host", old.hosts, spec.hosts),
                                    ("link", old.links, spec.links)):
            kept = set(after)
            changed = next((x for x in before if x not in kept), None)
            if changed is not None:
                raise BringUpError(f"the grown fabric changes {what} "
                                   f"{getattr(changed, 'name', changed)}")
        names = old_switches | {h.name for h in old.hosts}
        switches = [sw for sw in spec.switches if sw.name not in names]
        hosts = [h for h in spec.hosts if h.name not in names]
        links = [lk for lk in spec.links if lk not in set(old.links)]
        _, ovs_switch, _, (link_base, intf_base), _ = _mininet()
        net = self.net
        switch_cls = ovs_switch
        if self.daemons is not None:
            self.daemons.add([[sw.name for sw in switches]] if switches else [])
            switch_cls = lab_switch_class(ovs_switch, self.daemons)
        added = []
        for sw in switches:
            register(self.run_id, "mininet", sw.name)
            register(self.run_id, "bridge", sw.name)
            added.append(net.addSwitch(
                sw.name, cls=switch_cls, dpid=f"{sw.dpid:016x}",
                datapath=self.caps.ovs_datapath, protocols="OpenFlow13", failMode="secure",
                batch=True))
        for host in hosts:
            register(self.run_id, "mininet", host.name)
            self._record_namespace(net.addHost(host.name, ip=None))
        new_names = {sw.name for sw in switches}
        ports: dict[str, list[tuple[str, int]]] = {}  # running switch -> its new ports
        buffers = (socket_buffer_defaults(OVS_SOCKET_BUFFER) if self.caps.ovs_datapath == "user"
                   else nullcontext())
        with buffers, fast_rcu():
            with IPRoute() as ipr:
                link_cls = _netlink_link(link_base, intf_base, ipr, spec.mtu,
                                         link_group(self.run_id))
                for lk in links:
                    register(self.run_id, "link", lk.a_intf)
                    register(self.run_id, "link", lk.b_intf)
                    params = {}
                    if lk.kind == "host":
                        params["addr1"] = spec.host(lk.a).interface_by_name(lk.a_intf).mac
                    net.addLink(lk.a, lk.b, port1=lk.a_port, port2=lk.b_port,
                                intfName1=lk.a_intf, intfName2=lk.b_intf, cls=link_cls,
                                **params)
                    for end, intf, port in ((lk.a, lk.a_intf, lk.a_port),
                                            (lk.b, lk.b_intf, lk.b_port)):
                        if end in old_switches:
                            ports.setdefault(end, []).append((intf, port))
            for sw in added:
                sw.start(net.controllers)
            if added:
                switch_cls.batchStartup(added)
            for bridge, new_ports in ports.items():  # one transaction a running switch
                args = [w for intf, port in new_ports for w in (
                    "--", "add-port", bridge, intf,
                    "--", "set", "Interface", intf, f"ofport_request={port}")]
                if self.daemons is not None:
                    self.daemons.vsctl(self.daemons.instance(bridge), args)
                else:
                    done = RootHost().run(["ovs-vsctl", *args])
                    if done.returncode:
                        raise BringUpError(f"ovs-vsctl add-port on {bridge}: "
                                           f"{done.stderr.strip()[:300]}")
            self.spec = spec
            self.__dict__.pop("_host_addresses", None)  # the tenant classes' addresses
            self._tag_bridges(new_names)
            # the new links' switch ends (spec.switch_ports() holds no host's NIC)
            self._configure_switch_ports({i for lk in links for i in (lk.a_intf, lk.b_intf)})
            for host in hosts:
                self._configure_host(host.name, host.interfaces)
        if self.caps.ovs_datapath == "user":
            if self.daemons is not None:
                self._first_sends()
            self.send_socket_problem = ovs_socket.enlarge(OVS_SOCKET_BUFFER, self.switch_pids())
        return Growth([sw.name for sw in switches], [h.name for h in hosts], links)

    def switch_pids(self) -> list[int]:
        """The ovs-vswitchd processes that forward this fabric: the lab's own, or the
        host's (none when it cannot be found)."""
        if self.daemons is not None:
            return self.daemons.pids()
        host = host_switch_pid()
        return [host] if host is not None else []

    def _first_sends(self) -> None:
        """One frame out of a port of each lab process that has not sent yet, so that it
        has its send socket now (its size is then raised in place): a frame of the IEEE
        local experimental EtherType to an address nobody has, which the next switch
        drops (table miss) and a host's stack ignores."""
        have = ovs_socket.send_sockets()
        for inst in self.daemons.instances:
            if inst.vswitchd is None or inst.vswitchd.pid in have:
                continue
            bridge = inst.bridges[0]
            port = next(p.port for p in self.spec.switch_ports() if p.switch == bridge)
            frame = "02bad0000001" + "02bad0000002" + "88b5" + "00" * 46
            subprocess.run(["ovs-ofctl", "-O", "OpenFlow13", "packet-out",
                            self.daemons.mgmt(bridge), "CONTROLLER", f"output:{port}", frame],
                           capture_output=True)

    def check_reachability(self, within_s: float = REACH_S) -> None:
        """First and last host reach each other on every plane, or BringUpError.

        Pings are retried until ``within_s`` (for all planes together) has passed: on a
        large fabric ovs-vswitchd can still be taking in the controller's rules when the
        paths are reported installed (a 128-switch fabric answered on plane 0 after
        4 s; one ping with a 2 s wait failed the run)."""
        a, b = self.spec.hosts[0], self.spec.hosts[-1]
        deadline = time.monotonic() + within_s
        for plane in range(self.spec.planes):
            ip = b.interface(plane, 0).ip
            while not self.ping(a.name, ip, count=1, wait_s=1):
                if time.monotonic() >= deadline:
                    raise BringUpError(f"{a.name} cannot reach {b.name} on plane {plane}")

    def _tag_bridges(self, only: set[str] | None = None) -> None:
        if self.daemons is not None:
            for inst in self.daemons.instances:
                args = []
                for name in inst.bridges:
                    if only is not None and name not in only:
                        continue
                    args += ["--", "set", "Bridge", name,
                             f"external_ids:{OVS_EXTERNAL_ID}={self.run_id}"]
                if args:
                    self.daemons.vsctl(inst, args)
            return
        argv = ["ovs-vsctl"]
        for sw in self.spec.switches:
            if (only is not None and sw.name not in only) or not self.is_here(sw.name):
                continue
            argv += ["--", "set", "Bridge", sw.name,
                     f"external_ids:{OVS_EXTERNAL_ID}={self.run_id}"]
        done = RootHost().run(argv)
        if done.returncode:
            raise BringUpError(f"ovs-vsctl could not tag the bridges: {done.stderr.strip()}")

    def _switch_ports(self, only: set[str] | None = None) -> list[tuple[str, float]]:
        return [(p.ifname, p.mbps) for p in self.spec.switch_ports()
                if (only is None or p.ifname in only) and self.is_here(p.switch)]

    def local_roles(self) -> dict[str, str]:
        """:meth:`port_roles` of the switch ports on this machine."""
        here = {ifname for ifname, _ in self._switch_ports()}
        return {ifname: role for ifname, role in self.port_roles().items() if ifname in here}

    def planned_classes(self, mbps: float) -> list[qos.PlannedClass]:
        return qos.plan(self.classes, mbps, self.spec.mtu, self._host_addresses)

    @functools.cached_property
    def _host_addresses(self) -> dict[str, tuple[str, ...]]:
        """Tenant classes match these; one walk of the hosts, not one per port."""
        return qos.host_addresses(self.spec)

    def _class_lines(self, ifname: str, mbps: float, switch: bool = True) -> list[str]:
        """``tc -batch`` lines of a port's traffic classes (RED in a switch's lossy ones
        where ECN marking is the switch's)."""
        red = " ".join(self.red_argv(ifname, mbps)[9:]) if self.red and switch else None
        if red:
            red = red.replace(f"limit {self.spec.queue_kb * 1000}", "limit {limit}", 1)
        return qos.tc_lines(ifname, mbps, self.spec.mtu, self.planned_classes(mbps), red)

    def _shape_classes(self, only: set[str] | None = None) -> None:
        """All switch ports' class trees in one ``tc -batch`` (hundreds of lines)."""
        lines = [line for ifname, mbps in self._switch_ports(only)
                 for line in self._class_lines(ifname, mbps)]
        done = RootHost().run(["tc", "-batch", "-"], stdin="\n".join(lines) + "\n",
                              timeout=300)
        if done.returncode:
            raise BringUpError(f"traffic classes on the switch ports: {done.stderr.strip()}")

    def _configure_switch_ports(self, only: set[str] | None = None) -> None:
        """Shape every switch port (root namespace; ``only``: those named) with HTB +
        FIFO (or its traffic classes); offloads off."""
        if self.classes and self.caps.htb:
            self._shape_classes(only)
        ethtool = Ethtool() if self.caps.ovs_datapath == "user" else None
        try:
            with IPRoute() as ipr:
                for ifname, mbps in self._switch_ports(only):
                    try:
                        index = socket.if_nametoindex(ifname)
                    except OSError:
                        raise BringUpError(f"switch port {ifname} was not created") from None
                    try:
                        if not self.classes:
                            self._shape(ipr, index, mbps)  # the MTU came with the veth
                    except NetlinkError as exc:
                        raise BringUpError(f"switch port {ifname}: {exc}") from None
                    if ethtool:
                        offloads_off(ethtool, ifname)
        finally:
            if ethtool:
                ethtool.close()

    @property
    def delay_applied(self) -> bool:
        """Whether links carry their propagation delay (netem), or it is only recorded."""
        return self.spec.delay_ms > 0 and self.caps.netem

    def queue_packets(self) -> int:
        """netem counts its queue in packets: the byte buffer in full-size frames."""
        return max(4, self.spec.queue_kb * 1000 // self.spec.mtu)

    def _shape(self, ipr: IPRoute, index: int, mbps: float, switch: bool = True) -> None:
        """HTB at the link's rate over the port's queue: RED where the switch marks ECN
        (``switch``), netem where links carry their delay, else a FIFO of the buffer."""
        if not self.caps.htb:
            return
        rate = f"{mbps:g}mbit"
        ipr.tc("add", "htb", index, 0x10000, default=HTB_MINOR)
        # the ceiling's bucket as deep as the rate's: else a late timer's tokens are lost
        burst = burst_bytes(mbps, self.spec.mtu)
        ipr.tc("add-class", "htb", index, 0x10000 | HTB_MINOR, parent=0x10000,
               rate=rate, ceil=rate, burst=burst, cburst=burst, prio=1)
        if self.red and switch:
            self._red(ipr, index, mbps)
        elif self.delay_applied:
            ipr.tc("add", "netem", index, HTB_MINOR << 16, parent=0x10000 | HTB_MINOR,
                   delay=int(self.spec.delay_ms * 1000), limit=self.queue_packets())
        else:
            ipr.tc("add", "bfifo", index, HTB_MINOR << 16, parent=0x10000 | HTB_MINOR,
                   limit=self.spec.queue_kb * 1000)

    def red_argv(self, ifname: str, mbps: float) -> list[str]:
        """``tc`` line for a RED queue that marks CE between the ``red`` thresholds.

        pyroute2 0.9 has no RED plugin, hence the command line. Burst follows tc-red(8):
        (2 * min + max) / (3 * avpkt).
        """
        red, avpkt = self.red or {}, 1500
        lo, hi = int(red["min_kb"] * 1000), int(red["max_kb"] * 1000)
        return ["tc", "qdisc", "add", "dev", ifname, "parent", f"1:{HTB_MINOR:x}",
                "handle", f"{HTB_MINOR:x}:", "red", "limit", str(self.spec.queue_kb * 1000),
                "min", str(lo), "max", str(hi), "avpkt", str(avpkt),
                "burst", str(max(1, (2 * lo + hi) // (3 * avpkt))),
                "probability", f"{red['probability']:g}", "bandwidth", f"{mbps:g}mbit", "ecn"]

    def _red(self, ipr: IPRoute, index: int, mbps: float) -> None:
        ifname = ipr.get_links(index)[0].get_attr("IFLA_IFNAME")
        done = RootHost().run(self.red_argv(ifname, mbps))
        if done.returncode:
            raise BringUpError(f"RED queue on {ifname} failed: {done.stderr.strip()}")

    @property
    def host_link_mbps(self) -> dict[str, float]:
        """Each host interface's link rate (explicit graphs may give links their own)."""
        return {lk.a_intf: lk.mbps for lk in self.spec.links if lk.kind == "host"}

    def _configure_host(self, name: str, interfaces: Sequence[HostInterface]) -> None:
        """A host namespace over netlink, from a thread that enters it (no shell): IPv6
        off, each interface's MTU, address and link up, offloads off for the userspace
        datapath, and its shaping (or its traffic classes)."""
        path = netns.of_pid(self.host_pid(name))
        rates = self.host_link_mbps  # a walk of every link: once a host
        try:
            netns.made_in(path, _no_ipv6)
            ipr = netns.made_in(path, IPRoute)
        except OSError as exc:
            raise BringUpError(f"host {name}: {exc}") from None
        ethtool = None
        try:
            if self.caps.ovs_datapath == "user":
                ethtool = netns.made_in(path, Ethtool)
            for intf in interfaces:
                where = f"host {name}, {intf.name}"
                try:
                    index = ipr.link_lookup(ifname=intf.name)[0]
                    ipr.link("set", index=index, mtu=self.spec.mtu, state="up")
                    ipr.addr("add", index=index, address=intf.ip, prefixlen=intf.prefixlen)
                    if ethtool:
                        offloads_off(ethtool, intf.name)
                    if not self.classes:
                        self._shape(ipr, index, rates.get(intf.name, self.spec.link_mbps),
                                    switch=False)
                except IndexError:
                    raise BringUpError(f"{where}: no such interface") from None
                except (NetlinkError, OSError) as exc:
                    raise BringUpError(f"{where}: {exc}") from None
        except OSError as exc:  # the ethtool sockets could not be made
            raise BringUpError(f"host {name}: {exc}") from None
        finally:  # the netlink socket closed also when the ethtool one failed
            ipr.close()
            if ethtool:
                ethtool.close()
        if self.caps.htb and self.classes:  # dozens of lines: over a shell line's limit
            lines = [line for intf in interfaces for line in self._class_lines(
                intf.name, rates.get(intf.name, self.spec.link_mbps), switch=False)]
            done = self.host(name).run(["tc", "-batch", "-"], stdin="\n".join(lines) + "\n")
            if done.returncode:
                raise BringUpError(f"traffic classes on host {name}: {done.stderr.strip()}")

    # -- use ---------------------------------------------------------------------------
    def ofctl_target(self, bridge: str) -> str:
        """What ovs-ofctl is given for ``bridge``: its management socket when it lives in
        one of the lab's own switch processes, else its name (the host's Open vSwitch)."""
        return self.daemons.mgmt(bridge) if self.daemons is not None else bridge

    def host_pid(self, name: str) -> int:
        return self.net.get(name).pid

    def servers_watch(self) -> None:
        """Open the measured window on the other machines' fidelity monitors (a fabric
        over several machines, :mod:`testbed.cluster.runtime`; none here)."""

    def servers_fidelity(self) -> list[dict]:
        """Close it: each other machine's record over the window
        (:func:`testbed.core.fidelity_verdict.server_record`)."""
        return []

    def host_record(self, name: str) -> dict:
        """Where a host is, for the lab's record (``testbed exec`` enters it from there)."""
        pid = self.host_pid(name)
        return {"pid": pid, "netns": f"/proc/{pid}/ns/net"}

    def host(self, name: str) -> MininetHost:
        """The host ``name`` as something that runs commands in its namespace."""
        return MininetHost(name, self.host_pid(name))

    def run(self, host: str, argv: Sequence[str],
            timeout: float = 30.0) -> subprocess.CompletedProcess:
        """Run a short command inside a host's namespace and wait for it."""
        return self.host(host).run(argv, timeout=timeout)

    def spawn(self, host: str, name: str, argv: Sequence[str], *, pid_dir: Path,
              log: Path | None = None, env: dict[str, str] | None = None,
              stdout_pipe: bool = False, stdout_file: Path | None = None) -> Helper:
        """Start a long-running helper inside a host's namespace, in its own group."""
        return self.host(host).spawn(name, argv, pid_dir=pid_dir, log=log, env=env,
                                     stdout_pipe=stdout_pipe, stdout_file=stdout_file)

    def ping(self, host: str, ip: str, count: int = 1, wait_s: float = 1.0,
             interval_s: float = 1.0) -> bool:
        return self.host(host).ping(ip, count=count, wait_s=wait_s, interval_s=interval_s)

    def port_roles(self) -> dict[str, str]:
        """Each switch port's role from the spec's graph (``leaf_uplink``,
        ``spine_downlink``, ``leaf_downlink`` on a leaf-spine)."""
        return self.spec.port_roles()

    def queue_stats(self) -> dict[str, dict[str, int]]:
        """Egress counters of every switch port's root qdisc: bytes, packets, drops.

        One netlink dump of the root namespace's qdiscs, parsed for the counters only:
        asking pyroute2 per port dumped (and parsed) every qdisc of the host once per
        port, minutes on a 128-switch fabric."""
        reader = QueueReader(list(self.local_roles()))
        try:
            queues = reader.read()
        finally:
            reader.close()
        return {ifname: {"bytes": q.sent_bytes, "packets": q.sent_packets, "drops": q.drops}
                for ifname, q in queues.items()}

    def unseen_drops(self) -> dict:
        """One reading of the drop counters no switch queue has (:mod:`testbed.fabric.drops`);
        on the userspace datapath also the frames the switch processes read and the
        frames their ports' queues took (``switch_received``, ``switch_intake``)."""
        reading = drops.read(self.spec.prefix, self.local_roles(),
                             {h.name: self.net.get(h.name).pid for h in self.spec.hosts
                              if self.is_here(h.name)},
                             self.switch_pids())
        if self.caps.ovs_datapath == "user":
            ctls = ([None] if self.daemons is None
                    else [str(i.ctl) for i in self.daemons.instances])
            reader = QueueReader(list(self.local_roles()))
            try:
                reading["switch_intake"], reading["switch_queue_drops"] = \
                    drops.switch_intake(reader.read(), reader.read_leaves())
            finally:
                reader.close()
            reading["switch_received"] = drops.received(ctls)
        return reading

    # -- teardown ----------------------------------------------------------------------
    def stop(self) -> float:
        """Remove the fabric; returns the seconds it took. Safe after a failed start.

        Faster than Mininet's ``net.stop()`` (one ``ip link del`` process per link), with
        RCU grace periods expedited (:func:`fast_rcu`): all bridges go in one ovs-vsctl
        transaction; the veths, made in the run's interface group, go with it in one
        netlink request (one by one, the kernel waited for a grace period at each veth: 17
        ms here, 13 s for 768 links; a veth's peer in a host namespace goes with it);
        what is left is deleted one by one; then every node's shell is ended.
        """
        t0 = time.monotonic()
        net, self.net = self.net, None
        daemons, self.daemons = self.daemons, None
        if net is not None or daemons is not None:
            try:
                with fast_rcu():
                    if daemons is not None:  # every bridge goes with its process
                        daemons.stop()
                    elif net is not None:
                        argv = ["ovs-vsctl", "-t", "30"]
                        for sw in net.switches:
                            argv += ["--", "--if-exists", "del-br", sw.name]
                        subprocess.run(argv, capture_output=True)
                    if net is not None:
                        self._delete_links()
            finally:
                if net is not None:
                    # what was started by hand in a host and detached (testbed exec ...
                    # iperf3 -s -D) would outlive its shell and keep its namespace
                    stop_strays([h.pid for h in net.hosts if h.pid])
                    # Mininet's RemoteController.stop() does nothing: every shell ends here
                    for node in net.hosts + net.switches + net.controllers:
                        node.terminate()
        self.times.stop_s = time.monotonic() - t0
        return self.times.stop_s

    def _delete_links(self) -> None:
        """Every veth of the fabric: the run's interface group in one request (each veth
        joined it when it was made), then whatever is left one by one."""
        group = link_group(self.run_id)
        with IPRoute() as ipr:
            try:
                ipr.link("del", index=0, group=group)
            except NetlinkError as exc:  # a kernel without group deletion: one by one
                log.debug("deleting interface group %d: %s", group, exc)
            for lk in self.spec.links:
                for name in (lk.b_intf, lk.a_intf):
                    try:
                        index = socket.if_nametoindex(name)
                    except OSError:  # gone (or in a host's namespace)
                        continue
                    _delete_link(ipr, index)


def link_group(run_id: str) -> int:
    """The interface group (``ip link ... group N``) of a run's links while they are
    deleted together: one of its own, from the run id (unique on the host).

    >>> hex(link_group("1a2b"))
    '0x7e571a2b'
    """
    try:
        low = int(run_id, 16) & 0xFFFF
    except ValueError:
        low = zlib.crc32(run_id.encode()) & 0xFFFF
    return 0x7E570000 | low


def _delete_link(ipr: IPRoute, index: int) -> None:
    """Delete an interface; one already gone with its peer is fine."""
    try:
        ipr.link("del", index=index)
    except NetlinkError as exc:
        if exc.code != errno.ENODEV:
            raise
