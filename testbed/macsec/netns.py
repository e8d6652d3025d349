"""Small helpers around ``ip``: namespaces, commands inside them, process groups.

Everything created through these helpers is named with the caller's prefix so
that :func:`leftovers` can prove a run cleaned up after itself.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

from .errors import BackendError

log = logging.getLogger(__name__)


def run(cmd: Sequence[str], netns: str | None = None, check: bool = True,
        timeout: float = 30) -> subprocess.CompletedProcess[str]:
    """Run a command (inside ``netns`` when given); raise BackendError on failure."""
    full = (["ip", "netns", "exec", netns] if netns else []) + list(cmd)
    proc = subprocess.run(full, capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise BackendError(f"{' '.join(full)} failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc


def add_netns(name: str) -> None:
    """Create a namespace and bring its loopback up."""
    run(["ip", "netns", "add", name])
    run(["ip", "link", "set", "lo", "up"], netns=name)


def no_ipv6(netns: str) -> None:
    """No IPv6 on the devices of ``netns``: the links are IPv4, and IPv6 autoconfiguration
    would send frames (router solicitations, MLD, DAD) that the SecY counters then count."""
    for knob in ("all", "default"):
        run(["sysctl", "-qw", f"net.ipv6.conf.{knob}.disable_ipv6=1"], netns=netns)


def del_netns(name: str) -> None:
    """Delete a namespace if it exists (interfaces inside go with it)."""
    if name in list_netns():
        run(["ip", "netns", "del", name], check=False)


def list_netns() -> list[str]:
    """Names of all named network namespaces."""
    proc = run(["ip", "netns", "list"], check=False)
    return [line.split()[0] for line in proc.stdout.splitlines() if line.strip()]


def leftovers(prefix: str) -> list[str]:
    """Namespaces and root-namespace links whose names start with ``prefix``."""
    found = [f"netns {n}" for n in list_netns() if n.startswith(prefix)]
    for line in run(["ip", "-o", "link", "show"], check=False).stdout.splitlines():
        name = line.split(":")[1].strip().split("@")[0]
        if name.startswith(prefix):
            found.append(f"link {name}")
    return found


def spawn(cmd: Sequence[str], netns: str, log_path: Path,
          env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """Start a command in ``netns`` in a new session (its own process group)."""
    with open(log_path, "ab") as out:
        return subprocess.Popen(
            ["ip", "netns", "exec", netns, *cmd],
            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True, env=env,
        )


def stop_group(proc: subprocess.Popen[bytes], timeout: float = 5.0) -> int | None:
    """SIGTERM the process group, wait up to ``timeout``, then SIGKILL it."""
    try:
        pgid = os.getpgid(proc.pid)
    except ProcessLookupError:
        pgid = None
    if pgid is not None and proc.poll() is None:
        try:
            os.killpg(pgid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + timeout
    while proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    if proc.poll() is None and pgid is not None:
        log.warning("process group %d ignored SIGTERM, killing it", pgid)
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=timeout)
    return proc.returncode


def link_stats(ifname: str, netns: str) -> dict[str, int]:
    """rx/tx packet and byte counters of an interface, from sysfs inside the namespace."""
    out = run(["sh", "-c", f"cd /sys/class/net/{ifname}/statistics && "
               "for f in rx_packets tx_packets rx_bytes tx_bytes rx_dropped tx_dropped; "
               "do echo $f $(cat $f); done"], netns=netns).stdout
    return {k: int(v) for k, v in (line.split() for line in out.splitlines())}
