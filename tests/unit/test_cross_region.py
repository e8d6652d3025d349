"""Cross-region checkpoint writes: the ``backbone.checkpoints`` section, the variants it
makes, and the figures (pure: touches nothing)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from testbed.core.scenario import parse
from testbed.errors import ConfigError
from testbed.experiments.backbone.run import variant_plan
from testbed.experiments.backbone.schema import check_timing, validate
from testbed.storage.checkpoints import checkpoint_key, listed_keys
from testbed.storage.replication import around_faults, in_flight, lags, reads_agree, sync_argv

REPO = Path(__file__).resolve().parents[2]
SCENARIO = REPO / "scenarios" / "cross-region-writes.yaml"
SMALL = {"topology": "small"}  # regions ra and rb


def _section(**ckpt) -> dict:
    return {**SMALL, "checkpoints": {"src": "ra", "dst": "rb", **ckpt}}


def test_scenario_validates_with_async_and_sync_sharing_the_cut():
    data = yaml.safe_load(SCENARIO.read_text())
    scenario = parse(data)
    assert [v.name for v in scenario.variants] == ["async", "sync"]
    cfg = validate(data["backbone"])
    check_timing(cfg, data["duration_s"])
    ck = cfg["checkpoints"]
    assert ck["src"] == "eu-west" and ck["dst"] == "us-east"
    assert ck["objects"] * ck["interval_ms"] / 1000 <= data["duration_s"] <= 40
    assert {f["action"] for f in cfg["faults"]} >= {"cut_link"}


def test_defaults_filled():
    ck = validate(_section())["checkpoints"]
    assert ck["modes"] == ["async", "sync"] and ck["objects"] > 0 and ck["size_kb"] > 0
    assert validate(SMALL)["checkpoints"] is None


@pytest.mark.parametrize("ckpt, field", [
    ({"src": "nowhere"}, "backbone.checkpoints.src"),
    ({"dst": "mars"}, "backbone.checkpoints.dst"),
    ({"dst": "ra"}, "backbone.checkpoints.dst"),
    ({"size_kb": -1}, "backbone.checkpoints.size_kb"),
    ({"size_kb": 0}, "backbone.checkpoints.size_kb"),
    ({"objects": -5}, "backbone.checkpoints.objects"),
    ({"interval_ms": -250}, "backbone.checkpoints.interval_ms"),
    ({"volume_mb": -8}, "backbone.checkpoints.volume_mb"),
    ({"volumes": 1, "volume_mb": 1}, "backbone.checkpoints.volumes"),
    ({"modes": ["async", "async"]}, "backbone.checkpoints.modes"),
    ({"modes": ["lazy"]}, "backbone.checkpoints.modes[0]"),
    ({"modes": []}, "backbone.checkpoints.modes"),
    ({"bogus": 1}, "backbone.checkpoints.bogus"),
])
def test_bad_input_names_the_field(ckpt, field):
    with pytest.raises(ConfigError) as exc:
        validate(_section(**ckpt))
    assert exc.value.field == field, exc.value


def test_writes_must_end_inside_the_run():
    cfg = validate(_section(objects=100, interval_ms=500))
    check_timing(cfg, 50)
    with pytest.raises(ConfigError) as exc:
        check_timing(cfg, 49)
    assert exc.value.field == "backbone.checkpoints.objects"


@pytest.mark.parametrize("edit, words", [
    ({"dst": "mars"}, "unknown region 'mars'"),
    ({"size_kb": -4}, "size_kb: must be 1..16384, not -4"),
])
def test_cli_bad_input_is_one_line_and_exit_2(tmp_path, edit, words):
    data = yaml.safe_load(SCENARIO.read_text())
    data["backbone"]["checkpoints"].update(edit)
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data))
    done = subprocess.run([sys.executable, "-m", "testbed.core.cli", "validate", str(path)],
                          capture_output=True, text=True, cwd=REPO, timeout=60)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0], done.stderr


def test_variants_per_timer_set_and_mode():
    two = validate(_section(modes=["sync"]))  # two timer sets by default
    assert [(v.name, v.timers, v.mode) for v in variant_plan(two)] == [
        ("default-sync", "default", "sync"), ("fast-sync", "fast", "sync")]
    timers = validate({**_section(), "timers": {"fast": {}}})
    assert [(v.name, v.timers, v.mode) for v in variant_plan(timers)] == [
        ("async", "fast", "async"), ("sync", "fast", "sync")]
    assert [v.name for v in variant_plan(validate(SMALL))] == ["default", "fast"]


def test_filer_sync_is_one_way_on_the_bucket():
    argv = sync_argv("weed", "172.16.0.1", "172.16.1.1")
    assert "-isActivePassive" in argv and "filer.sync" in argv
    assert "-a.path=/buckets/objects" in argv and "-b.path=/buckets/objects" in argv


def test_lag_is_arrival_minus_ack_and_failed_writes_are_not_counted():
    writes = [{"key": "a", "t_start": 1.0, "t_ack": 1.01, "write_ms": 10, "ok": True,
               "bytes": 100},
              {"key": "b", "t_start": 2.0, "t_ack": 2.3, "write_ms": 300, "ok": True,
               "bytes": 100},
              {"key": "c", "t_start": 3.0, "t_ack": 3.5, "write_ms": 500, "ok": False,
               "bytes": 100}]
    arrivals = [{"key": "a", "t": 1.21, "sha256_ok": True},
                {"key": "b", "t": 2.2, "sha256_ok": True}]  # seen before the sync ack
    rows = lags(writes, arrivals)
    assert [r["key"] for r in rows] == ["a", "b"]
    assert rows[0]["lag_ms"] == pytest.approx(200.0) and rows[1]["lag_ms"] == 0.0
    flight = in_flight(rows, 0.0, 2.0, 0.5)
    assert flight[1] == [1.0, 0, 0] and flight[2] == [1.5, 0, 0]
    around = around_faults(rows, [{"fault": "cut_link x", "at_s": 2.0}], 0.0, span_s=1.5)
    assert around == [{"fault": "cut_link x", "at_s": 2.0, "lag_ms_before": 200.0,
                       "lag_ms_after": 0.0, "write_ms_before": 10, "write_ms_after": 300}]


def test_one_bucket_counts_missing_and_wrong_bytes_per_region():
    expected = {checkpoint_key(0): "x", checkpoint_key(1): "y"}
    reads = {"ra": [{"key": checkpoint_key(0), "status": 200, "sha256": "x"},
                    {"key": checkpoint_key(1), "status": 200, "sha256": "y"}],
             "rb": [{"key": checkpoint_key(0), "status": 200, "sha256": "z"}]}
    agree = reads_agree(expected, reads)
    assert agree["consistent"] == 0
    assert agree["missing"] == {"ra": 0, "rb": 1} and agree["mismatches"] == {"ra": 0, "rb": 1}


def test_listing_parse():
    xml = ("<ListBucketResult><Contents><Key>ckpt-00000</Key><Size>1</Size></Contents>"
           "<Contents><Key>ckpt-00001</Key></Contents></ListBucketResult>")
    assert listed_keys(xml) == {"ckpt-00000", "ckpt-00001"}
