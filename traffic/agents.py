"""CLI for the agent-chain workload: ``agent-service`` and ``agent-driver``.

``python -m traffic agent-service --listen IP:PORT [--listen ...] --role NAME
[--stats FILE.json] [--objects URL --reads-out FILE.jsonl [--keys N] [--zipf S]
[--seed N]]`` serves requests (see ``traffic.agent_protocol``) and prints
``ready`` once every listener is bound; with ``--objects`` it reads one object a
request first (see ``traffic.object_reads``).

``python -m traffic agent-driver --plan FILE.json --hops-out FILE.jsonl
--chains-out FILE.jsonl (--duration S | --chains N) [--concurrency C]
[--rate PER_S] [--seed N] [--timeout-ms T] [--ecn]`` runs chains (see
``traffic.agent_driver``) and prints one JSON summary line on stdout.

Exit codes: 0 ok (also after SIGTERM/SIGINT), 1 runtime failure (cannot bind,
cannot write output), 2 bad arguments or invalid plan (one stderr line naming
the field). ``--ecn`` is recorded in the summary with this namespace's
net.ipv4.tcp_ecn: Linux negotiates ECN for TCP per network namespace, so the
runner must set ``sysctl net.ipv4.tcp_ecn=1`` in the driver's namespace (the
services accept ECN with the default 2); TOS bits are not set per socket.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys

from traffic.agent_driver import Driver, DriverConfig
from traffic.agent_plan import PlanError, address, default_plan, validate_plan
from traffic.agent_service import parse_listen, run_service
from traffic.object_reads import KeyPicker, ObjectReader

__all__ = ["default_plan", "main"]


def _listen(text: str) -> tuple[str, int]:
    try:
        return parse_listen(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _service_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m traffic agent-service")
    parser.add_argument("--listen", type=_listen, action="append", required=True,
                        metavar="IP:PORT", help="address to listen on (repeat, one per plane)")
    parser.add_argument("--role", required=True, help="service role, e.g. retriever")
    parser.add_argument("--stats", metavar="FILE.json", help="write counters here on exit")
    reads = parser.add_argument_group(
        "object reads", "read one object a request first (a retriever; traffic.object_reads)")
    reads.add_argument("--objects", metavar="http://HOST:PORT/BUCKET",
                       help="where the objects are (the node's cache or the store)")
    reads.add_argument("--keys", type=_positive(int), default=100, help="objects in the bucket")
    reads.add_argument("--zipf", type=float, default=1.0, metavar="S",
                       help="Zipf exponent of key popularity (0: uniform; default 1)")
    reads.add_argument("--seed", type=int, default=0, help="seed of the key draws")
    reads.add_argument("--reads-out", metavar="FILE.jsonl", help="one record per read")
    args = parser.parse_args(argv)
    if args.objects and not args.reads_out:
        parser.error("--objects needs --reads-out")
    if args.zipf < 0:
        parser.error(f"--zipf: must be >= 0, got {args.zipf:g}")
    try:
        if not args.objects:
            asyncio.run(run_service(args.role, args.listen, args.stats))
            return 0
        with open(args.reads_out, "a", encoding="utf-8") as out:
            reader = ObjectReader(args.objects, KeyPicker(args.keys, args.zipf, args.seed), out)
            asyncio.run(run_service(args.role, args.listen, args.stats, reader))
    except OSError as exc:
        print(f"agent-service: {exc}", file=sys.stderr)
        return 1
    return 0


def _positive(kind: type):
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if not value > 0:
            raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
        return value
    return parse


def _driver_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m traffic agent-driver")
    p.add_argument("--plan", required=True, metavar="FILE.json")
    p.add_argument("--hops-out", required=True, metavar="FILE.jsonl")
    p.add_argument("--chains-out", required=True, metavar="FILE.jsonl")
    p.add_argument("--duration", type=_positive(float), metavar="S",
                   help="start chains for S seconds")
    p.add_argument("--chains", type=_positive(int), metavar="N", help="run exactly N chains")
    p.add_argument("--concurrency", type=_positive(int), default=8, metavar="C",
                   help="chains in flight (default 8)")
    p.add_argument("--rate", type=_positive(float), metavar="PER_S",
                   help="open loop: Poisson chain arrivals per second, capped by --concurrency")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout-ms", type=_positive(float), default=2000.0, metavar="T",
                   help="per-hop timeout including connect (default 2000)")
    p.add_argument("--ecn", action="store_true", help="record that ECN is requested")
    p.add_argument("--multipath", metavar="IF,IF,...", default="",
                   help="this node's interface on every plane, in plane order: a hop whose "
                   "plane has no carrier, or fails, is retried on the next plane")
    p.add_argument("--attempt-ms", type=_positive(float), default=500.0, metavar="T",
                   help="with --multipath: time one plane gets before the next is tried")
    p.add_argument("--directory", metavar="FILE",
                   help="on SIGHUP, read where services are now from FILE: "
                   '{"services": {name: [[ip, port], ...]}, "held": [name, ...]}; a held '
                   "service's hops wait until it is released (a node being replaced)")
    return p


def load_directory(path: str) -> tuple[dict, list[str]]:
    """The services' addresses and the held services of a directory file."""
    with open(path, encoding="utf-8") as f:
        raw = json.load(f)
    if not isinstance(raw, dict) or not isinstance(raw.get("services", {}), dict):
        raise PlanError("directory", "must be {\"services\": {name: [[ip, port], ...]}}")
    services = {}
    for name, addrs in raw.get("services", {}).items():
        if not isinstance(addrs, list) or not addrs:
            raise PlanError(f"services.{name}", "must be a non-empty list of [ip, port]")
        services[name] = [address(a, f"services.{name}[{i}]") for i, a in enumerate(addrs)]
    return services, [str(h) for h in raw.get("held", [])]


def load_plan(path: str) -> dict:
    """Read and validate a plan file; ``PlanError`` names the bad field."""
    try:
        with open(path, encoding="utf-8") as f:
            raw = json.load(f)
    except OSError as exc:
        raise PlanError("plan", f"cannot read {path}: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise PlanError("plan", f"invalid JSON in {path}: {exc}") from None
    return validate_plan(raw)


async def _drive(driver: Driver, directory: str | None = None) -> dict:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, driver.interrupt)
    if directory:
        def reread() -> None:
            try:
                driver.redirect(*load_directory(directory))
            except (OSError, ValueError, PlanError) as exc:  # the old addresses stand
                print(f"agent-driver: directory {directory}: {exc}", file=sys.stderr,
                      flush=True)
        loop.add_signal_handler(signal.SIGHUP, reread)
    return await driver.run()


def _driver_main(argv: list[str]) -> int:
    # a SIGHUP (the directory changed) before the loop handles it, or after, is ignored,
    # not fatal: the summary must still be written
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    parser = _driver_parser()
    args = parser.parse_args(argv)
    if args.duration is None and args.chains is None:
        parser.error("one of --duration or --chains is required")
    try:
        plan = load_plan(args.plan)
    except PlanError as exc:
        print(f"agent-driver: invalid plan: {exc}", file=sys.stderr)
        return 2
    config = DriverConfig(
        duration=args.duration, chains=args.chains, concurrency=args.concurrency,
        seed=args.seed, timeout_ms=args.timeout_ms, ecn=args.ecn, rate=args.rate,
        multipath=tuple(i for i in args.multipath.split(",") if i), attempt_ms=args.attempt_ms,
    )
    try:
        with open(args.hops_out, "w", encoding="utf-8") as hops, \
                open(args.chains_out, "w", encoding="utf-8") as chains:
            result = asyncio.run(_drive(Driver(plan, config, hops, chains),
                                        args.directory))
    except OSError as exc:
        print(f"agent-driver: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(result), flush=True)
    return 0


def main(argv: list[str]) -> int:
    """Dispatch on ``argv[0]`` (``agent-service`` or ``agent-driver``)."""
    if not argv or argv[0] not in ("agent-service", "agent-driver"):
        print("usage: python -m traffic {agent-service,agent-driver} ...", file=sys.stderr)
        return 2
    if argv[0] == "agent-service":
        return _service_main(argv[1:])
    return _driver_main(argv[1:])
