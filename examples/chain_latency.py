"""Lab 1's figure from the DataFrames of testbed.results: agent-chain latency per variant
(p50 and p99) and where it goes, each service's hop latency.

    pip install '.[analysis]'
    python examples/chain_latency.py results/latest -o chain-latency.png

The lesson, on a host that keeps up (the report's fidelity verdict): training bursts on
an oversubscribed fabric raise the chains' p99 far more than their p50, as the hops wait
behind the bursts in the uplinks' queues.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from testbed import results  # noqa: E402


def figure(folder: Path, out: Path) -> Path:
    """Draw the figure of the results folder ``folder`` into ``out`` (PNG)."""
    chains = results.chains(folder)
    hops = results.hops(folder)
    done = chains[chains.ok]
    per_variant = done.groupby("variant", sort=False).latency_ms.quantile([0.5, 0.99])
    per_variant = per_variant.unstack().rename(columns={0.5: "p50", 0.99: "p99"})
    per_hop = (hops[hops.ok].groupby(["variant", "service"], sort=False).latency_ms
               .quantile(0.99).unstack())
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    per_variant.plot.bar(ax=left, rot=0)
    left.set_ylabel("chain latency (ms)")
    left.set_title("Agent chains: p50 and p99 per variant")
    per_hop.plot.bar(ax=right, rot=0)
    right.set_ylabel("hop latency p99 (ms)")
    right.set_title("Hops: p99 per service")
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("folder", type=Path, help="a results folder (results/latest)")
    ap.add_argument("-o", "--out", type=Path, default=Path("chain-latency.png"),
                    help="the PNG to write")
    args = ap.parse_args(argv)
    print(figure(args.folder, args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
