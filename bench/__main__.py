"""``make bench``: every benchmark, each measured side by side in one run.

Targets are ratios, never absolute times: these machines are shared and noisy.
"""

from __future__ import annotations

import sys

from bench import adaptive_bench, afxdp_bench, fabric_bench, macsec_bench, replay_bench, scale_bench

BENCHES = [
    ("fabric start: ours vs plain Mininet", fabric_bench.main),
    ("whole runs at 16, 64 and 128 switches vs plain Mininet (target: 128 within 120 s)",
     scale_bench.main),
    ("replay --topspeed vs tcpreplay --topspeed", replay_bench.main),
    ("TCP through a MACsec-protected link vs the same link unprotected", macsec_bench.main),
    ("switch ports: AF_XDP vs AF_PACKET forwarding, and their egress qdiscs", afxdp_bench.main),
    ("adaptive vs ECMP goodput (stride), ECN on vs off (chain p99)", adaptive_bench.main),
]


def main() -> int:
    failed = 0
    for title, bench in BENCHES:
        print(f"\n== {title}", flush=True)
        failed |= bench([]) != 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
