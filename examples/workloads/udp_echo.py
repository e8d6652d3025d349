"""A workload kind of one's own: UDP request and echo between two hosts, its round-trip
times in the run's records.

The whole of a kind in one module: its parameters (a pydantic model), what it checks
against the fabric, the server it starts before traffic does, the client it starts at
the entry's ``at_s`` and the figures it adds to ``summary.json``. Its processes are this
file run as a script (``serve`` and ``ping``), in the hosts' namespaces. Named in a
scenario by its dotted path, its parameters under ``params:``::

    workloads:
      - {kind: "examples.workloads.udp_echo:UdpEcho", host: n0, at_s: 1,
         params: {to: 3, count: 50, interval_ms: 20}}

``examples/workload-kind.yaml`` runs it beside agent chains.
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import time
from pathlib import Path

from pydantic import Field

from testbed.errors import ConfigError
from testbed.workloads.kinds import WorkloadKind, address, last_json
from topologies.params import Section

PORT = 7400  # entry i's server listens on PORT + i


class EchoParams(Section):
    to: int = Field(ge=0, description="node index of the host that echoes")
    count: int = Field(20, ge=1, le=100000, description="requests sent")
    interval_ms: float = Field(10, gt=0, le=10000, description="time between requests")
    size: int = Field(64, ge=8, le=8972, description="bytes a request carries")
    timeout_ms: float = Field(500, gt=0, le=10000, description="a reply later is lost")


class UdpEcho(WorkloadKind):
    """Requests from ``host`` to ``params.to``, echoed back; RTT and losses recorded."""

    NAME = "udp_echo"
    PARAMS = EchoParams

    def check(self, entry, spec, where):
        to = entry["params"]["to"]
        if to >= len(spec.hosts) or to == entry["host"]:
            raise ConfigError(f"{where}.params.to", "must be another host's node index "
                                                    f"(0..{len(spec.hosts) - 1})")

    def output(self, item):
        return f"workload-{item.index}-udp_echo.json"

    def prepare(self, run, item):
        e = item.entry
        run.spawn(item, "server", e["params"]["to"],
                  [sys.executable, __file__, "serve", "--bind",
                   address(run.spec, e["params"]["to"], e["plane"]),
                   "--port", str(PORT + item.index)])

    def start(self, run, item):
        e, p = item.entry, item.entry["params"]
        run.spawn(item, "client", e["host"], [
            sys.executable, __file__, "ping", "--to", address(run.spec, p["to"], e["plane"]),
            "--port", str(PORT + item.index), "--count", str(p["count"]),
            "--interval-ms", f"{p['interval_ms']:g}", "--size", str(p["size"]),
            "--timeout-ms", f"{p['timeout_ms']:g}"], stdout_file=run.out / self.output(item))

    def record(self, run, item, rec):
        rec["echo"] = last_json(run.out / rec["output"])


# -- its processes ---------------------------------------------------------------------
def serve(bind: str, port: int) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind((bind, port))
        while True:
            data, peer = sock.recvfrom(65535)
            sock.sendto(data, peer)


def ping(to: str, port: int, count: int, interval_ms: float, size: int,
         timeout_ms: float) -> int:
    from traffic.stats import summary

    rtts, lost = [], 0
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.connect((to, port))
        for seq in range(count):
            sent = time.perf_counter()
            sock.send(seq.to_bytes(8, "big") + bytes(size - 8))
            deadline = sent + timeout_ms / 1000
            while True:  # replies of earlier requests that came late are skipped
                sock.settimeout(max(0.0, deadline - time.perf_counter()))
                try:
                    reply = sock.recv(65535)
                except (TimeoutError, ConnectionRefusedError):
                    lost += 1
                    break
                if reply[:8] == seq.to_bytes(8, "big"):
                    rtts.append((time.perf_counter() - sent) * 1000)
                    break
            time.sleep(max(0.0, sent + interval_ms / 1000 - time.perf_counter()))
    print(json.dumps({"sent": count, "received": len(rtts), "lost": lost,
                      "rtt_ms": summary(rtts, (50, 99))}))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=Path(__file__).name)
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("serve")
    s.add_argument("--bind", required=True)
    s.add_argument("--port", type=int, required=True)
    c = sub.add_parser("ping")
    c.add_argument("--to", required=True)
    c.add_argument("--port", type=int, required=True)
    c.add_argument("--count", type=int, default=20)
    c.add_argument("--interval-ms", type=float, default=10)
    c.add_argument("--size", type=int, default=64)
    c.add_argument("--timeout-ms", type=float, default=500)
    args = parser.parse_args(argv)
    if args.command == "serve":
        return serve(args.bind, args.port)
    return ping(args.to, args.port, args.count, args.interval_ms, args.size, args.timeout_ms)


if __name__ == "__main__":
    sys.exit(main())
