"""``--fit``: a fabric scenario's rates scaled alike to fit a smaller host, the factor from
the sizing model with its error as margin, and where it is recorded (pure: nothing is
brought up; the host's cores and datapath are given)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from testbed.cluster import fit, sizing
from testbed.core import checked, layout, record_checks, records, runner, scenario
from testbed.core.cli import main
from testbed.errors import ConfigError, HostError
from testbed.experiments.fabric import rates
from testbed.host.naming import SPEC_PREFIX

REPO = Path(__file__).resolve().parents[2]
SMALL = REPO / "tests" / "fixtures" / "results" / "small"
COSTS = sizing.Costs.load()


def doc(name: str) -> dict:
    return scenario.read(scenario.path_of(name))


def load_at(name: str, factor: float):
    return scenario.parse(doc(name), rate_factor=factor)


def worst_load(name: str, factor: float, cores: float, margin: float = sizing.ERROR,
               calibration=(1.0, 1.0)) -> float:
    return max(fit.predict(v, COSTS, cores, margin, calibration).load
               for v in load_at(name, factor).variants)


# -- the factor ----------------------------------------------------------------------------
def test_a_host_at_least_the_checked_one_runs_the_scenario_as_shipped():
    entry = {"cores": 2, "datapath": "userspace", "cpu_headroom": 0.3,
             "busiest_thread_cores": 0.6}
    for cores, datapath in ((2, "userspace"), (8, "userspace"), (2, "kernel")):
        got = fit.compute(doc("fat-tree"), cores=cores, datapath=datapath, costs=COSTS,
                          entry=entry)
        assert (got.factor, got.basis, got.scaled) == (1.0, "checked", False)
        assert "rates unchanged (x1.0)" in got.line()


def test_a_scenario_the_model_says_fits_is_left_as_it_is():
    got = fit.compute(doc("ecmp-vs-adaptive"), cores=2, datapath="userspace", costs=COSTS)
    assert got.factor == 1.0 and got.basis == "model" and not got.scaled
    assert got.line().endswith("fits: rates unchanged (x1.0)")


@pytest.mark.parametrize("name", ["fat-tree", "ecmp-vs-adaptive", "qp-scaling"])
def test_a_smaller_host_gets_the_largest_factor_predicted_clean(name):
    got = fit.compute(doc(name), cores=1, datapath="userspace", costs=COSTS)
    assert 0 < got.factor < 1 and got.scaled
    assert round(got.factor / fit.STEP, 6) == round(got.factor / fit.STEP)  # on the grid
    assert worst_load(name, got.factor, 1) <= 1.0  # predicted clean at it
    assert worst_load(name, round(got.factor + fit.STEP, 4), 1) > 1.0  # not one step up
    assert got.predicted_cores < got.predicted_cores_at_1
    assert f"rates x{got.factor:g}" in got.line() and got.line().startswith(
        "fit: 1 core, userspace datapath: predicted")


def test_the_factor_does_not_fall_as_the_host_gains_cores():
    found = [fit.compute(doc("fat-tree"), cores=c, datapath="userspace", costs=COSTS).factor
             for c in (0.7, 0.8, 1, 1.2, 1.5, 2, 4)]
    assert found == sorted(found) and found[0] < found[-1] == 1.0


def test_the_margin_is_applied():
    bare = fit.compute(doc("fat-tree"), cores=1, datapath="userspace", costs=COSTS,
                       margin=0.0)
    kept = fit.compute(doc("fat-tree"), cores=1, datapath="userspace", costs=COSTS)
    assert kept.margin == sizing.ERROR == 0.25 and bare.margin == 0.0
    assert kept.factor < bare.factor
    # at the factor chosen without a margin, the margin would not hold
    assert worst_load("fat-tree", bare.factor, 1, margin=sizing.ERROR) > 1.0


def test_a_measured_reference_calibrates_the_model():
    # checked on 2 cores with the switch thread measured at twice the model's figure
    at_ref = max(fit.predict(v, COSTS, 2, 0.0).thread_cores
                 for v in load_at("fat-tree", 1.0).variants)
    entry = {"cores": 2, "datapath": "userspace", "cpu_headroom": 0.5,
             "busiest_thread_cores": round(2 * at_ref, 3)}
    got = fit.compute(doc("fat-tree"), cores=1, datapath="userspace", costs=COSTS,
                      entry=entry)
    plain = fit.compute(doc("fat-tree"), cores=1, datapath="userspace", costs=COSTS)
    assert got.basis == "checked+model" and got.calibration[1] == pytest.approx(2, rel=0.01)
    assert got.factor < plain.factor
    assert "calibrated on the host it was checked on" in got.line()


def test_no_factor_predicted_clean_is_a_host_error_naming_why():
    with pytest.raises(HostError, match="no rate factor is predicted clean on 1 core.*"
                                        "closed loop"):
        fit.compute(doc("agents-vs-training"), cores=1, datapath="userspace", costs=COSTS)


@pytest.mark.parametrize("name,why", [
    ("storage-cache", "a storage scenario: the sizing model predicts fabric scenarios"),
    ("hedera", "variant ecmp-stride1 runs elephants workloads"),
])
def test_what_the_model_cannot_predict_is_refused(name, why):
    with pytest.raises(ConfigError, match=why):
        fit.compute(doc(name), cores=1, datapath="userspace", costs=COSTS)


def test_costs_of_another_datapath_are_noted():
    got = fit.compute(doc("fat-tree"), cores=1, datapath="kernel", costs=COSTS)
    assert COSTS.datapath == "userspace"
    assert got.notes == ("costs measured on the userspace datapath: an upper bound on "
                         "the kernel one",)


def test_usable_cores_reads_the_cgroup_quota(tmp_path):
    (tmp_path / "unified" / "lab").mkdir(parents=True)
    (tmp_path / "unified" / "lab" / "cpu.max").write_text("150000 100000\n")
    (tmp_path / "cpu,cpuacct" / "x").mkdir(parents=True)
    (tmp_path / "cpu,cpuacct" / "x" / "cpu.cfs_quota_us").write_text("-1\n")
    (tmp_path / "cpu,cpuacct" / "x" / "cpu.cfs_period_us").write_text("100000\n")
    assert fit._quota("0::/lab\n4:cpu,cpuacct:/x\n", tmp_path) == 1.5
    (tmp_path / "cpu,cpuacct" / "x" / "cpu.cfs_quota_us").write_text("100000\n")
    assert fit._quota("0::/lab\n4:cpu,cpuacct:/x\n", tmp_path) == 1.0
    assert fit._quota("0::/elsewhere\n", tmp_path) is None


# -- the scaling ---------------------------------------------------------------------------
def flat(data, where: str = "") -> dict:
    if isinstance(data, dict):
        return {k: v for key, value in data.items()
                for k, v in flat(value, f"{where}.{key}" if where else key).items()}
    if isinstance(data, list):
        return {k: v for i, value in enumerate(data)
                for k, v in flat(value, f"{where}[{i}]").items()}
    return {where: data}


EVERY_RATE = {
    "name": "rates", "seed": 1, "duration_s": 10,
    "topology": {"planes": 1, "nodes": 4, "leaves_per_plane": 2, "spines_per_plane": 2,
                 "link_mbps": 20, "mtu": 9000, "queue_kb": 64, "oversubscription": 1},
    "controller": {"mode": "adaptive", "telemetry_ms": 100,
                   "adaptive": {"interval_ms": 100, "imbalance": 0.2, "elephant_mbps": 1.0},
                   "ecn": {"mode": "phantom", "drain": 0.8,
                           "classes": {"collective": {"min_kb": 8, "max_kb": 24,
                                                      "probability": 0.5}}}},
    "agents": {"enabled": True, "driver": 0, "services": {"retriever": 1, "tool": 2,
                                                          "model": 3, "agent": 1},
               "concurrency": 4, "timeout_ms": 2000},
    "training": {"enabled": True, "ranks": [0, 2], "bytes": 500000, "compute_ms": 40,
                 "rate_mbps": 12, "payload": 4096, "step_timeout_ms": 500, "ecn": True,
                 "dcqcn": {"enabled": True, "rai_mbps": 0.5, "rhai_mbps": 2.0,
                           "min_rate_mbps": 0.5, "timer_us": 2000, "byte_counter_kb": 64}},
    "faults": [{"at_s": 2, "action": "rate", "target": "p0l0-p0s0", "rate_mbps": 5},
               {"at_s": 3, "action": "degrade", "target": "p0l0-p0s1", "loss": 0.1}],
    "workloads": [{"kind": "iperf3", "client": 0, "server": 3, "udp": True,
                   "rate_mbps": 4, "seconds": 3},
                  {"kind": "command", "host": 1, "argv": ["sleep", "1"]}],
    "variants": [{"name": "base"},
                 {"name": "slow", "topology": {"link_mbps": 10},
                  "training": {"rate_mbps": 6, "dcqcn": {"rhai_mbps": 1.0}},
                  "controller": {"adaptive": {"elephant_mbps": 2.0}},
                  "faults": [{"at_s": 2, "action": "throttle", "target": "n0p0r0",
                              "rate_mbps": 8, "burst_kb": 32}]}],
}
RATE_PATHS = {
    "topology.link_mbps", "controller.adaptive.elephant_mbps", "training.rate_mbps",
    "training.dcqcn.rai_mbps", "training.dcqcn.rhai_mbps", "training.dcqcn.min_rate_mbps",
    "faults[0].rate_mbps", "workloads[0].rate_mbps", "variants[1].topology.link_mbps",
    "variants[1].training.rate_mbps", "variants[1].training.dcqcn.rhai_mbps",
    "variants[1].controller.adaptive.elephant_mbps", "variants[1].faults[0].rate_mbps",
}


def test_every_rate_is_scaled_alike_and_nothing_else():
    before, after = flat(EVERY_RATE), flat(rates.scale(EVERY_RATE, 0.6))
    assert set(before) == set(after)
    changed = {k for k in before if before[k] != after[k]}
    assert changed == RATE_PATHS
    assert all(after[k] == pytest.approx(before[k] * 0.6) for k in RATE_PATHS)
    sc = scenario.parse(EVERY_RATE, rate_factor=0.6)  # still valid, and what is built
    slow = sc.variant("slow")
    spec = slow.fabric(SPEC_PREFIX)
    assert {lk.mbps for lk in spec.links if lk.kind == "host"} == {6.0}
    assert spec.queue_kb == 64 and spec.mtu == 9000
    assert slow.training["rate_mbps"] == pytest.approx(3.6)
    assert slow.training["bytes"] == 500000 and slow.training["step_timeout_ms"] == 500


def test_an_explicit_topologys_link_rates_are_scaled():
    data = {"name": "x", "topology": {
        "builder": "explicit", "link_mbps": 20,
        "nodes": {"l1": {"kind": "switch"}, "s1": {"kind": "switch"},
                  "l2": {"kind": "switch"}, "h1": {"kind": "host"}, "h2": {"kind": "host"}},
        "links": [{"endpoints": ["h1", "l1"]}, {"endpoints": ["l1", "s1"], "mbps": 50},
                  {"endpoints": ["s1", "l2"]}, {"endpoints": ["l2", "h2"]}]},
        "agents": {"enabled": False}}
    spec = scenario.parse(data, rate_factor=0.5).variants[0].fabric(SPEC_PREFIX)
    assert sorted(lk.mbps for lk in spec.links) == [10.0, 10.0, 10.0, 25.0]


@pytest.mark.parametrize("path", sorted((REPO / "scenarios").glob("*.yaml")),
                         ids=lambda p: p.stem)
def test_every_shipped_fabric_scenario_still_validates_scaled(path):
    data = scenario.read(path)
    sc = scenario.parse(data)
    if sc.kind != "fabric":
        with pytest.raises(ConfigError, match="--fit: a .* scenario's rates cannot be scaled"):
            scenario.parse(data, rate_factor=0.5)
        return
    half = scenario.parse(data, rate_factor=0.5)
    for a, b in zip(sc.variants, half.variants, strict=True):
        sa, sb = a.fabric(SPEC_PREFIX), b.fabric(SPEC_PREFIX)
        assert [lk.mbps / 2 for lk in sa.links] == pytest.approx([lk.mbps for lk in sb.links])
        assert (sa.queue_kb, sa.mtu) == (sb.queue_kb, sb.mtu)
        if a.training.get("enabled"):
            assert b.training["rate_mbps"] == pytest.approx(a.training["rate_mbps"] / 2)
    assert half.source != data and scenario.parse(data).source == data


@pytest.mark.parametrize("factor", [0, 0.01, 1.5, -1])
def test_a_factor_outside_its_range_is_refused(factor):
    with pytest.raises(ConfigError, match="--fit: a rate factor from 0.05 to 1"):
        rates.scale(EVERY_RATE, factor)


# -- the records ---------------------------------------------------------------------------
FIT = fit.Fit(0.6, 1.0, "userspace", "model", 0.25, "ecmp-stride", 0.68, 0.4, 1.04,
              costs_measured_on="here").to_dict()


def test_summary_and_manifest_carry_the_fit_the_runner_was_given(tmp_path, monkeypatch):
    class Experiment:
        def check_host(self, caps):
            pass

        def start(self, ctx):
            pass

        def run_variant(self, variant, *, seed, out, tag, ctx):
            return {"name": variant.name, "seed": seed,
                    "agents": {"chains_started": 0, "chains_completed": 0,
                               "latency_ms": {"p50": None}}, "training": {"iterations": 0}}

        def finish(self, entries, out, ctx):
            return {}

    monkeypatch.setattr(runner, "probe", lambda run_id: SimpleNamespace(to_dict=dict))
    monkeypatch.setattr(runner.report, "write",
                        lambda summary, out: (out / layout.REPORT).write_text("# r\n"))
    sc = SimpleNamespace(name="t", kind="fabric", description="", seed=1, run_seeds=(1,),
                         duration_s=1, variants=[SimpleNamespace(name="a")], monitor=None,
                         source={}, experiment=Experiment(), picked=())
    runner.run(sc, tmp_path / "fit", progress=lambda line: None, monitor=False, fit=FIT)
    runner.run(sc, tmp_path / "plain", progress=lambda line: None, monitor=False)
    for name in (layout.SUMMARY, layout.MANIFEST):
        got = json.loads((tmp_path / "fit" / name).read_text())
        assert got["fit"] == FIT
        problems = record_checks.check_records(records.RECORDS[name.split(".")[0].upper()], [got])
        assert [p for p in problems if "fit" in p] == []
        assert "fit" not in json.loads((tmp_path / "plain" / name).read_text())


def test_the_reference_describes_the_fit_and_a_wrong_one_is_found():
    summary = json.loads((SMALL / layout.SUMMARY).read_text())
    rec = records.RECORDS["SUMMARY"]
    assert record_checks.check_records(rec, [{**summary, "fit": FIT}]) == []
    assert record_checks.check_records(rec, [summary]) == []  # optional
    broken = {**summary, "fit": {k: v for k, v in FIT.items() if k != "factor"}}
    assert record_checks.check_records(rec, [broken]) == ["summary.json: fit.factor missing"]
    assert {"fit", "fit.factor", "fit.host_cores", "fit.predicted_cores"} <= {
        f.name for f in records.RECORDS["MANIFEST"].fields}


def test_the_report_the_loader_and_the_results_index_show_the_fit(tmp_path):
    from testbed import results
    from testbed.core.seeds import combine
    from testbed.reports import report, web

    run = {"name": "a", "seed": 1, "run_id": "0001", "dir": "variants/a",
           "fabric": {"switches": 8, "hosts": 4, "links": 12, "start_s": 2.0, "stop_s": 0.5},
           "agents": {"chains_started": 1, "chains_completed": 1, "chains_failed": 0,
                      "latency_ms": {"p50": 5.0, "p95": 8.0, "p99": 9.0, "max": 9.0}},
           "training": {"bytes": 0, "goodput_mbps": 0.0, "iterations": 0,
                        "iteration_ms": {"p50": None, "p99": None}}}
    folder = tmp_path / "r"
    (folder / "variants" / "a").mkdir(parents=True)
    summary = {"scenario": "demo", "kind": "fabric", "seed": 1, "seeds": [1],
               "duration_s": 5, "description": "d", "fit": FIT,
               "capabilities": {"kernel": "k", "backends": {"switch datapath": "user"}},
               "runs": [combine("a", [run])]}
    (folder / layout.SUMMARY).write_text(json.dumps(summary))
    text = report.write(summary, folder).read_text()
    assert text.splitlines()[2].startswith("**Rates scaled x0.6 to fit this host**")
    assert FIT["line"] in text
    df = results.runs(folder)
    assert set(df["rate_factor"]) == {0.6} and df.attrs["fit"]["factor"] == 0.6
    assert set(results.runs(SMALL)["rate_factor"]) == {1.0}
    page = web.ResultsSite(tmp_path).index_page().decode()
    assert "<th>rates</th>" in page and "<td>x0.6 (--fit)</td>" in page


# -- the command line ----------------------------------------------------------------------
@pytest.fixture
def one_core(monkeypatch):
    monkeypatch.setattr(fit, "usable_cores", lambda root=fit.CGROUP_ROOT: 1.0)
    monkeypatch.setattr(fit, "host_datapath", lambda: "userspace")
    monkeypatch.setattr(checked, "CHECKED_FILE", REPO / "nonexistent-checked.json")


def test_run_fit_scales_before_bring_up_and_hands_the_fit_to_the_runner(
        one_core, monkeypatch, tmp_path, capsys):
    from testbed.reports import report

    seen = {}

    def fake_run(sc, out, **kw):
        seen.update(sc=sc, **kw)
        return {"runs": [], "kind": "fabric"}

    monkeypatch.setattr(runner, "run", fake_run)
    monkeypatch.setattr(report, "table", lambda summary: "")
    monkeypatch.setattr("os.geteuid", lambda: 0)
    assert main(["run", "fat-tree", "--fit", "--out", str(tmp_path / "o")]) == 0
    err = capsys.readouterr().err
    fitted = seen["fit"]
    assert fitted["factor"] == 0.6 and fitted["host_cores"] == 1.0
    assert "testbed: fit: 1 core, userspace datapath: predicted" in err
    assert "rates x0.6" in err
    assert seen["sc"].variant("ecmp-stride").topology["link_mbps"] == 12.0
    assert seen["sc"].source["topology"]["link_mbps"] == 12.0


@pytest.mark.parametrize("args,field", [
    (["run", "hedera", "--fit"], "--fit: variant ecmp-stride1 runs elephants"),
    (["run", "macsec", "--fit"], "--fit: a macsec scenario"),
    (["run", "fat-tree", "--fit", "--servers", "gpu2"], "--fit: fits a run to this one host"),
    (["up", "hedera", "--fit"], "--fit: variant ecmp-stride1 runs elephants"),
    (["up", "fat-tree", "--fit", "--servers", "gpu2"], "--fit: fits a run to this one host"),
])
def test_bad_combinations_are_one_line_and_exit_2(one_core, args, field, capsys, tmp_path):
    assert main([*args, "--results", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"testbed: error: {field}")
    assert list(tmp_path.iterdir()) == []  # nothing created


def test_no_factor_on_this_host_is_exit_1_before_anything(one_core, capsys, tmp_path):
    assert main(["run", "agents-vs-training", "--fit", "--results", str(tmp_path)]) == 1
    assert "no rate factor is predicted clean on 1 core" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_up_fit_asks_its_supervisor_for_the_scaled_lab(one_core, monkeypatch, tmp_path,
                                                       capsys):
    from testbed.lab import up

    class Stop(HostError):
        pass

    def popen(*a, **kw):
        raise Stop("stopped before the supervisor")

    monkeypatch.setattr(up, "need_root", lambda what: None)
    monkeypatch.setattr(up.subprocess, "Popen", popen)
    assert main(["up", "fat-tree", "--fit", "--results", str(tmp_path)]) == 1
    request = json.loads(next(tmp_path.rglob(layout.LAB_REQUEST)).read_text())
    assert request["fit"]["factor"] == 0.6 and request["fit"]["scaled"]
    assert record_checks.check_records(records.RECORDS["LAB_REQUEST"], [request]) == []
    assert "rates x0.6" in capsys.readouterr().err


def test_the_supervisor_builds_what_the_request_fitted():
    sc = scenario.load(scenario.path_of("fat-tree"), rate_factor=0.6)
    assert sc.variant("reference").topology["link_mbps"] == 12.0


# -- where each scenario was checked clean ---------------------------------------------------
def test_scenarios_say_where_each_was_checked_clean(tmp_path, capsys):
    table = tmp_path / "checked.json"
    checked.record("fat-tree", {"cores": 2, "datapath": "userspace", "cpu_headroom": 0.3,
                                "busiest_thread_cores": 0.72, "seeds": [1, 2, 3],
                                "date": "2026-12-07"}, table)
    assert main(["scenarios", "--checked", str(table)]) == 0
    out = capsys.readouterr().out
    assert ("fat-tree (fabric)" in out and "    checked clean on 2 cores, userspace datapath "
            "(seeds 1,2,3; 2026-12-07): idle 30 %, busiest switch thread 0.72 cores") in out
    assert out.count("not yet checked") == len(list((REPO / "scenarios").glob("*.yaml"))) - 1
    assert main(["scenarios", "--json", "--checked", str(table)]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["fat-tree"]["checked"]["cores"] == 2 and rows["hedera"]["checked"] is None


def test_the_shipped_table_holds_only_measurements():
    """Filled by ``make bench BENCH=clean`` with ``--record``, never by hand: every entry
    names a shipped scenario, has every field the bench writes, counts each of the
    scenario's variants once per seed, and kept the idle share a clean run needs."""
    table = checked.load()
    for name, entry in table.items():
        path = checked.CHECKED_FILE.parent / f"{name}.yaml"
        assert path.is_file(), name
        assert set(entry) == set(checked.FIELDS), (name, entry)
        variants = scenario.load(str(path)).variants
        assert entry["variants"] == len(variants) * len(entry["seeds"]), (name, entry)
        assert len(entry["seeds"]) >= 3 and entry["cpu_headroom"] >= 0.10, (name, entry)
        assert entry["busiest_thread_cores"] <= 0.9, (name, entry)


@pytest.mark.parametrize("entry,why", [
    ({"cores": 2}, "datapath: missing"),
    ({"cores": 0, "datapath": "userspace"}, "cores: at least 1"),
    ({"cores": 2, "datapath": "dpdk"}, "datapath: userspace or kernel"),
    ({"cores": 2, "datapath": "userspace", "cpu_headroom": "lots"}, "cpu_headroom: must be"),
    ({"cores": 2, "datapath": "userspace", "guess": 1}, "guess: unknown field"),
])
def test_a_bad_checked_table_is_one_line(tmp_path, capsys, entry, why):
    table = tmp_path / "checked.json"
    table.write_text(json.dumps({"fat-tree": entry}))
    assert main(["scenarios", "--checked", str(table)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and why in err[0]
