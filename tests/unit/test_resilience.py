"""Pure parts of fabric resilience: failover plans, fault validation, outcome accounting."""

from __future__ import annotations

import pytest

from controllers.config import ControllerConfig
from controllers.failover import IN_PORT, link_edges, plan_failover
from controllers.health import HealthMonitor, decode_probe, encode_probe
from controllers.paths import ECMP_GROUP, plan_switch
from testbed.core.scenario import parse
from testbed.errors import ConfigError
from testbed.faults import accounting as resilience
from testbed.faults.fabric import parse_faults
from topologies.leafspine import build_fabric
from topologies.spec import find_link

P = "tb0000"


@pytest.fixture(scope="module")
def spec():
    return build_fabric(prefix=P, planes=2, nodes=8, leaves_per_plane=2, spines_per_plane=2)


def dpid(spec, short):
    return spec.switch(P + short).dpid


# -- failover plan -------------------------------------------------------------------------
def test_nothing_down_is_the_plain_plan(spec):
    for sw in spec.switches:
        plain, fo = plan_switch(spec, sw.dpid), plan_failover(spec, sw.dpid)
        assert (fo.groups, fo.routes) == (plain.groups, plain.routes)
        assert fo.ff_groups == {} and fo.bounces == []


def test_dead_downlink_is_avoided_by_the_other_leaf_only_for_its_hosts(spec):
    down = {(P + "p0l0", P + "p0s1")}
    l1 = plan_failover(spec, dpid(spec, "p0l1"), down=down)
    s0_port = spec.uplink_ports(P + "p0l1")[0]
    assert l1.groups[ECMP_GROUP] == spec.uplink_ports(P + "p0l1")  # own uplinks all fine
    behind_l0 = {i.ip for i in spec.interfaces(plane=0) if i.switch == P + "p0l0"}
    for r in l1.routes:
        if r.ip in behind_l0:  # a set of its own: only the spine that still reaches l0
            assert r.group != ECMP_GROUP and l1.groups[r.group] == [s0_port]
        elif r.group is not None:
            assert r.group == ECMP_GROUP
    # the leaf next to the dead link drops that spine from its own group
    l0 = plan_failover(spec, dpid(spec, "p0l0"), down=down)
    assert l0.groups[ECMP_GROUP] == spec.uplink_ports(P + "p0l0")[:1]
    # plane 1 is untouched
    p1 = plan_failover(spec, dpid(spec, "p1l1"), down=down)
    assert p1.groups == plan_switch(spec, dpid(spec, "p1l1")).groups


def test_fast_failover_groups_bounce_back_and_leaves_go_up_elsewhere(spec):
    s1 = plan_failover(spec, dpid(spec, "p0s1"), fast_failover=True)
    to_l0 = spec.port_to(P + "p0s1", P + "p0l0")
    from_l1 = spec.port_to(P + "p0s1", P + "p0l1")
    group = next(g for g, buckets in s1.ff_groups.items()  # from leaf 1 to leaf 0
                 if buckets == [(to_l0, to_l0), (IN_PORT, from_l1)])
    assert {port for port, _, g in s1.ff_routes if g == group} == {from_l1}
    l1 = plan_failover(spec, dpid(spec, "p0l1"), fast_failover=True)
    up = spec.uplink_ports(P + "p0l1")
    from_s1 = {l1.groups[b.group][0] for b in l1.bounces if b.in_port == up[1]}
    assert from_s1 == {up[0]}  # came from s1: go up via s0
    local = {i.ip for i in spec.interfaces(plane=0) if i.switch == P + "p0l1"}
    assert {b.ip for b in l1.bounces}.isdisjoint(local)  # own hosts are never bounced
    assert {(b.in_port, b.arp) for b in l1.bounces} == {(p, a) for p in up for a in (0, 1)}


def test_link_edges_name_both_ends(spec):
    edges = link_edges(spec)
    lk = find_link(spec, "p0l0-p0s1")
    assert edges[(lk.a, lk.a_port)] == edges[(lk.b, lk.b_port)] == (lk.a, lk.b)


# -- health --------------------------------------------------------------------------------
def test_health_drains_only_above_threshold_with_enough_probes(spec):
    mon = HealthMonitor(spec, loss_threshold=0.1, min_packets=20, samples=2)
    edge = (P + "p0l0", P + "p0s1")
    assert mon.sample(1, {(edge, "up"): (10, 9)}) == []  # 10 probes: too few to judge
    assert mon.sample(2, {(edge, "up"): (10, 10)}) == []  # 1/20 = 5 %: below
    drains = mon.sample(3, {(edge, "down"): (10, 10), (edge, "up"): (10, 7)})
    assert [(d.edge, d.direction) for d in drains] == [(edge, "up")]
    assert mon.sample(4, {(edge, "up"): (10, 0)}) == []  # drained once, stays drained
    assert decode_probe(encode_probe(5, False, 99)) == (5, False, 99)
    assert decode_probe(b"\0" * 60) is None


# -- fault validation ----------------------------------------------------------------------
@pytest.mark.parametrize("entry, field, words", [
    ({"at_s": 1, "action": "explode", "target": "p0s0"}, "faults[0].action", "unknown"),
    ({"at_s": -1, "action": "link_down", "target": "p0l0-p0s1"}, "faults[0].at_s", "0 or"),
    ({"at_s": 1, "action": "link_down", "target": "p0l0-p0s7"}, "faults[0].target", "no link"),
    ({"at_s": 1, "action": "plane_fail", "target": "p2"}, "faults[0].target", "no plane"),
    ({"at_s": 1, "action": "degrade", "target": "p0l0-p0s1"}, "faults[0].loss", "missing"),
    ({"at_s": 1, "action": "degrade", "target": "p0l0-p0s1", "loss": 1.5},
     "faults[0].loss", "1 or less"),
    ({"at_s": 1, "action": "link_down", "target": "p0l0-p0s1", "loss": 0.1},
     "faults[0].loss", "not used"),
    ({"at_s": 1, "action": "link_flap", "target": "p0l0e3", "count": 0},
     "faults[0].count", "1 or more"),
    ({"at_s": 1, "action": "controller_kill", "target": "p0s0"}, "faults[0].target", "no target"),
    ({"at_s": 1, "action": "switch_fail"}, "faults[0].target", "missing"),
    ({"at_s": 1, "action": "rail_fail", "target": "n0p0r0", "when": 3}, "faults[0].when",
     "unknown field"),
])
def test_bad_faults_name_the_field(spec, entry, field, words):
    with pytest.raises(ConfigError) as err:
        parse_faults([entry], spec)
    assert err.value.field == field and words in str(err.value)


def test_fault_targets_accept_every_spelling(spec):
    for name in ("p0l0-p0s1", "p0s1-p0l0", "p0l0e6", P + "p0s1e1"):
        assert parse_faults([{"at_s": 0, "action": "link_down", "target": name}],
                            spec)[0].target == "p0l0-p0s1"
    assert parse_faults([{"at_s": 0, "action": "rail_fail", "target": "n3p1r0"}],
                        spec)[0].target == "n3p1r0"
    assert parse_faults([{"at_s": 0, "action": "link_down", "target": "n3p1r0"}],
                        spec)[0].target == "n3-p1l0"


def test_scenario_faults_per_variant_and_health_fields():
    base = {"name": "x", "topology": {"planes": 2, "nodes": 4},
            "agents": {"enabled": False},
            "faults": [{"at_s": 2, "action": "plane_fail", "target": "p1"}],
            "variants": [{"name": "two"},
                         {"name": "one", "topology": {"planes": 1},
                          "faults": [{"at_s": 2, "action": "plane_fail", "target": "p0"}]}]}
    sc = parse(base)
    assert [v.faults[0].target for v in sc.variants] == ["p1", "p0"]
    bad = {**base, "variants": [{"name": "one", "topology": {"planes": 1}}]}
    with pytest.raises(ConfigError) as err:
        parse(bad)
    assert err.value.field == "variants[0].faults[0].target"
    with pytest.raises(ConfigError) as err:
        parse({**base, "controller": {"health": {"enabled": True, "loss_threshold": 2}}})
    assert err.value.field == "controller.health.loss_threshold"
    ok = parse({**base, "controller": {"fast_failover": True, "health": {"enabled": True}}})
    cfg = ControllerConfig.from_dict(ok.variants[0].controller)
    assert (cfg.fast_failover, cfg.recompute, cfg.health.enabled, cfg.failover) == (
        True, False, True, True)


def test_one_controller_config_file_carries_everything(spec, tmp_path):
    """bring_up writes one file; the controller reads everything from it (no
    environment variables, no other flags)."""
    from testbed.fabric.bringup import controller_config
    from testbed.host.capabilities import Capabilities

    caps = Capabilities(kernel="test", ovs_kernel_datapath=False, netem=False, htb=True,
                        red=False, fq_codel=False, macsec=False, nftables=True)
    section = parse({"name": "x", "agents": {"enabled": False},
                     "controller": {"mode": "adaptive", "recompute": True,
                                    "health": {"enabled": True, "interval_ms": 200}}}
                    ).variants[0].controller
    data = controller_config(section, spec, caps, out=tmp_path, seed=7)
    cfg = ControllerConfig.from_dict(data)
    assert (cfg.spec, cfg.status, cfg.telemetry) == (
        str(tmp_path / "spec.json"), str(tmp_path / "controller-events.jsonl"),
        str(tmp_path / "telemetry.jsonl"))
    assert (cfg.seed, cfg.mode, cfg.recompute, cfg.fast_failover) == (7, "adaptive", True,
                                                                       False)
    assert (cfg.health.enabled, cfg.health.interval_ms, cfg.ecn_backend) == (True, 200, "off")
    assert "link_mbps" not in data  # the spec's, read from the spec file alone
    assert controller_config(section, spec, caps, out=tmp_path,
                             telemetry=False)["telemetry"] is None


# -- outcome accounting ----------------------------------------------------------------------
def _chains(start, n, latency=10.0, ok=True):
    return [{"start": start + i * 0.05, "end": start + i * 0.05 + latency / 1000, "ok": ok,
             "latency_ms": latency, "error": None if ok else "timeout"} for i in range(n)]


def test_fault_entries_account_window_by_window():
    t0 = 1000.0
    chains = _chains(t0, 100)  # baseline: 5 s of 10 ms chains
    chains += _chains(t0 + 5.0, 10, latency=300.0)  # slow during the fault
    chains += _chains(t0 + 5.5, 2, ok=False)
    chains += _chains(t0 + 6.0, 60)
    rate = 100
    lost = set(range(500, 520))  # probes 5.00 .. 5.19 s lost: a 200 ms outage
    probes = [{"start": "a", "t0": t0, "rate": rate, "peers": ["b"]},
              {"stop": "a", "sent": {"b": 900}}]
    probes += [{"s": "a", "d": "b", "q": q, "t": t0 + q / rate, "r": 0} for q in range(900)
               if q not in lost]
    events = [{"t": t0 + 5.03, "event": "port_status"}]
    records = [{"at_s": 5.0, "action": "link_down", "target": "x", "started": t0 + 5.0,
                "ok": True}]
    [entry] = resilience.fault_entries(records, end=t0 + 9.6, chains=chains, hops=[],
                                       events=events,
                                       streams=resilience.probe_streams(probes),
                                       iterations=[])
    assert entry["lost_packets"] == 20
    assert entry["repair_ms"] == pytest.approx(200, abs=1)
    assert entry["detect_ms"] == pytest.approx(30, abs=1)
    assert entry["detected_by"] == "controller:port_status"
    assert entry["chains_failed"] == 2 and entry["chains_delayed"] == 10
    assert entry["p99_recovery_ms"] == 1000.0


def test_training_recovery_ends_with_the_last_hurt_iteration():
    it = [{"start": 0.5, "end": 1, "packets_lost": 0, "timeouts": 0},
          {"start": 1, "end": 2, "packets_lost": 5, "timeouts": 1},
          {"start": 2, "end": 2.8, "packets_lost": 0, "timeouts": 0}]
    out = resilience.training_outcome(it, 1.5, 5)
    assert out["training_recovery_ms"] == pytest.approx(500)
    assert out["training_lost_packets"] == 5
    assert resilience.training_outcome([], 0, 1) is None


def test_a_clean_first_iteration_does_not_hide_later_hurt_ones():
    """As in plane-failure on main: the first iteration after the fault was clean, later
    ones lost packets and timed out; the recovery is not 0."""
    it = [{"start": 0.0, "end": 0.5, "packets_lost": 0, "timeouts": 0},
          {"start": 1.0, "end": 1.6, "packets_lost": 0, "timeouts": 0},
          {"start": 1.6, "end": 2.9, "packets_lost": 32, "timeouts": 4},
          {"start": 2.9, "end": 3.5, "packets_lost": 0, "timeouts": 0}]
    out = resilience.training_outcome(it, 1.0, 6)
    assert out["training_recovery_ms"] == pytest.approx(1900)
    assert out["training_lost_packets"] == 32 and out["training_timeouts"] == 4
    clean = [dict(r, packets_lost=0, timeouts=0) for r in it]
    assert resilience.training_outcome(clean, 1.0, 6)["training_recovery_ms"] == 0
    still_hurt = it[:3]  # the window ends while training is hurt: not back
    assert resilience.training_outcome(still_hurt, 1.0, 6)["training_recovery_ms"] is None


def test_health_guards_last_uplink_and_fabric_wide_loss(spec):
    mon = HealthMonitor(spec, loss_threshold=0.1, min_packets=10, samples=1)
    everything = {(edge, "up"): (10, 0) for edge in mon.links()}
    assert mon.sample(1, everything) == [] and mon.suspect_samples == 1
    e0, e1 = (P + "p0l0", P + "p0s0"), (P + "p0l0", P + "p0s1")
    assert [d.edge for d in mon.sample(2, {(e0, "up"): (10, 0)})] == [e0]
    assert mon.sample(3, {(e1, "up"): (10, 0)}) == []  # p0l0's last uplink stays
    assert mon.drained == {e0}


def test_training_recovery_waits_for_the_slowest_rank():
    it = [{"rank": 0, "start": 0.0, "end": 1.2, "packets_lost": 2, "timeouts": 1},
          {"rank": 0, "start": 1.2, "end": 1.7, "packets_lost": 0, "timeouts": 0},
          {"rank": 1, "start": 0.0, "end": 1.05, "packets_lost": 0, "timeouts": 0}]
    assert resilience.training_outcome(it, 1.0, 5)["training_recovery_ms"] == \
        pytest.approx(200)
    it.append({"rank": 1, "start": 1.05, "end": 1.9, "packets_lost": 1, "timeouts": 0})
    it.append({"rank": 1, "start": 1.9, "end": 2.4, "packets_lost": 0, "timeouts": 0})
    assert resilience.training_outcome(it, 1.0, 5)["training_recovery_ms"] == \
        pytest.approx(900)


def test_bin_p99_is_the_interpolated_one_with_its_sample_count():
    """One definition of p99 (traffic.stats): in a bin of 50 chains with one at 30 ms the
    interpolated p99 is 20.2 ms, within 10 % of a 20 ms baseline (nearest rank: 30 ms)."""
    base = {"p50": 10.0, "p95": 12.0, "p99": 20.0, "max": 25.0, "chains": 100}
    chains = [{"start": 5.0 + i / 50, "end": 5.01 + i / 50, "ok": True, "latency_ms": 10.0}
              for i in range(50)]
    chains[7]["latency_ms"] = 30.0
    out = resilience.chain_outcome(chains, 5.0, 9.0, base)
    assert out["p99_recovery_ms"] == 0.0
    assert out["p99_recovery_bin_chains"] == 50 and out["window_chains"] == 50
    assert out["added_p99_ms"] == pytest.approx(0.2)
