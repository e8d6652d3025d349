"""Several seeds per variant: medians in ``runs``, per-seed entries, the side-by-side report
with ratios and the DCQCN plot; the RED check for ``ecn.mode: switch``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from testbed.core.scenario import parse
from testbed.core.seeds import combine, median_entry
from testbed.errors import ConfigError
from testbed.host.capabilities import Capabilities
from testbed.reports import comparison, report


def entry(name: str, seed: int, goodput: float, p99: float | None, **extra) -> dict:
    return {"name": name, "seed": seed, "run_id": f"{seed:04x}", "dir": f"variants/{name}",
            "fabric": {"switches": 8, "start_s": 1.0 + seed},
            "agents": {"chains_started": 10, "chains_completed": 10, "chains_failed": 0,
                       "latency_ms": {"p50": 5.0, "p95": 8.0, "p99": p99, "max": p99}},
            "training": {"bytes": 1000, "goodput_mbps": goodput, "iterations": 3,
                         "iteration_ms": {"p50": 100.0 * seed, "p99": 200.0},
                         "packets_lost": seed, "reordered_packets": 0, "cnps_received": 0},
            **extra}


def test_combine_takes_medians_and_keeps_seeds() -> None:
    seeds = [entry("a", s, g, p) for s, g, p in ((1, 10.0, 30.0), (2, 30.0, 10.0),
                                                   (3, 20.0, 20.0))]
    run = combine("a", seeds)
    assert run["name"] == "a" and run["seeds"] == seeds
    assert run["training"]["goodput_mbps"] == 20.0
    assert run["agents"]["latency_ms"]["p99"] == 20.0
    assert run["training"]["iteration_ms"]["p50"] == 200.0
    assert run["fabric"]["start_s"] == 3.0
    assert run["run_id"] == "0001"  # not a number field: the first seed's


def test_a_missing_value_is_not_skipped_but_shown() -> None:
    assert median_entry([{"p": None}, {"p": 4}, {"p": 6}]) == {"p": None}
    assert median_entry([{"p": None}, {"p": None}]) == {"p": None}
    assert median_entry([{"x": True}, {"x": False}]) == {"x": True}
    # seed 3: every chain failed, so it has no latency; the median must not hide it
    seeds = [entry("a", s, 10.0, p) for s, p in ((1, 30.0), (2, 10.0))]
    failed = entry("a", 3, 10.0, None)
    failed["agents"].update(chains_completed=0, chains_failed=10,
                            latency_ms={"p50": None, "p95": None, "p99": None, "max": None})
    run = combine("a", [*seeds, failed])
    assert run["agents"]["latency_ms"] == {"p50": None, "p95": None, "p99": None, "max": None}
    assert run["agents"]["chains_failed"] == 0  # present in every seed: a median
    assert run["missing"] == {f"agents.latency_ms.{p}": [3] for p in ("p50", "p95", "p99", "max")}
    assert "missing" not in combine("a", seeds)


def summary_of(runs: list[dict], seeds=(1, 2)) -> dict:
    return {"scenario": "s", "kind": "fabric", "seed": 1, "seeds": list(seeds),
            "duration_s": 5, "description": "",
            "capabilities": {"kernel": "k", "backends": {"switch datapath": "user"}},
            "runs": runs}


def test_report_side_by_side_with_ratios(tmp_path: Path) -> None:
    runs = [
        combine("ecmp-stride", [entry("ecmp-stride", s, g, None, pattern="stride")
                                for s, g in ((1, 40.0), (2, 60.0))]),
        combine("adaptive-stride", [entry("adaptive-stride", s, g, None, pattern="stride")
                                    for s, g in ((1, 70.0), (2, 80.0))]),
        combine("reference", [entry("reference", s, 100.0, None, pattern="stride",
                                    reference=True) for s in (1, 2)]),
        combine("ecmp-random", [entry("ecmp-random", s, 25.0, None, pattern="random")
                                for s in (1, 2)]),
    ]
    text = report.write(summary_of(runs), tmp_path).read_text()
    assert "| adaptive-stride | stride | 75.0 | 70.0 / 80.0 | 1.50x | 0.75x |" in text
    assert "| ecmp-random | random | 25.0 | 25.0 / 25.0 | 1.00x | 0.25x |" in text
    assert (tmp_path / "goodput.png").stat().st_size > 1000


def test_dcqcn_plot_from_rate_traces(tmp_path: Path) -> None:
    folder = tmp_path / "variants" / "ecn-on"
    folder.mkdir(parents=True)
    rec = {"iteration": 0, "rank": 0, "start": 0.0, "end": 1.0, "bytes_received": 1,
           "cnps_received": 3, "rate_trace": [[0.0, 20.0], [0.1, 10.0], [0.2, 15.0]]}
    (folder / "training-rank0.jsonl").write_text(json.dumps(rec) + "\n")
    runs = [combine("ecn-on", [entry("ecn-on", 1, 10.0, 12.0, pattern="ring")])]
    lines = comparison.section(summary_of(runs, seeds=(1,)), tmp_path)
    assert any("dcqcn_rate.png" in line for line in lines)
    assert (tmp_path / "dcqcn_rate.png").stat().st_size > 1000


def caps(red: bool) -> Capabilities:
    return Capabilities(kernel="k", ovs_kernel_datapath=False, netem=False, htb=True, red=red,
                        fq_codel=False, macsec=False, nftables=True)


def test_switch_ecn_needs_red() -> None:
    data = {"name": "t", "topology": {"planes": 1, "nodes": 4}, "agents": {"enabled": False},
            "variants": [{"name": "a"},
                         {"name": "b", "controller": {"ecn": {"mode": "switch"}}}]}
    scenario = parse(data)
    scenario.experiment.check_host(caps(red=True))
    with pytest.raises(ConfigError) as exc:
        scenario.experiment.check_host(caps(red=False))
    assert exc.value.field == "variants[1].controller.ecn.mode"
    data["variants"][1]["controller"]["ecn"]["mode"] = "auto"
    parse(data).experiment.check_host(caps(red=False))
