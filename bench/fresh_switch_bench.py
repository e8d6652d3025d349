"""Benchmark: the first userspace fabric of a freshly started ovs-vswitchd, with and
without the warm-up bridge (:func:`testbed.fabric.net.warm_host_switch`).

The bench runs an Open vSwitch of its own, started as Debian's ``ovs-ctl`` starts the
host's (``ovs-vswitchd --mlockall``, glibc's allocator untuned), in a folder of its own
(``OVS_RUNDIR``: its database, sockets and bridges' management sockets), so that it can
start one fresh for each case; the host's Open vSwitch is not touched. Each case brings
up the sizing bench's small fabric (one plane, 2 leaves and a spine, 4 nodes) on it and
runs four agent chains on the driver's leaf for 8 s (the sizing bench's ``chains_near``
window), reading the daemon's CPU and minor page faults from ``/proc``:

* ``cold``: a fresh daemon, the fabric without the warm-up;
* ``warmed``: a fresh daemon, the fabric as the lab brings it up (the warm-up first);
* ``second``: a second fabric on the ``cold`` case's daemon (the reference: what a
  daemon that has held a fabric before costs).

Target (fixed before the first run): the ``warmed`` fabric's switch cores within 25 % of
the ``second``'s. The ``cold`` case is what the warm-up removes.

    python -m bench.fresh_switch_bench
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

from bench import sizing_bench
from testbed.fabric import drops, net
from testbed.fabric.switchd import SCHEMA
from testbed.host.capabilities import probe
from testbed.host.procs import dies_with_parent, wait_for

TOLERANCE = 0.25
HZ = os.sysconf("SC_CLK_TCK")
CHAINS = {"enabled": True, "driver": 0, "concurrency": 4,
          "services": dict(zip(sizing_bench.SERVICES, (1, 1, 1, 1), strict=True))}


def _daemon(folder: Path, stack: ExitStack) -> int:
    """A fresh ovsdb-server and ovs-vswitchd in ``folder``; the ovs-vswitchd's pid. Both
    end with the bench (or with ``stack``)."""
    folder.mkdir(parents=True)
    env = {**os.environ, "OVS_RUNDIR": str(folder)}
    db = folder / "conf.db"
    subprocess.run(["ovsdb-tool", "create", str(db), str(SCHEMA)], check=True)
    procs: list[subprocess.Popen] = []
    stack.callback(_stop, procs)
    procs.append(subprocess.Popen(
        ["ovsdb-server", str(db), f"--remote=punix:{folder / 'db.sock'}", "--no-chdir",
         "-vconsole:off", f"--log-file={folder / 'ovsdb-server.log'}"],
        env=env, preexec_fn=dies_with_parent))
    if not wait_for((folder / "db.sock").exists, 10, interval=0.01):
        raise RuntimeError("the bench's ovsdb-server did not start")
    subprocess.run(["ovs-vsctl", f"--db=unix:{folder / 'db.sock'}", "--no-wait", "init"],
                   check=True)
    procs.append(subprocess.Popen(
        ["ovs-vswitchd", f"unix:{folder / 'db.sock'}", "--mlockall", "--no-chdir",
         f"--pidfile={folder / 'ovs-vswitchd.pid'}",
         "-vconsole:off", f"--log-file={folder / 'ovs-vswitchd.log'}"],
        env=env, preexec_fn=dies_with_parent))
    if not wait_for(lambda: any(folder.glob("ovs-vswitchd.*.ctl")), 10, interval=0.01):
        raise RuntimeError("the bench's ovs-vswitchd did not start")
    return procs[-1].pid


def _stop(procs: list[subprocess.Popen]) -> None:
    """The daemons, last started first: each SIGTERM, then SIGKILL after 10 s."""
    for proc in reversed(procs):
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _usage(pid: int) -> tuple[int, int]:
    """(CPU ticks, minor page faults) of process ``pid`` so far."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2:].split()
    return int(fields[11]) + int(fields[12]), int(fields[7])


def _case(name: str, pid: int, tmp: Path, *, warm: bool) -> dict:
    """One fabric on the daemon ``pid``: its chains window's cores, faults and frames."""
    shipped = net.warm_host_switch
    if not warm:
        net.warm_host_switch = lambda prefix, run_id: None
    try:
        with ExitStack() as stack:
            live = sizing_bench._fabric("small", stack, tmp / name)
            ticks0, faults0 = _usage(pid)
            t0 = time.monotonic()
            r0 = drops.received([None]) or 0
            sizing_bench._generators(live, tmp, agents=CHAINS)
            frames = (drops.received([None]) or 0) - r0
            seconds = time.monotonic() - t0
            ticks1, faults1 = _usage(pid)
    finally:
        net.warm_host_switch = shipped
    return {"case": name, "switch_cores": round((ticks1 - ticks0) / HZ / seconds, 3),
            "minor_faults_per_s": round((faults1 - faults0) / seconds),
            "frames": frames, "seconds": round(seconds, 1)}


def main(argv: list[str] | None = None) -> int:
    if os.geteuid() != 0:
        print("fresh_switch_bench: needs root (it builds fabrics)", file=sys.stderr)
        return 2
    if probe().ovs_datapath != "user":  # as switch_cost: not this host's case
        print("fresh_switch_bench: this host has Open vSwitch's kernel module: its fabrics "
              "use the kernel datapath, where the warm-up does not apply (and a second "
              "ovs-vswitchd must not share the kernel's); nothing measured")
        return 0
    if Path("/sys/class/net/ovs-netdev").exists():
        print("fresh_switch_bench: the host's Open vSwitch holds a userspace datapath now "
              "(ovs-netdev exists): the bench's own would need that name", file=sys.stderr)
        return 2
    rows = []
    saved = os.environ.get("OVS_RUNDIR")
    with tempfile.TemporaryDirectory(prefix="tbfresh") as tmp_name:
        tmp = Path(tmp_name)
        try:
            for daemon, cases in (("a", (("cold", False), ("second", True))),
                                  ("b", (("warmed", True),))):
                with ExitStack() as stack:
                    folder = tmp / f"ovs-{daemon}"
                    pid = _daemon(folder, stack)
                    os.environ["OVS_RUNDIR"] = str(folder)  # the lab's ovs-vsctl and ofctl
                    for name, warm in cases:
                        rows.append(_case(name, pid, tmp, warm=warm))
                        print(f"  {rows[-1]}", flush=True)
        finally:
            if saved is None:
                os.environ.pop("OVS_RUNDIR", None)
            else:
                os.environ["OVS_RUNDIR"] = saved
    met, line = verdict(rows)
    print(f"  {'met   ' if met else 'MISSED'} {line}")
    return 0 if met else 1


def verdict(rows: list[dict]) -> tuple[bool, str]:
    """Whether the warmed first fabric is within :data:`TOLERANCE` of a second fabric.

    >>> verdict([{"case": "cold", "switch_cores": 0.39}, {"case": "second",
    ...          "switch_cores": 0.15}, {"case": "warmed", "switch_cores": 0.14}])[0]
    True
    >>> met, line = verdict([{"case": "cold", "switch_cores": 0.39}, {"case": "second",
    ...                      "switch_cores": 0.15}, {"case": "warmed", "switch_cores": 0.39}])
    >>> met, line[-39:]
    (False, 'a second fabric 0.150 (within 25 %: no)')
    """
    by = {r["case"]: r["switch_cores"] for r in rows}
    cold, warmed, second = by["cold"], by["warmed"], by["second"]
    met = abs(warmed - second) <= TOLERANCE * second
    return met, (f"first fabric of a fresh ovs-vswitchd: {cold:.3f} cores without the "
                 f"warm-up, {warmed:.3f} with it, a second fabric {second:.3f} (within "
                 f"{TOLERANCE * 100:g} %: {'yes' if met else 'no'})")


if __name__ == "__main__":
    sys.exit(main())
