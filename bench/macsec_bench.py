"""TCP throughput through a userspace MACsec link against the same veth unprotected.

Usage (root)::

    PYTHONPATH=. python bench/macsec_bench.py [--mtu 1500 9000] [--rounds 3] [--seconds 4]
                                              [--suite gcm-aes-128] [--json FILE]

For each MTU both links exist side by side (plain: namespaces ``tbRp``/``tbRq``;
protected: ``tbRa``/``tbRb``), unshaped, and iperf3 runs alternately on each,
``--rounds`` times; the median of each and their ratio are printed. Also printed:
the ``cryptography`` version and the cost of one AES-GCM seal of a 1500-octet
frame, which bounds the userspace forwarder.

Target: at every MTU the protected link carries at least ``TARGET`` (0.5 %) of the
plain veth's TCP goodput (ratio of medians); exit status 1 when missed. The plain veth
is the kernel's (about 10 Gb/s here), the protected link a Python forwarder, so the
ratio is small: measured 0.86 % at MTU 1500 (86 Mb/s) and 4.2 % at 9000 (426 Mb/s) on
the 2-core development machine, cryptography 46.0.7. The floor is a regression guard:
a miss means the forwarder lost about half of its speed relative to the kernel.
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import sys
import time
from contextlib import ExitStack
from pathlib import Path
from tempfile import TemporaryDirectory

import cryptography
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from testbed.errors import Interrupted
from testbed.host.naming import new_run_id, run_prefix
from testbed.macsec.config import LinkConfig
from testbed.macsec.link import UserspaceLink
from testbed.macsec.netns import add_netns, del_netns, leftovers, run, spawn, stop_group

TARGET = 0.005  # ratio protected / plain at every MTU, at least


def verdict(rows: list[dict], target: float = TARGET) -> bool:
    """Whether every MTU's ratio protected/plain reaches ``target`` (no rows: a miss).

    >>> verdict([{"mtu": 1500, "ratio": 0.05}, {"mtu": 9000, "ratio": 0.2}], 0.02)
    True
    >>> verdict([{"mtu": 1500, "ratio": 0.01}, {"mtu": 9000, "ratio": 0.2}], 0.02)
    False
    >>> verdict([], 0.02)
    False
    """
    return bool(rows) and all(r["ratio"] >= target for r in rows)


def aesgcm_us(n: int = 20000, size: int = 1500) -> float:
    """Microseconds per AESGCM.encrypt of ``size`` octets with one reused object."""
    aead = AESGCM(bytes(16))
    data, iv = bytes(size), bytes(12)
    t0 = time.perf_counter()
    for _ in range(n):
        aead.encrypt(iv, data, b"")
    return (time.perf_counter() - t0) / n * 1e6


def iperf(client_ns: str, server_ns: str, server_ip: str, seconds: float, log: Path) -> float:
    """Receiver-side TCP goodput client -> server in Mb/s."""
    server = spawn(["iperf3", "-s", "-1", "-B", server_ip], server_ns, log)
    try:
        time.sleep(0.4)
        out = run(["iperf3", "-c", server_ip, "-t", f"{seconds:g}", "-J"], netns=client_ns,
                  timeout=seconds + 30)
        return json.loads(out.stdout)["end"]["sum_received"]["bits_per_second"] / 1e6
    finally:
        stop_group(server)


def plain_link(prefix: str, mtu: int, stack: ExitStack) -> tuple[str, str, str]:
    """Two namespaces and a plain veth; returns (client ns, server ns, server ip)."""
    ns = [prefix + "p", prefix + "q"]
    for n in ns:
        stack.callback(del_netns, n)
        add_netns(n)
    run(["ip", "link", "add", prefix + "vp", "netns", ns[0], "mtu", str(mtu), "type", "veth",
         "peer", "name", prefix + "vq", "netns", ns[1], "mtu", str(mtu)])
    for i, (n, dev) in enumerate(zip(ns, ("vp", "vq"), strict=True)):
        run(["ip", "addr", "add", f"10.126.{mtu % 250}.{i + 1}/24", "dev", prefix + dev],
            netns=n)
        run(["ip", "link", "set", prefix + dev, "up"], netns=n)
    return ns[0], ns[1], f"10.126.{mtu % 250}.2"


def bench_mtu(mtu: int, args: argparse.Namespace, work: Path) -> dict:
    """Alternate plain and protected iperf3 runs at one MTU; medians and ratio."""
    rid = new_run_id()
    prefix = run_prefix(rid)
    plain, protected = [], []
    with ExitStack() as stack:
        cli, srv, ip = plain_link(prefix, mtu, stack)
        cfg = LinkConfig.generate(rid, suite=args.suite, mtu=mtu)
        link = UserspaceLink(cfg, work / f"link-{mtu}")
        stack.callback(link.stop)
        link.start()
        for i in range(args.rounds):
            plain.append(iperf(cli, srv, ip, args.seconds, work / "iperf.log"))
            protected.append(iperf(cfg.a.netns, cfg.b.netns, cfg.b.address, args.seconds,
                                   work / "iperf.log"))
            print(f"  MTU {mtu} round {i + 1}: plain {plain[-1]:9.1f} Mb/s, "
                  f"protected {protected[-1]:7.1f} Mb/s", flush=True)
    left = leftovers(prefix)
    if left:
        raise RuntimeError(f"left behind: {left}")
    p, q = statistics.median(plain), statistics.median(protected)
    return {"mtu": mtu, "suite": args.suite, "plain_mbps": plain, "protected_mbps": protected,
            "plain_median_mbps": round(p, 1), "protected_median_mbps": round(q, 1),
            "ratio": round(q / p, 4)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mtu", type=int, nargs="+", default=[1500, 9000])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seconds", type=float, default=4)
    p.add_argument("--suite", default="gcm-aes-128")
    p.add_argument("--json", type=Path)
    p.add_argument("--target", type=float, default=TARGET,
                   help=f"least ratio protected/plain at every MTU (default {TARGET:g})")
    args = p.parse_args(argv)

    def on_term(signum: int, frame: object) -> None:
        raise Interrupted(f"stopped by signal {signum}")

    signal.signal(signal.SIGTERM, on_term)
    print(f"cryptography {cryptography.__version__}: AES-GCM seal of 1500 octets "
          f"{aesgcm_us():.1f} us", flush=True)
    rows = []
    with TemporaryDirectory(prefix="tbbench") as tmp:
        for mtu in args.mtu:
            rows.append(bench_mtu(mtu, args, Path(tmp)))
    print(f"{'MTU':>5} {'plain Mb/s':>11} {'MACsec Mb/s':>12} {'ratio':>7}")
    for r in rows:
        print(f"{r['mtu']:>5} {r['plain_median_mbps']:>11.1f} {r['protected_median_mbps']:>12.1f}"
              f" {r['ratio']:>7.2%}")
    ok = verdict(rows, args.target)
    print(f"protected/plain >= {args.target:.1%} at every MTU: {'PASS' if ok else 'MISS'}")
    if args.json:
        args.json.write_text(json.dumps({"cryptography": cryptography.__version__,
                                         "rows": rows, "target": args.target, "pass": ok},
                                        indent=2))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
