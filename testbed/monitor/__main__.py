"""The lab monitor process: ``python -m testbed.monitor --spec SPEC --out DIR --status FILE``.

Started by the lab beside its fabric (a helper of the run, in its own process group),
it binds 127.0.0.1 (``--port``: a number, or ``auto`` for one the kernel picks, so
that two labs never collide), says where in ``--status`` (a JSON line: ``listening``
with the port, or ``failed`` with the reason), then samples the lab every ``--interval``
seconds until SIGTERM, and at once when a link of the namespace changes state (a cut
shows on the page within its next poll, not a tick later).
"""

from __future__ import annotations

import argparse
import json
import select
import signal
import sys
import threading
import time
from pathlib import Path

from testbed.host.netlink import link_watch
from testbed.monitor.fabric import FabricWatch
from testbed.monitor.metrics import FabricCollector
from testbed.monitor.server import MonitorServer
from testbed.monitor.timeline import Timeline
from testbed.numbers import flag
from topologies.spec import FabricSpec


def watch_of(spec: Path, out: Path, kind: str = "fabric"):
    """(watch, collector, namespaces whose links it follows) of the lab ``spec`` describes:
    a fabric's spec.json (``kind`` storage: with the storage scenario's reads), or a
    backbone's monitor-backbone.json."""
    data = json.loads(spec.read_text())
    if data.get("kind") == "backbone":
        from testbed.monitor.backbone import BackboneCollector, BackboneWatch

        watch = BackboneWatch(data, out)
        return watch, BackboneCollector(watch), [f"/run/netns/{n['netns']}"
                                                 for n in data["nodes"]]
    watch = FabricWatch(FabricSpec.from_dict(data), out, storage=kind == "storage")
    return watch, FabricCollector(watch), [None]


def status(path: Path, **event) -> None:
    with path.open("a") as f:
        f.write(json.dumps({"t": time.time(), **event}) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="testbed.monitor")
    parser.add_argument("--spec", type=Path, required=True,
                        help="the fabric's spec.json or the backbone's monitor-backbone.json")
    parser.add_argument("--out", type=Path, required=True, help="the lab's results folder")
    parser.add_argument("--status", type=Path, required=True)
    parser.add_argument("--port", default="auto", help="a port on 127.0.0.1, or auto")
    parser.add_argument("--name", default="lab")
    parser.add_argument("--kind", default="fabric", choices=("fabric", "storage", "backbone"))
    parser.add_argument("--interval", type=flag(0, 3600), default=1.0)
    args = parser.parse_args(argv)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    watch, collector, namespaces = watch_of(args.spec, args.out, args.kind)
    timeline, lock = Timeline(), threading.Lock()
    try:
        server = MonitorServer(watch=watch, timeline=timeline, collector=collector,
                               lab={"lab": args.name, "interval_s": args.interval},
                               port=0 if args.port == "auto" else int(args.port), lock=lock)
    except OSError as exc:
        status(args.status, event="failed", port=args.port, error=exc.strerror or str(exc))
        return 2
    watch.ask()
    with lock:
        watch.sample(timeline)
    server.start()
    status(args.status, event="listening", port=server.port,
           url=f"http://127.0.0.1:{server.port}/")
    changes = [link_watch(path) for path in namespaces]
    next_at = time.monotonic() + args.interval
    while not stop.is_set():
        try:
            ready, _, _ = select.select(changes, [], [], max(0.0, next_at - time.monotonic()))
        except InterruptedError:
            continue
        if ready:  # a link changed: drain the news, sample now (at most 10 a second)
            for sock in ready:
                try:
                    while sock.recv(1 << 16):
                        pass
                except BlockingIOError:
                    pass
            time.sleep(0.1)
        else:
            next_at += args.interval
            if next_at < time.monotonic():  # a slow sample: skip the missed ticks
                next_at = time.monotonic() + args.interval
        if not ready:  # slow questions (a backbone's routers), never before a cut shows
            watch.ask()
        with lock:
            watch.sample(timeline)
    for sock in changes:
        sock.close()
    server.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
