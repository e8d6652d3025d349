"""Namespaces of the MACsec links, and commands and processes inside them.

Commands enter a namespace through :mod:`testbed.host.hosts` (the one host-command
abstraction) and process groups are stopped by :func:`testbed.host.procs.stop_group`;
what is here is the MACsec library's vocabulary on top: errors as
:class:`~testbed.macsec.errors.BackendError`, and :func:`leftovers` by prefix, so a run
can prove it cleaned up after itself.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Sequence
from pathlib import Path

from pyroute2 import NetlinkError

from testbed.errors import HostError
from testbed.host import procs
from testbed.host.commands import batch_word
from testbed.host.hosts import NetnsHost, RootHost
from testbed.host.naming import forget, register, run_id_of
from testbed.host.netns import made_in
from testbed.host.redact import shown, text

from .errors import BackendError


def run(cmd: Sequence[str], netns: str | None = None, check: bool = True,
        timeout: float = 30) -> subprocess.CompletedProcess[str]:
    """Run a command (inside ``netns`` when given); raise BackendError on failure. A
    command that carries a key goes through :func:`run_batch` instead."""
    host = NetnsHost(netns) if netns else RootHost()
    try:
        proc = host.run(cmd, timeout=timeout)
    except HostError as exc:  # it hung, or the program is missing
        raise BackendError(str(exc)) from None
    if check and proc.returncode != 0:
        raise BackendError(f"{shown(host.argv(cmd))} failed ({proc.returncode}): "
                           f"{text(proc.stderr.strip())}")
    return proc


def run_batch(cmds: Sequence[Sequence[str]], netns: str | None = None,
              timeout: float = 30) -> None:
    """``ip`` commands (argvs that start with ``ip``), in order, through one ``ip -batch``
    (inside ``netns`` when given) whose lines come on standard input: a SAK given to ``ip
    macsec`` shows in no process's command line (``/proc/PID/cmdline`` is anyone's to
    read). Stops at the first that fails: a BackendError naming it, its keys hidden."""
    lines = []
    for argv in cmds:
        if not argv or argv[0] != "ip":
            raise BackendError(f"not an ip command: {shown(argv)}")
        try:
            lines.append(" ".join(batch_word(a) for a in argv[1:]))
        except ValueError:
            raise BackendError(f"not one ip -batch word in: {shown(argv)}") from None
    if not lines:
        return
    host = NetnsHost(netns) if netns else RootHost()
    try:
        proc = host.run(["ip", "-batch", "-"], timeout=timeout, stdin="\n".join(lines) + "\n")
    except HostError as exc:
        raise BackendError(str(exc)) from None
    if proc.returncode != 0:
        failed = re.search(r"Command failed -:(\d+)", proc.stderr)
        index = int(failed.group(1)) - 1 if failed else -1
        if len(lines) == 1 or 0 <= index < len(lines):
            line = lines[index]
        else:  # ip macsec exits without naming its line
            line = f"-batch of {len(lines)} commands, from: {lines[0]}"
        where = f"{netns}: " if netns else ""
        raise BackendError(f"{where}ip {text(line)} failed ({proc.returncode}): "
                           f"{text(proc.stderr.strip())}")


def add_netns(name: str) -> None:
    """Create a namespace and bring its loopback up.

    A name with a run prefix is registered to its run, for ``testbed clean``.
    """
    run(["ip", "netns", "add", name])
    run_id = run_id_of(name)
    if run_id is not None:
        register(run_id, "netns", name)
    run(["ip", "link", "set", "lo", "up"], netns=name)


def no_ipv6(netns: str) -> None:
    """No IPv6 on the devices of ``netns``: the links are IPv4, and IPv6 autoconfiguration
    would send frames (router solicitations, MLD, DAD) that the SecY counters then count."""
    for knob in ("all", "default"):
        run(["sysctl", "-qw", f"net.ipv6.conf.{knob}.disable_ipv6=1"], netns=netns)


def close_uncontrolled_port(netns: str) -> None:
    """IPv4 in ``netns`` only through the protected interface, never the veth under it.

    The veth is 802.1AE's uncontrolled port: the kernel's SecY passes it every frame,
    untagged ones too, and with the veth holding the protected MAC (a macsec device's
    lower device) an attacker's untagged IP frame reached the host's stack (a UDP probe
    drew an ICMP reply). Strict reverse-path filtering drops what arrives there from
    addresses routed through the protected interface (or not routed at all), and ARP
    answers only for addresses of the interface asked.
    """
    for knob in ("all", "default"):
        run(["sysctl", "-qw", f"net.ipv4.conf.{knob}.rp_filter=1",
             f"net.ipv4.conf.{knob}.arp_ignore=1"], netns=netns)


def del_netns(name: str) -> None:
    """Delete a namespace if it exists (interfaces inside go with it)."""
    if name in list_netns():
        run(["ip", "netns", "del", name], check=False)
    run_id = run_id_of(name)
    if run_id is not None:
        forget(run_id, "netns", name)


def list_netns() -> list[str]:
    """Names of all named network namespaces (``ip -j netns list``)."""
    return [ns["name"] for ns in _ip_json(["netns", "list"])]


def leftovers(prefix: str) -> list[str]:
    """Namespaces and root-namespace links whose names start with ``prefix``."""
    found = [f"netns {n}" for n in list_netns() if n.startswith(prefix)]
    for link in _ip_json(["link", "show"]):
        if link["ifname"].startswith(prefix):
            found.append(f"link {link['ifname']}")
    return found


def _ip_json(args: Sequence[str]) -> list[dict]:
    """What ``ip -j ARGS`` printed in the root namespace (nothing is an empty list); a
    failure is a BackendError, so that a check for leftovers cannot pass by not looking."""
    out = run(["ip", "-j", *args]).stdout
    return json.loads(out) if out.strip() else []


def spawn(cmd: Sequence[str], netns: str, log_path: Path,
          env: dict[str, str] | None = None,
          pass_fds: Sequence[int] = ()) -> subprocess.Popen[bytes]:
    """Start a command in ``netns`` in a new session (its own process group); it inherits
    the file descriptors ``pass_fds`` (a forwarder's keys)."""
    with open(log_path, "ab") as out:
        return subprocess.Popen(
            NetnsHost(netns).argv(cmd),
            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True, env=env, pass_fds=tuple(pass_fds),
        )


def stop_group(proc: subprocess.Popen[bytes], timeout: float = 5.0) -> int | None:
    """SIGTERM the process group of ``proc``, wait up to ``timeout``, then SIGKILL it."""
    try:
        pgid = os.getpgid(proc.pid)
    except ProcessLookupError:
        pgid = None
    if pgid is not None:
        procs.stop_group(pgid, timeout, lambda: proc.poll() is not None)
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        return None


#: the counters :func:`link_stats` reads (the kernel's ``rtnl_link_stats64`` names)
LINK_COUNTERS = ("rx_packets", "tx_packets", "rx_bytes", "tx_bytes", "rx_dropped",
                 "tx_dropped")


def link_stats(ifname: str, netns: str) -> dict[str, int]:
    """rx/tx packet and byte counters of an interface in ``netns``, over netlink."""
    from pyroute2 import IPRoute

    ipr = made_in(f"/run/netns/{netns}", IPRoute)
    try:
        links = ipr.get_links(ifname=ifname)
    except NetlinkError as exc:
        raise BackendError(f"{netns}: {ifname}: {exc}") from None
    finally:
        ipr.close()
    if not links:
        raise BackendError(f"{netns}: no link {ifname}")
    stats = links[0].get_attr("IFLA_STATS64")
    return {key: int(stats[key]) for key in LINK_COUNTERS}
