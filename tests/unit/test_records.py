"""The results reference: every record file :mod:`testbed.core.layout` names has an entry
in :data:`testbed.core.records.RECORDS`, and real records match their entries."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from testbed.core import layout, record_checks, records
from testbed.core.reference import markdown_pages

SMALL = Path(__file__).resolve().parents[1] / "fixtures" / "results" / "small"


def test_every_name_of_the_layout_has_an_entry_and_every_entry_a_name():
    names = set(records.layout_names())
    assert names - set(records.RECORDS) == set(), "record files without a reference entry"
    assert set(records.RECORDS) - names == set(), "entries for names the layout lacks"
    for key, rec in records.RECORDS.items():
        assert rec.pattern == getattr(layout, key), key
        assert rec.where in record_checks.WHERE and rec.meaning and rec.writer, key


def test_a_new_record_name_without_an_entry_fails(monkeypatch):
    monkeypatch.setattr(layout, "NEW_RECORD", "new-record.jsonl", raising=False)
    assert "NEW_RECORD" in set(records.layout_names()) - set(records.RECORDS)


def test_every_field_has_a_known_type_and_a_meaning():
    for key, rec in records.RECORDS.items():
        for f in rec.fields:
            assert all(t in record_checks._TYPES for t in f.type.split("|")), (key, f.name)
            assert f.meaning, (key, f.name)
        assert len({f.name for f in rec.fields}) == len(rec.fields), key


def test_the_small_real_folder_matches_the_reference():
    assert record_checks.check_folder(SMALL) == []


def test_an_undescribed_file_a_missing_field_and_a_wrong_type_are_found(tmp_path):
    root = tmp_path / "r"
    shutil.copytree(SMALL, root)
    vdir = root / "variants" / "watchdog"
    (vdir / "mystery.jsonl").write_text("{}\n")
    lines = (vdir / "chains.jsonl").read_text().splitlines()
    first = json.loads(lines[0])
    first["latency_ms"] = "slow"
    del first["template"]
    first["extra"] = 1
    (vdir / "chains.jsonl").write_text("\n".join([json.dumps(first), *lines[1:]]) + "\n")
    summary = json.loads((root / "summary.json").read_text())
    del summary["runs"][0]["agents"]["latency_ms"]["p99"]
    (root / "summary.json").write_text(json.dumps(summary))
    problems = record_checks.check_folder(root)
    assert "variants/watchdog/mystery.jsonl: no entry in testbed.core.records describes " \
           "it" in problems
    assert "variants/watchdog/chains.jsonl: line 1: template missing" in problems
    assert "variants/watchdog/chains.jsonl: line 1: latency_ms is str, not float" in problems
    assert "variants/watchdog/chains.jsonl: line 1: extra is not described" in problems
    assert "summary.json: runs[].agents.latency_ms.p99 missing" in problems


def test_the_reference_page_lists_every_record_and_field():
    page = markdown_pages()["reference/results.md"]
    assert page.startswith("# Results reference")
    for rec in records.RECORDS.values():
        assert f"### `{rec.pattern}`" in page
        for f in rec.fields:
            assert f"| `{f.name}` | {f.type.replace('|', chr(92) + '|')} |" in page
    assert "| `latency_ms` | float | ms |" in page


def test_the_layouts_file_names_match_the_patterns_they_are_described_by():
    made = {"RANK_GLOB": layout.rank_file(3), "RANK_LOG_GLOB": layout.rank_log(3),
            "SERVICE_STATS_GLOB": layout.service_stats("tool"),
            "SERVICE_LOG_GLOB": layout.service_log("tool-spare"),
            "PROBE_GLOB": layout.probe_file("n0p0f1"), "PROBE_LOG_GLOB": layout.probe_log("x"),
            "TIMELINE_PLOT_GLOB": layout.timeline_plot("cut no repair")}
    for key, name in made.items():
        assert records.describing(name, records.RECORDS[key].where) == key, name
