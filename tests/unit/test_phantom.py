"""The phantom-queue marker without a switch: its nftables ruleset, quantum count, config."""

from __future__ import annotations

import re

import pytest

from controllers.config import ControllerConfig, EcnClass
from testbed.core.scenario import parse
from testbed.errors import ConfigError
from testbed.fabric import phantom
from testbed.host.capabilities import Capabilities
from topologies.leafspine import build_fabric

TUNED = {"collective": EcnClass(min_kb=8, max_kb=24, probability=0.5),
         "agents": EcnClass(min_kb=30, max_kb=90, probability=0.05)}


@pytest.fixture
def spec():
    # 4:1 oversubscribed: the uplinks run at another rate than the host links
    return build_fabric(prefix="tbu1", planes=2, nodes=8, leaves_per_plane=2,
                        spines_per_plane=2, link_mbps=20, oversubscription=4)


def chains(text: str) -> dict[str, str]:
    """chain name -> its body, from a ruleset text."""
    out, name, body = {}, None, []
    for line in text.splitlines():
        m = re.match(r"^ chain (\S+) \{(.*)$", line)
        if m:
            name, body = m.group(1), [m.group(2)]
            if line.rstrip().endswith("}") and line.count("{") == line.count("}"):
                out[name], name = "\n".join(body), None
            continue
        if name is not None:
            if line == " }":
                out[name], name = "\n".join(body), None
            else:
                body.append(line)
    return out


def test_every_switch_port_gets_a_hook_buckets_at_its_link_rate_and_counters(spec):
    ports = phantom.switch_ports(spec)
    uplinks = [lk for lk in spec.links if lk.kind == "fabric"]
    assert len(ports) == len(spec.links) + len(uplinks)  # downlinks + both uplink ends
    assert len({p.ifname for p in ports}) == len(ports)
    text = phantom.ruleset("tbu1ecn", ports, TUNED, drain=0.9, mtu=spec.mtu)
    body = chains(text)
    levels = phantom.depths(TUNED)
    assert levels == [16, 47, 59, 176]
    for port in ports:
        base = body[port.ifname]
        assert f'hook egress device "{port.ifname}" priority 0' in base
        rate = round(0.9 * port.mbps * 1e6 / 8 / phantom.QUANTUM)
        for d in levels:
            assert f" limit {port.ifname}_d{d} {{ rate {rate}/second burst {d} packets }}" \
                in text
        for cls in TUNED:
            assert f" counter {port.ifname}_{cls} {{ }}" in text
            assert f'counter name "{port.ifname}_{cls}" ip ecn set ce' in body[
                f"{port.ifname}_{cls}"]
    rates = {p.mbps for p in ports}
    assert len(rates) == 2, rates  # uplinks differ from host links (oversubscription)


def test_each_frame_counts_in_every_bucket_whatever_its_class(spec):
    """The bucket jumps come first and match on nothing but the frame's quanta; the class
    rules only read the flags the buckets set."""
    port = phantom.switch_ports(spec)[0]
    text = phantom.ruleset("tbu1ecn", [port], TUNED, mtu=spec.mtu)
    base = chains(text)[port.ifname].splitlines()
    kmax = phantom.max_quanta(spec.mtu)
    jumps = [line for line in base if "vmap" in line]
    assert len(jumps) == len(phantom.depths(TUNED))
    for line in jumps:
        assert line.strip().startswith("meta mark & 0xff vmap")
        assert line.count(" : jump ") == kmax
    first_class_rule = next(i for i, line in enumerate(base) if "ip ecn" in line)
    assert first_class_rule > max(base.index(line) for line in jumps)
    assert base[-1].strip() == "meta mark set 0"
    body = chains(text)
    for i, d in enumerate(phantom.depths(TUNED)):
        for n in (1, kmax):
            chain = body[f"{port.ifname}_d{d}_{n}"]
            assert chain.count(f'limit name "{port.ifname}_d{d}"') == n
            assert f"return; meta mark set meta mark | {phantom.flag(i):#x};" in chain


def test_class_rules_mark_only_ect_of_their_class_at_their_thresholds(spec):
    port = phantom.switch_ports(spec)[0].ifname
    base = chains(phantom.ruleset("t", [phantom.Port(port, 20)], TUNED))[port]
    levels = phantom.depths(TUNED)
    rules = [line.strip() for line in base.splitlines() if "goto" in line]
    assert rules == [
        f"udp dport 4791 ip ecn != not-ect meta mark & {phantom.flag(levels.index(47)):#x} "
        f"!= 0 goto {port}_collective",
        f"udp dport 4791 ip ecn != not-ect meta mark & {phantom.flag(levels.index(16)):#x} "
        f"!= 0 numgen random mod 1000 < 500 goto {port}_collective",
        f"ip protocol tcp ip ecn != not-ect meta mark & {phantom.flag(levels.index(176)):#x} "
        f"!= 0 goto {port}_agents",
        f"ip protocol tcp ip ecn != not-ect meta mark & {phantom.flag(levels.index(59)):#x} "
        f"!= 0 numgen random mod 1000 < 50 goto {port}_agents",
    ]


def test_probability_zero_or_one_and_shared_thresholds():
    same = {"collective": EcnClass(min_kb=20, max_kb=60, probability=1.0),
            "agents": EcnClass(min_kb=20, max_kb=60, probability=0.0)}
    assert phantom.depths(same) == [39, 117]  # one bucket per distinct threshold
    base = chains(phantom.ruleset("t", [phantom.Port("tbx", 20)], same))["tbx"]
    goto = [line for line in base.splitlines() if "goto" in line]
    assert len(goto) == 3  # agents' min rule is left out (never marks)
    assert not any("numgen random mod 1000" in line for line in goto)


def test_quanta_map_counts_bytes_unbiased():
    """Expected quanta of a frame (over the random levels) is its length in quanta,
    within half a length bin; every frame length has exactly one entry per level."""
    entries = []
    for e in phantom.quanta_elements(9000):
        m = re.match(r"(\d+)-(\d+) \. (\d+)-(\d+) : (\d+)$", e)
        entries.append(tuple(int(x) for x in m.groups()))
    for length in (60, 66, 300, 1514, 4160, 4174, 8000, 9014, 9018):
        levels = [0] * phantom.LEVELS
        hits = 0
        for lo, hi, r0, r1, n in entries:
            if lo <= length <= hi:
                for r in range(r0, r1 + 1):
                    levels[r] += n
                    hits += 1
        assert hits == phantom.LEVELS, length
        expected = sum(levels) / phantom.LEVELS * phantom.QUANTUM
        assert abs(expected - length) <= phantom.BIN / 2 + phantom.QUANTUM / phantom.LEVELS / 2
    assert entries[-1][:2] == (phantom.max_quanta(9000) * phantom.QUANTUM, 65535)


def test_marks_summary_sums_classes_and_roles():
    marks = {"tbp0l0e3": {"collective": 5, "agents": 2}, "tbp0s0e1": {"collective": 1},
             "tbp0l0e1": {"collective": 0, "agents": 0}}
    roles = {"tbp0l0e3": "leaf_uplink", "tbp0s0e1": "spine_downlink",
             "tbp0l0e1": "leaf_downlink"}
    out = phantom.summary(marks, roles, 0.9)
    assert out["marked"] == {"collective": 6, "agents": 2}
    assert out["by_role"]["spine_downlink"] == {"collective": 1, "agents": 0}
    assert set(out["per_port"]) == {"tbp0l0e3", "tbp0s0e1"}


def test_controller_config_reads_phantom_and_drain():
    cfg = ControllerConfig.from_dict({"ecn": {"mode": "phantom", "drain": 0.8}})
    assert cfg.ecn_backend == "phantom" and not cfg.controller_marks
    assert cfg.ecn.drain == 0.8
    assert ControllerConfig.from_dict({}).ecn.drain == 0.95


def scenario(**ecn) -> dict:
    return {"name": "t", "topology": {"planes": 1, "nodes": 4}, "agents": {"enabled": False},
            "variants": [{"name": "a"}, {"name": "b", "controller": {"ecn": ecn}}]}


def test_scenario_accepts_phantom_and_checks_drain():
    v = parse(scenario(mode="phantom", drain=0.9)).variants[1]
    assert v.controller["ecn"]["mode"] == "phantom" and v.controller["ecn"]["drain"] == 0.9
    assert parse(scenario(mode="phantom")).variants[1].controller["ecn"]["drain"] == 0.95
    for bad in (0.4, 1.2, "fast", True):
        with pytest.raises(ConfigError) as exc:
            parse(scenario(mode="phantom", drain=bad))
        assert exc.value.field == "variants[1].controller.ecn.drain"
        assert str(exc.value).count("\n") == 0


def test_phantom_needs_nftables():
    def caps(nft: bool) -> Capabilities:
        return Capabilities(kernel="k", ovs_kernel_datapath=False, netem=False, htb=True,
                            red=False, fq_codel=False, macsec=False, nftables=nft)

    data = parse(scenario(mode="phantom"))
    data.experiment.check_host(caps(True))
    with pytest.raises(ConfigError) as exc:
        data.experiment.check_host(caps(False))
    assert exc.value.field == "variants[1].controller.ecn.mode"
    assert "nftables" in exc.value.reason


def test_clean_finds_only_tables_that_a_gone_run_registered(monkeypatch):
    from testbed.host import cleanup

    listing = ('{"nftables": [{"metainfo": {}}, '
               '{"table": {"family": "netdev", "name": "tb1a2becn", "handle": 1}}, '
               '{"table": {"family": "netdev", "name": "tb3c4decn", "handle": 2}}, '
               '{"table": {"family": "inet", "name": "filter", "handle": 3}}]}')

    class Done:
        returncode, stdout = 0, listing

    monkeypatch.setattr(cleanup.shutil, "which", lambda name: "/usr/sbin/nft")
    monkeypatch.setattr(cleanup.subprocess, "run", lambda *a, **k: Done())
    # tb3c4decn looks like the testbed's but no run registered it: not touched
    assert cleanup._owned_tables({"netdev tb1a2becn"}) == [("netdev", "tb1a2becn")]
