"""Node health and replacement: the rule on made-up windows, the section's bad input,
the report's table."""

from __future__ import annotations

import pytest

from testbed.core import scenario
from testbed.errors import ConfigError
from testbed.experiments.fabric.report import replacement_lines
from testbed.operations import health, replace
from topologies.leafspine import build_fabric

SPEC = build_fabric(prefix="tbu1", planes=1, nodes=6, leaves_per_plane=2, spines_per_plane=2,
                    link_mbps=20, queue_kb=64)


def _w(sent: int, got: int, rtt: float = 1.0, errors: int = 0) -> health.Window:
    return health.Window(sent, [rtt] * got, errors)


def _feed(rule: health.Rule, bad: dict[str, health.Window], n: int = 4) -> list[dict]:
    windows = {f"n{i}:e0": (f"n{i}", bad.get(f"n{i}", _w(20, 20))) for i in range(n)}
    return rule.feed(windows)


def test_a_node_is_declared_after_two_bad_windows_in_a_row_once():
    rule = health.Rule(health.latency_max_ms(SPEC))
    assert rule.latency_max_ms == 57.4  # 2 x 64 KB at 20 Mb/s + 5 ms
    assert _feed(rule, {"n1": _w(20, 18)}) == []  # 10 % lost: bad, once
    assert _feed(rule, {}) == []  # a good window breaks the streak
    assert _feed(rule, {"n1": _w(20, 18)}) == []
    declared, = _feed(rule, {"n1": _w(20, 19)})  # 5 %: at the rule, bad again
    assert declared["node"] == "n1" and "lost 5%" in declared["reason"]
    assert declared["sent"] == 20 and declared["received"] == 19
    assert _feed(rule, {"n1": _w(20, 10)}) == []  # declared once


def test_latency_and_errors_count_and_a_congested_but_healthy_nic_does_not():
    rule = health.Rule(health.latency_max_ms(SPEC))
    for _ in range(3):  # queues full on the way: within what they can add
        assert _feed(rule, {"n2": _w(20, 20, rtt=55.0)}) == []
    _feed(rule, {"n2": _w(20, 20, rtt=80.0)})
    slow, = _feed(rule, {"n2": _w(20, 20, rtt=80.0)})
    assert slow["node"] == "n2" and "80 ms" in slow["reason"]
    _feed(rule, {"n3": _w(20, 20, errors=4)})
    errs, = _feed(rule, {"n3": _w(20, 20, errors=1)})
    assert errs["reason"] == "1 NIC errors"


def test_most_nodes_bad_at_once_is_the_fabric_not_a_node():
    rule = health.Rule(health.latency_max_ms(SPEC))
    lossy = {f"n{i}": _w(20, 10) for i in range(3)}
    for _ in range(4):
        assert _feed(rule, lossy) == []
    assert rule.declared == set()


def test_the_leaves_reflect_only_the_watched_ports_probes():
    nics = health.nics(SPEC, ["n1", "n4"], lambda host: 100)
    assert [(n.node, n.leaf[len(SPEC.prefix):]) for n in nics] == [("n1", "p0l0"),
                                                                   ("n4", "p0l1")]
    rules = health.Reflect(nics, lambda sw: sw).rules
    assert sorted(sw[len(SPEC.prefix):] for sw in rules) == ["p0l0", "p0l1"]
    flow, = rules[nics[0].leaf]
    assert f"in_port={nics[0].leaf_port}," in flow and "dl_type=0x88b6" in flow
    assert flow.endswith("actions=in_port") and "cookie=0x4ea17" in flow


BASE = {"name": "rep", "seed": 1, "duration_s": 5,
        "topology": {"planes": 1, "nodes": 6, "leaves_per_plane": 2, "spines_per_plane": 2},
        "agents": {"enabled": True, "driver": 0,
                   "services": {"retriever": 1, "tool": 2, "model": 3, "agent": 0}},
        "training": {"enabled": False}}


@pytest.mark.parametrize("section, field, reason", [
    ({"enabled": True, "spares": [9]}, "replacement.spares[0]", "0..5, got 9"),
    ({"enabled": True, "spares": [4, 2]}, "replacement.spares[1]", "has a role"),
    ({"enabled": True, "spare": [4]}, "replacement.spare", "unknown"),
])
def test_bad_replacement_input_names_the_field(section, field, reason):
    with pytest.raises(ConfigError) as err:
        scenario.parse({**BASE, "replacement": section})
    assert err.value.field == field and reason in err.value.reason
    ok = scenario.parse({**BASE, "replacement": {"enabled": True, "spares": [4, 5]}})
    assert ok.variants[0].replacement == {"enabled": True, "spares": [4, 5]}


def test_the_report_names_the_node_the_move_and_the_chains_after_it(tmp_path):
    chains = tmp_path / "chains.jsonl"
    chains.write_text("\n".join(
        f'{{"start": {t}, "ok": {ok}, "error": {err}}}' for t, ok, err in
        [(1.0, "false", '"timeout"'), (5.0, "true", "null"), (6.0, "true", "null")]))
    events = [{"node": "n1", "declared_s": 4.2, "declared_at": 4.5, "reason": "lost 20%",
               "action": "services moved to n4", "replace_ms": 812.0}]
    replace.chains_after(events, chains)
    assert (events[0]["chains_after"], events[0]["chains_failed_after"]) == (2, 0)
    rule = {"probe_hz": 20, "loss_max": 0.05, "latency_max_ms": 57.4, "confirm": 2,
            "window_s": 1.0}
    summary = {"runs": [{"name": "a", "seed": 1, "replacement": {
        "rule": rule, "watched": ["n0", "n1"], "events": events}},
        {"name": "b", "seed": 1, "replacement": {"rule": rule, "watched": ["n0"],
                                                 "events": []}}]}
    lines = replacement_lines(summary)
    assert lines[0] == "## Node health and replacement"
    assert "| a | 1 | n1 at 4.2 s: lost 20% | services moved to n4 | 812 ms | 2 | 0 |" in lines
    assert "| b | 1 | none of 1 | - | - | - | - |" in lines
    assert replacement_lines({"runs": [{"name": "x", "seed": 1}]}) == []


@pytest.mark.parametrize("text, field", [
    ('{"services": {"retriever": []}}', "services.retriever"),
    ('{"services": {"retriever": [["10.0.0.1", 0]]}}', "services.retriever[0][1]"),
    ('["not", "a", "directory"]', "directory"),
])
def test_a_bad_service_directory_is_named_and_changes_nothing(tmp_path, text, field):
    from traffic.agent_plan import PlanError
    from traffic.agents import load_directory

    path = tmp_path / "services.json"
    path.write_text(text)
    with pytest.raises(PlanError) as err:
        load_directory(str(path))
    assert err.value.field == field
    path.write_text('{"services": {"retriever": [["10.0.0.5", 7000]]}, "held": ["tool"]}')
    assert load_directory(str(path)) == ({"retriever": [("10.0.0.5", 7000)]}, ["tool"])
