"""``make bench``: every benchmark, each measured side by side in one run.

Targets are ratios, never absolute times: these machines are shared and noisy.

    python -m bench [NAME ...]     # only these (names below); make bench BENCH="..."
"""

from __future__ import annotations

import sys

from bench import (
    adaptive_bench,
    afxdp_bench,
    clean_bench,
    datapath_bench,
    dctcp,
    expand_bench,
    fabric_bench,
    fresh_switch_bench,
    grading_bench,
    macsec_bench,
    monitor_bench,
    replay_bench,
    scale_bench,
    sizing_bench,
    switch_cost,
)

BENCHES = {
    "fabric": ("fabric start: ours vs plain Mininet", fabric_bench.main),
    "scale": ("whole runs at 16, 64 and 128 switches vs plain Mininet (target: 128 within "
              "120 s)", scale_bench.main),
    "replay": ("replay --topspeed vs tcpreplay --topspeed", replay_bench.main),
    "macsec": ("TCP through a MACsec-protected link vs the same link unprotected",
               macsec_bench.main),
    "afxdp": ("switch ports: AF_XDP vs AF_PACKET forwarding, and their egress qdiscs",
              afxdp_bench.main),
    "datapath": ("Open vSwitch kernel vs userspace datapath: TCP, packets, egress qdiscs "
                 "(needs the kernel module: the lab VM)", datapath_bench.main),
    "dctcp": ("DCTCP vs Reno and CUBIC: switch queue in packets, Mininet-HiFi's "
              "reproduction (needs RED and tcp_dctcp: the lab VM)", dctcp.main),
    "switch": ("userspace switch CPU per forwarding: the host's ovs-vswitchd vs the lab's "
               "own switch processes (target: 10x lower on the fat-tree at light load)",
               switch_cost.main),
    "adaptive": ("adaptive vs ECMP goodput (stride), ECN on vs off (chain p99)",
                 adaptive_bench.main),
    "expand": ("a rack added to a running leaf-spine under chains and training: 0 "
               "probes lost on the old fabric, traffic within 5 s of the rack's verdict, "
               "a planted fault found and nothing else", expand_bench.main),
    "fresh": ("the first userspace fabric of a freshly started ovs-vswitchd, with and "
              "without the warm-up bridge (target: within 25 % of a second fabric's switch "
              "cores)", fresh_switch_bench.main),
    "sizing": ("what the lab's parts cost this machine (the sizing model's costs), and "
               "the model's estimate against whole runs it was not fitted on (verdict "
               "and busy cores within 25 %)", sizing_bench.main),
    "clean": ("every shipped scenario, every variant, as shipped: no run flagged by the "
              "fidelity monitor (python -m bench.clean_bench --seeds 1,2,3 for seeds of "
              "one's own, --record to write scenarios/checked.json)", clean_bench.main),
    "grading": ("the grader on hostile results folders (YAML aliases, deep nesting, a 17 MB "
                "summary) and a real one: each answered within 10 s", grading_bench.main),
    "monitor": ("the default scenario plain vs watched live (monitor, Prometheus, the "
                "dashboard open in a browser): the watched run passes the fidelity monitor",
                monitor_bench.main),
}


def main(argv: list[str] | None = None) -> int:
    names = list(argv if argv is not None else sys.argv[1:]) or list(BENCHES)
    unknown = [n for n in names if n not in BENCHES]
    if unknown:
        print(f"bench: unknown {', '.join(unknown)} (known: {', '.join(BENCHES)})",
              file=sys.stderr)
        return 2
    failed = 0
    for name in names:
        title, bench = BENCHES[name]
        print(f"\n== {title}", flush=True)
        failed |= bench([]) != 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
