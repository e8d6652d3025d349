"""The fabric calculator reproduces the published multi-plane claim."""

from __future__ import annotations

import json

import pytest

from testbed.core.cli import main
from topologies.calculator import calculate
from topologies.spec import TopologyError


def test_published_claim_128k_gpus_64_times_single_plane():
    r = calculate(switch_tbps=102.4, gpu_gbps=1600, planes=8)
    assert r["single_plane_max_gpus"] == 2048  # radix 64: 64^2 / 2
    assert r["max_gpus"] == 131072  # radix 512: "about 128,000"
    assert r["reach_ratio"] == 64
    assert r["multi_plane"]["switch_hops"] == 3
    assert r["multi_plane"]["bisection_tbps"] == pytest.approx(131072 * 1.6 / 2)


@pytest.mark.parametrize(("planes", "ratio"), [(1, 1), (2, 4), (4, 16)])
def test_reach_grows_with_the_square_of_the_planes(planes, ratio):
    assert calculate(switch_tbps=51.2, gpu_gbps=800, planes=planes)["reach_ratio"] == ratio


def test_cli_json_has_the_documented_keys(capsys):
    assert main(["calc", "--switch-tbps", "102.4", "--gpu-gbps", "1600", "--planes", "8",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["max_gpus"] == 131072 and out["single_plane_max_gpus"] == 2048


def test_cli_table_is_readable(capsys):
    assert main(["calc", "--switch-tbps", "102.4", "--gpu-gbps", "1600", "--planes", "8"]) == 0
    text = capsys.readouterr().out
    assert "131,072" in text and "2,048" in text and "64x" in text
    assert "k=64 fat-tree): 65,536 GPUs, 5,120 switches, 5 switch hops" in text


def test_three_tiers_reach_more_than_two_but_cost_two_hops():
    """A third tier grows one plane k/2 times (k^3/4 against k^2/2 hosts) at the price of
    two more switch hops; planes grow the two-tier design without it."""
    for planes in (2, 4, 8):
        r = calculate(switch_tbps=102.4, gpu_gbps=1600, planes=planes)
        three, single = r["single_plane_three_tier"], r["single_plane"]
        assert three["max_gpus"] == single["max_gpus"] * single["radix"] // 2
        assert three["switch_hops"] - r["multi_plane"]["switch_hops"] == 2
        assert r["multi_plane_vs_three_tier"] == r["max_gpus"] / three["max_gpus"]
    out = calculate(switch_tbps=102.4, gpu_gbps=1600, planes=8)
    assert json.loads(json.dumps(out))["single_plane_three_tier"]["tiers"] == 3


@pytest.mark.parametrize(
    ("args", "field"),
    [(["--switch-tbps", "0"], "switch_tbps"), (["--gpu-gbps", "-1"], "--gpu-gbps"),
     (["--planes", "0"], "planes"), (["--planes", "1000"], "planes")],
)
def test_cli_bad_input_exits_2_naming_the_field(args, field, capsys):
    base = {"--switch-tbps": "102.4", "--gpu-gbps": "1600", "--planes": "8"}
    base.update(dict(zip(args[::2], args[1::2], strict=True)))
    argv = ["calc"] + [x for kv in base.items() for x in kv]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and field in err[0]


def test_impossible_switch_is_refused():
    with pytest.raises(TopologyError):
        calculate(switch_tbps=0.001, gpu_gbps=1600, planes=1)
