"""Placement over several machines and the sizing model (pure: no fabric is built)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from testbed.cluster import placement, sizing
from testbed.core import scenario
from testbed.core.cli import main
from testbed.host.naming import SPEC_PREFIX
from topologies.build import build_topology

COSTS = sizing.Costs(measured_on="test", process_cores=0.05, port_cores=0.01,
                     controller_cores_per_switch=0.005, chain_wake_us=20.0,
                     chain_wake_us_per_port=1.0, chain_forwarding_us=10.0,
                     chain_host_us=50.0, chain_frame_ms=0.5, chain_frame_ms_per_switch=0.2,
                     chain_frame_ms_per_port=0.005, rank_wake_us=40.0,
                     rank_wake_us_per_port=1.0, rank_forwarding_us=20.0, rank_host_us=80.0)


def default_variant(name: str = "training-1to1"):
    return scenario.load(scenario.path_of("agents-vs-training")).variant(name)


@pytest.mark.parametrize("topology,machines,way,cut", [
    ({"planes": 2, "nodes": 8, "leaves_per_plane": 2, "spines_per_plane": 2}, 2, "group", 4),
    ({"builder": "fat-tree", "k": 4}, 2, "group", 8),  # two pods a machine
    ({"planes": 4, "nodes": 16, "leaves_per_plane": 4, "spines_per_plane": 4, "rails": 2},
     2, "group", 32),
])
def test_the_placement_keeps_groups_whole_and_cuts_fewest(topology, machines, way, cut):
    spec = build_topology(topology, "tbt")
    best = placement.place(spec, machines)
    assert (best.way, len(best.cut)) == (way, cut)
    assert len(best.cut) == min(len(p.cut) for p in placement.candidates(spec, machines)
                                if p.balance() <= placement.BALANCE)
    # every host sits with the leaves of its own group: only switch-to-switch links cut
    assert all(lk.kind == "fabric" for lk in best.cut)
    assert best.balance() <= placement.BALANCE
    # what the tunnels carry is the cut links' rate
    assert sum(best.tunnel_mbps().values()) == sum(lk.mbps for lk in best.cut)


def test_a_plane_a_machine_cuts_every_host_link_of_the_other_plane():
    spec = build_topology({"planes": 2, "nodes": 8, "leaves_per_plane": 2,
                           "spines_per_plane": 2}, "tbt")
    by_plane = next(p for p in placement.candidates(spec, 2) if p.way == "plane")
    assert len(by_plane.cut) == 8 and all(lk.kind == "host" for lk in by_plane.cut)


def test_one_machine_cuts_nothing_and_bad_counts_are_refused():
    spec = build_topology({"nodes": 4}, "tbt")
    assert placement.place(spec, 1).cut == ()
    with pytest.raises(ValueError):
        placement.place(spec, 0)


def test_the_estimate_adds_up_the_parts():
    variant = default_variant()
    spec = variant.fabric(SPEC_PREFIX)
    one = sizing.estimate(spec, variant, COSTS, machines=1, cores=2)
    share = one.shares[0]
    ports = len(spec.switch_ports())
    assert share.ports == ports and share.switches == 8
    assert share.controller_cores == pytest.approx(8 * COSTS.controller_cores_per_switch,
                                                   abs=1e-3)
    # by hand: the chains' frame rate from their hops' frame times, then every frame's
    # wake-up in the one process, a forwarding per switch and its hosts' work
    agents = variant.agents
    driver = spec.hosts[agents["driver"]].name
    hops = [sizing.path_switches(spec, driver, spec.hosts[n].name, 0)
            for n in agents["services"].values()]
    chain_fps = agents["concurrency"] / (sum(COSTS.frame_s(s, ports) for s in hops) / 4)
    crossed = sum(hops) / 4
    ranks = variant.training["ranks"]
    rank_fps = sizing.rank_fps(variant.training, spec.planes) * spec.planes * len(ranks)
    rank_crossed = sum(sizing.path_switches(spec, spec.hosts[a].name, spec.hosts[b].name, p)
                       for a, b in zip(ranks, ranks[1:] + ranks[:1], strict=True)
                       for p in (0, 1)) / 8
    wake_s = (chain_fps * (COSTS.chain_wake_us + COSTS.chain_wake_us_per_port * ports)
              + rank_fps * (COSTS.rank_wake_us + COSTS.rank_wake_us_per_port * ports)) / 1e6
    wakes = sizing.batched(chain_fps + rank_fps, wake_s / (chain_fps + rank_fps))
    forwarding = (chain_fps * crossed * COSTS.chain_forwarding_us
                  + rank_fps * rank_crossed * COSTS.rank_forwarding_us) / 1e6
    idle = COSTS.process_cores + ports * COSTS.port_cores
    assert share.switch_cores == pytest.approx(idle + wakes + forwarding, abs=2e-3)
    assert wakes < wake_s  # frames that arrive during a wake-up share it
    hosts = (chain_fps * COSTS.chain_host_us + rank_fps * COSTS.rank_host_us) / 1e6
    assert share.generator_cores == pytest.approx(hosts, abs=2e-3)
    # two machines: a process each (a wake-up in each a frame enters), fewer ports polled
    two = sizing.estimate(spec, variant, COSTS, machines=2, cores=2)
    assert two.shares[1].controller_cores == 0
    assert sum(s.generator_cores for s in two.shares) == pytest.approx(
        share.generator_cores, rel=0.2)


def test_frames_follow_the_shortest_paths():
    spec = build_topology({"planes": 1, "nodes": 4, "leaves_per_plane": 2,
                           "spines_per_plane": 2}, "tbt")
    assert sizing.paths(spec, "tbtn0", "tbtn1", 0) == [["tbtp0l0"]]
    assert len(sizing.paths(spec, "tbtn0", "tbtn2", 0)) == 2
    assert sizing.path_switches(spec, "tbtn0", "tbtn2", 0) == 3.0


def test_more_machines_when_one_does_not_hold():
    variant = default_variant()
    spec = variant.fabric(SPEC_PREFIX)
    heavy = sizing.Costs(**{**COSTS.__dict__, "port_cores": 0.03})
    one = sizing.estimate(spec, variant, heavy, machines=1, cores=2)
    assert not one.holds
    need = sizing.machines_needed(spec, variant, heavy, cores=2)
    assert need.holds and need.machines > 1
    assert not sizing.estimate(spec, variant, heavy, machines=need.machines - 1,
                               cores=2).holds
    # a thread over the monitor's limit is said so
    hot = sizing.Costs(**{**COSTS.__dict__, "port_cores": 0.04})
    share = sizing.estimate(spec, variant, hot, machines=1, cores=64).shares[0]
    ok, why = share.holds(64)
    assert not ok and "switch thread" in why


def test_other_workloads_are_named_as_not_modelled():
    sc = scenario.load(scenario.path_of("hedera"))
    variant = sc.variants[0]
    est = sizing.estimate(variant.fabric(SPEC_PREFIX), variant, COSTS, machines=1, cores=2)
    assert any("elephants" in w for w in est.not_modelled)
    assert any("not in the model" in line for line in sizing.describe(est))


def test_calc_cli(tmp_path, capsys, monkeypatch):
    costs = tmp_path / "costs.json"
    COSTS.save(costs)
    assert main(["calc", "--scenario", "agents-vs-training", "--variant", "training-1to1",
                 "--cores", "2", "--machines", "2", "--costs", str(costs), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["machines"] == 2 and out["placement"]["way"] == "group"
    assert len(out["placement"]["cut_links"]) == 4
    assert main(["calc", "--scenario", "agents-vs-training", "--cores", "2",
                 "--costs", str(costs)]) == 0
    text = capsys.readouterr().out
    assert "machine 0:" in text and "costs measured on test" in text
    # a fabric of a plug-in builder is what the builder returns (as testbed spec)
    monkeypatch.chdir(Path(__file__).resolve().parents[2])  # examples/ is a package there
    assert main(["calc", "--scenario", "examples/ring.yaml", "--cores", "2", "--costs",
                 str(costs)]) == 0
    assert "6 switches, 12 hosts" in capsys.readouterr().out


@pytest.mark.parametrize("argv,field", [
    (["calc", "--scenario", "agents-vs-training", "--cores", "0"], "--cores"),
    (["calc", "--scenario", "agents-vs-training", "--machines", "0"], "--machines"),
    (["calc", "--scenario", "agents-vs-training", "--variant", "nope"], "--variant"),
    (["calc", "--scenario", "agents-vs-training", "--costs", "/nonexistent.json"], "--costs"),
    (["calc", "--scenario", "backbone-failover"], "--scenario"),
    (["calc", "--switch-tbps", "51.2"], "--gpu-gbps"),
])
def test_calc_bad_input_is_one_line_and_exit_2(argv, field, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"testbed: error: {field}") and "\n" not in err
