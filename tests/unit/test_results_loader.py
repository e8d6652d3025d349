"""testbed.results: a real (small) results folder as DataFrames, units in the column
names, a variant column on every table; the example plots from them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from testbed import results
from testbed.errors import HostError

pd = pytest.importorskip("pandas", reason="pandas is in the dev extra (pip install .[dev])")

REPO = Path(__file__).resolve().parents[2]
SMALL = REPO / "tests" / "fixtures" / "results" / "small"


def lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


@pytest.fixture(scope="module")
def loaded():
    return results.load(SMALL)


def test_every_table_has_its_variants_units_and_the_records_rows(loaded):
    for name in results.TABLES:
        df = getattr(loaded, name)
        assert list(df.columns[:2]) == ["variant", "seed"], name
        assert set(df.attrs["units"]) == set(df.columns), name
        assert not df.empty, name
    assert list(loaded.runs.variant) == ["training-4to1", "watchdog", "degrade-health"]
    for variant in ("training-4to1", "watchdog", "degrade-health"):
        vdir = SMALL / "variants" / variant
        assert (loaded.chains.variant == variant).sum() == len(lines(vdir / "chains.jsonl"))
        assert (loaded.hops.variant == variant).sum() == len(lines(vdir / "hops.jsonl"))
        ranks = sum(len(lines(p)) for p in vdir.glob("training-rank*.jsonl"))
        assert (loaded.iterations.variant == variant).sum() == ranks


def test_values_and_units_come_from_the_records(loaded):
    first = lines(SMALL / "variants" / "watchdog" / "chains.jsonl")[0]
    row = loaded.chains[(loaded.chains.variant == "watchdog")
                        & (loaded.chains.chain == first["chain"])].iloc[0]
    assert row.latency_ms == first["latency_ms"] and row.start_s == first["start"]
    assert loaded.chains.attrs["units"]["latency_ms"] == "ms"
    summary = json.loads((SMALL / "summary.json").read_text())
    run = loaded.runs.set_index("variant").loc["training-4to1"]
    assert run.chain_p99_ms == summary["runs"][0]["agents"]["latency_ms"]["p99"]
    assert run.training_goodput_mbps == summary["runs"][0]["training"]["goodput_mbps"]
    hop = loaded.hops.iloc[0]
    assert hop.request_bytes > 0 and hop.service in {"agent", "retriever", "tool", "model"}


def test_faults_events_classes_and_flows_of_the_storm(loaded):
    faults = loaded.faults[loaded.faults.variant == "watchdog"]
    assert list(faults.action) == ["pfc_storm", "pfc_storm_stop"]
    # the cost the summary gives each fault joins its record
    assert list(faults.training_lost_packets) == [360, 352]
    assert (loaded.faults.started_s >= loaded.faults.planned_s).all()
    degrade = loaded.faults[loaded.faults.variant == "degrade-health"].iloc[0]
    assert degrade.action == "degrade" and degrade.detect_ms > 0 and degrade.repair_ms > 0
    controller = loaded.events[(loaded.events.source == "controller")
                               & (loaded.events.variant == "degrade-health")]
    assert {"health", "port_status", "drain"} <= set(controller.event)
    assert controller.t_s.notna().all() and controller.agent_t_s.isna().all()
    pfc = loaded.events[loaded.events.source == "pfc"]
    assert {"state:paused"} <= set(pfc.event) and pfc.agent_t_s.notna().all()
    classes = loaded.classes
    assert set(classes.traffic_class) == {"cnp", "roce", "lossy"}
    assert classes.attrs["units"]["backlog_bytes"] == "bytes"
    flows = loaded.flows
    assert (flows.one_way_ms > 0).all() and (flows.received_s > flows.sent_s).all()


def test_queues_repeat_an_unchanged_port_at_its_new_time(loaded):
    tel = lines(SMALL / "variants" / "training-4to1" / "telemetry.jsonl")
    same = next(r for r in tel if "same" in r)
    q = loaded.queues
    at = q[(q.variant == "training-4to1") & (q.t_s == same["t"])
           & (q.switch == same["switch"])]
    assert sorted(at.port) == sorted(same["same"])
    assert q.util.between(0, 1.5).all()


def test_not_a_results_folder_is_one_clear_error(tmp_path):
    with pytest.raises(HostError, match="no summary.json: not a results folder"):
        results.load(tmp_path)


def test_without_pandas_the_error_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "pandas", None)
    with pytest.raises(HostError, match=r"pip install '\.\[analysis\]'"):
        results.chains(SMALL)


def run_example(folder: Path, out: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, str(REPO / "examples" / "chain_latency.py"),
                           str(folder), "-o", str(out)], capture_output=True, text=True,
                          timeout=120, env=env)


def test_the_example_plots_the_figure(tmp_path):
    out = tmp_path / "chains.png"
    done = run_example(SMALL, out)
    assert done.returncode == 0, done.stderr[-2000:]
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_each_seed_of_a_variant_is_its_own_rows(tmp_path):
    import shutil

    root = tmp_path / "r"
    shutil.copytree(SMALL, root)
    summary = json.loads((root / "summary.json").read_text())
    run = summary["runs"][0]
    base = root / run["dir"]
    for seed in (1, 2):
        shutil.copytree(base, base / f"seed{seed}")
    run["seeds"] = [{"name": run["name"], "seed": s, "dir": f"{run['dir']}/seed{s}"}
                    for s in (1, 2)]
    summary["runs"] = [run]
    (root / "summary.json").write_text(json.dumps(summary))
    chains = results.chains(root)
    one = len(lines(base / "chains.jsonl"))
    assert chains.groupby("seed").size().to_dict() == {1: one, 2: one}
    assert set(results.runs(root).seed) == {1, 2}
