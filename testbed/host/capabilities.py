"""Probe the host's kernel features once and choose a backend for each.

The result goes into every run's manifest, so a number says what it was measured on.
Probes run in a throw-away network namespace named with the testbed prefix.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import shutil
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path

from testbed.errors import HostError
from testbed.host.hosts import RootHost
from testbed.host.naming import forget, new_run_id, register, run_prefix

TCP_AVAILABLE = "/proc/sys/net/ipv4/tcp_available_congestion_control"


@dataclass
class Capabilities:
    """What the kernel offers, and which backend the testbed uses because of it."""

    kernel: str
    ovs_kernel_datapath: bool
    netem: bool
    htb: bool
    red: bool
    fq_codel: bool
    macsec: bool
    nftables: bool
    ovs_afxdp: bool = False  # Open vSwitch offers AF_XDP ports (linked with libxdp)
    tcp_dctcp: bool = False  # the kernel's DCTCP congestion control (tcp_dctcp)
    #: net.ipv4.tcp_available_congestion_control, in the kernel's order
    tcp_congestion_controls: list[str] = field(default_factory=list)
    versions: dict[str, str] = field(default_factory=dict)
    #: the machine's architecture as the kernel names it (x86_64, aarch64)
    architecture: str = field(default_factory=platform.machine)

    @property
    def ovs_datapath(self) -> str:
        """Mininet's OVSSwitch datapath: ``kernel`` where the module exists, else ``user``."""
        return "kernel" if self.ovs_kernel_datapath else "user"

    def backends(self) -> dict[str, str]:
        """Which implementation each feature uses on this host, in words."""
        return {
            "switch datapath": (
                "Open vSwitch kernel datapath"
                if self.ovs_kernel_datapath
                else "Open vSwitch userspace datapath (netdev), offloads off on every veth, "
                "8 MB packet-socket buffers"
            ),
            "switch ports": (
                "kernel vports" if self.ovs_kernel_datapath
                else "AF_PACKET (AF_XDP ports exist but transmit around the egress qdiscs that "
                "emulate each link: python -m bench.afxdp_bench)" if self.ovs_afxdp
                else "AF_PACKET"
            ),
            "link rate": "HTB + byte FIFO" if self.htb else "not shaped (HTB missing)",
            "link delay": "netem" if self.netem else "not applied (netem missing)",
            "MACsec": "kernel MACsec" if self.macsec else "userspace 802.1AE",
            "host TCP": (", ".join(self.tcp_congestion_controls) or "unknown")
            + ("" if self.tcp_dctcp else " (no tcp_dctcp)"),
        }

    def to_dict(self) -> dict:
        data = asdict(self)
        data["ovs_datapath"] = self.ovs_datapath
        data["backends"] = self.backends()
        return data


def _run(argv: list[str]) -> bool:
    """Whether ``argv`` succeeds (a probe: a missing program or a hang is a no)."""
    try:
        return RootHost().run(argv).returncode == 0
    except HostError:
        return False


def _version(argv: list[str]) -> str:
    if shutil.which(argv[0]) is None:
        return "missing"
    done = subprocess.run(argv, capture_output=True, text=True)
    out = (done.stdout or done.stderr).strip()
    return out.splitlines()[0] if out else "unknown"


def _package_version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "missing"


def _mininet_version() -> str:
    try:
        from mininet.net import VERSION
    except ImportError:
        return "missing"
    return VERSION


def _ovs_kernel_module() -> bool:
    if Path("/sys/module/openvswitch").exists():
        return True
    return shutil.which("modprobe") is not None and _run(["modprobe", "-q", "openvswitch"])


def _ovs_afxdp() -> bool:
    if shutil.which("ovs-vsctl") is None:
        return False
    done = subprocess.run(["ovs-vsctl", "--timeout=5", "get", "Open_vSwitch", ".",
                           "iface_types"], capture_output=True, text=True)
    return done.returncode == 0 and "afxdp" in done.stdout


def tcp_congestion_controls() -> list[str]:
    """The TCP congestion controls the kernel offers, tcp_dctcp loaded first if it can be
    (its module is loaded on demand, and only then listed)."""
    if shutil.which("modprobe") is not None:
        _run(["modprobe", "-q", "tcp_dctcp"])
    try:
        return Path(TCP_AVAILABLE).read_text().split()
    except OSError:
        return []


def probe(run_id: str | None = None) -> Capabilities:
    """Probe kernel features in a temporary namespace ``tb<run_id>probe``; needs root.

    Without a run id the probe takes a fresh one, so that two probes never share (or
    fail on) one namespace.
    """
    run_id = run_id or new_run_id()
    ns = f"{run_prefix(run_id)}probe"
    in_ns = ["ip", "netns", "exec", ns]
    created = _run(["ip", "netns", "add", ns])
    if created:
        register(run_id, "netns", ns)
    try:
        if created:
            _run(in_ns + ["ip", "link", "set", "lo", "up"])
            _run(in_ns + ["ip", "link", "add", "tbpd0", "type", "dummy"])

        def qdisc(*spec: str) -> bool:
            if not created:
                return False
            ok = _run(in_ns + ["tc", "qdisc", "add", "dev", "lo", "root", *spec])
            _run(in_ns + ["tc", "qdisc", "del", "dev", "lo", "root"])
            return ok

        caps = Capabilities(
            kernel=platform.release(),
            ovs_kernel_datapath=_ovs_kernel_module(),
            ovs_afxdp=_ovs_afxdp(),
            netem=qdisc("netem", "delay", "1ms"),
            htb=qdisc("htb", "default", "1"),
            red=qdisc("red", "limit", "400000", "min", "30000", "max", "90000", "avpkt", "1000",
                      "burst", "55", "ecn", "probability", "0.1"),
            fq_codel=qdisc("fq_codel"),
            macsec=created and _run(in_ns + ["ip", "link", "add", "link", "tbpd0", "tbpm0",
                                             "type", "macsec"]),
            nftables=created and shutil.which("nft") is not None
            and _run(in_ns + ["nft", "add", "table", "inet", "tbprobe"]),
        )
    finally:
        if created:
            _run(["ip", "netns", "del", ns])
            forget(run_id, "netns", ns)
    caps.tcp_congestion_controls = tcp_congestion_controls()
    caps.tcp_dctcp = "dctcp" in caps.tcp_congestion_controls
    caps.versions = {
        "python": platform.python_version(),
        "open_vswitch": _version(["ovs-vsctl", "--version"]),
        "mininet": _mininet_version(),
        "os_ken": _package_version("os-ken"),
        "scapy": _package_version("scapy"),
        "pyroute2": _package_version("pyroute2"),
        "iperf3": _version(["iperf3", "--version"]),
        "tcpreplay": _version(["tcpreplay", "--version"]),
    }
    return caps


def format_report(caps: Capabilities) -> str:
    """The ``testbed doctor`` text: features found, versions, and backends chosen."""
    yes = {True: "yes", False: "no"}
    lines = [f"kernel {caps.kernel} on {caps.architecture} (running as uid {os.geteuid()})",
             "", "kernel features:"]
    for name in ("ovs_kernel_datapath", "ovs_afxdp", "htb", "netem", "red", "fq_codel", "macsec",
                 "nftables", "tcp_dctcp"):
        lines.append(f"  {name:<20} {yes[getattr(caps, name)]}")
    lines += ["", "versions:"]
    lines += [f"  {k:<20} {v}" for k, v in caps.versions.items()]
    lines += ["", "backends:"]
    lines += [f"  {k:<20} {v}" for k, v in caps.backends().items()]
    return "\n".join(lines)


def machine() -> str:
    """The host a figure was measured on, in words: CPU model, cores, memory, kernel,
    Open vSwitch's datapath (what the docs name beside every figure)."""
    info = Path("/proc/cpuinfo").read_text().splitlines()
    # x86 names its model; arm64 kernels print only implementer and part numbers
    cpu = next((ln.split(":", 1)[1].strip() for ln in info if ln.startswith("model name")),
               platform.processor() or f"{platform.machine()} CPU")
    cpu = cpu.replace("(R)", "").replace("(TM)", "")
    cores = sum(1 for ln in info if ln.startswith("processor"))
    virtual = any(ln.startswith("flags") and " hypervisor" in ln for ln in info)
    mem_kb = int(Path("/proc/meminfo").read_text().split()[1])
    datapath = "kernel" if Path("/sys/module/openvswitch").exists() else "userspace"
    return (f"{'a virtual machine with ' if virtual else ''}{cores} cores of an {cpu} "
            f"({platform.machine()}), "
            f"{mem_kb // 1024**2} GB, kernel {platform.release()}, Open vSwitch's "
            f"{datapath} datapath")
