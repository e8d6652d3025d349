"""``make bench BENCH=clean``: its table and its exit status, from injected results (the
bench itself runs every scenario and is not run here)."""

from __future__ import annotations

import json
from pathlib import Path

from bench import clean_bench
from testbed.core import checked

REPO = Path(__file__).resolve().parents[2]

IDLE = "the host had less than 10 % idle CPU in {} % of the samples (ovs-vswitchd 1.2 cores)"
THREAD = ("ovs-vswitchd's forwarding thread used more than 0.9 of a core in {} % of the "
          "samples: every switch's frames waited for that one thread")


def results(tmp_path: Path, runs: list[tuple[str, list[tuple[bool, list[str], list[dict]]]]],
            seeds=(1,)) -> tuple[dict, Path]:
    """A results folder of ``runs``: (variant, [(ok, reasons, samples) a seed])."""
    entries = []
    for name, per_seed in runs:
        seeded = []
        for seed, (ok, reasons, samples) in zip(seeds, per_seed, strict=True):
            folder = f"variants/{name}/seed{seed}" if len(seeds) > 1 else f"variants/{name}"
            (tmp_path / folder).mkdir(parents=True)
            (tmp_path / folder / "fidelity.jsonl").write_text(
                "".join(json.dumps(s) + "\n" for s in samples))
            seeded.append({"name": name, "seed": seed, "dir": folder,
                           "fidelity": {"ok": ok, "reasons": reasons}})
        entries.append({"name": name, "seeds": seeded} if len(seeds) > 1 else seeded[0])
    return {"seeds": list(seeds), "seed": seeds[0], "runs": entries}, tmp_path


def samples(idle: list[float], thread: list[float], measuring: bool = True) -> list[dict]:
    return [{"host_idle": i, "ovs_thread_cores": t, "measuring": measuring}
            for i, t in zip(idle, thread, strict=True)]


def test_a_row_counts_every_variant_and_seed_and_names_the_worst_reason(tmp_path):
    quiet = samples([0.5] * 10, [0.3] * 10)
    summary, folder = results(tmp_path, [
        ("ecmp", [(True, [], quiet), (False, [IDLE.format(30)], quiet)]),
        ("spray", [(False, [IDLE.format(40), THREAD.format(82)],
                    samples([0.05] * 8 + [0.5] * 2, [0.95] * 9 + [0.2])),
                   (True, [], quiet)]),
    ], seeds=(1, 2))
    row = clean_bench.row_from("ecmp-vs-adaptive", summary, folder)
    assert (row.runs, row.flagged, row.seeds) == (4, 2, [1, 2])
    assert row.worst == "switch thread > 0.9 core, 82 % of samples"
    assert row.idle_p20 == 0.05 and row.thread_p80 == 0.95
    assert not row.clean


def test_only_the_measured_window_is_read(tmp_path):
    window = samples([0.4] * 5, [0.5] * 5) + samples([0.0] * 5, [1.0] * 5, measuring=False)
    summary, folder = results(tmp_path, [("a", [(True, [], window)])])
    row = clean_bench.row_from("s", summary, folder)
    assert (row.idle_p20, row.thread_p80, row.clean) == (0.4, 0.5, True)


def test_the_table_has_a_row_a_scenario_and_the_exit_status_follows_the_flags():
    rows = [clean_bench.Row("fat-tree", 4, 3, "switch thread > 0.9 core, 82 % of samples",
                            0.82, 0.03, 0.97),
            clean_bench.Row("lossless", 4, 0, idle_p20=0.35, thread_p80=0.41),
            clean_bench.Row("hedera", error="run failed (1): testbed: no space")]
    lines = clean_bench.table(rows).splitlines()
    assert lines[0].split() == ["scenario", "runs", "flagged", "worst", "reason", "idle",
                                "p20", "thread", "p80"]
    assert lines[2].split()[:3] == ["fat-tree", "4", "3"] and lines[2].endswith("3 %        0.97")
    assert lines[3].split() == ["lossless", "4", "0", "-", "35", "%", "0.41"]
    assert "run failed (1)" in lines[4]
    assert clean_bench.exit_status(rows) == 1
    assert clean_bench.exit_status(rows[1:2]) == 0
    assert clean_bench.exit_status([rows[2]]) == 1  # a scenario that did not run is a miss
    assert clean_bench.exit_status([]) == 1


def test_main_prints_the_table_and_exits_1_on_a_flagged_run(monkeypatch, tmp_path, capsys):
    made = {"fat-tree": clean_bench.Row("fat-tree", 4, 1, "host idle < 10 %, 30 % of samples",
                                        0.3, 0.08, 0.7),
            "lossless": clean_bench.Row("lossless", 4, 0, idle_p20=0.3, thread_p80=0.5)}
    asked = []

    def run_scenario(path, out, seeds):
        asked.append((path.stem, seeds))
        return made[path.stem]

    monkeypatch.setattr(clean_bench, "run_scenario", run_scenario)
    monkeypatch.setattr(clean_bench.os, "geteuid", lambda: 0)
    status = clean_bench.main(["--only", "fat-tree,lossless", "--seeds", "1,2,3",
                               "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert status == 1 and asked == [("fat-tree", "1,2,3"), ("lossless", "1,2,3")]
    assert "host idle < 10 %, 30 % of samples" in out
    assert "MISSED no flagged run: 1 flagged of 8" in out
    made["fat-tree"] = clean_bench.Row("fat-tree", 4, 0, idle_p20=0.2, thread_p80=0.6)
    assert clean_bench.main(["--only", "fat-tree,lossless", "--out", str(tmp_path)]) == 0
    assert "met    no flagged run: 0 flagged of 8" in capsys.readouterr().out


def test_an_unknown_scenario_is_one_line_and_exit_2(monkeypatch, capsys):
    monkeypatch.setattr(clean_bench.os, "geteuid", lambda: 0)
    assert clean_bench.main(["--only", "nope"]) == 2
    assert capsys.readouterr().err.strip() == "clean_bench: --only: no scenario nope"


def test_record_writes_the_clean_and_drops_what_a_larger_host_contradicts(tmp_path):
    table = tmp_path / "checked.json"
    checked.record("fat-tree", {"cores": 2, "datapath": "userspace"}, table)
    checked.record("hedera", {"cores": 8, "datapath": "userspace"}, table)
    rows = [clean_bench.Row("lossless", 4, 0, idle_p20=0.3, thread_p80=0.5, seeds=[1, 2]),
            clean_bench.Row("fat-tree", 4, 2, "x", 0.5),
            clean_bench.Row("hedera", 27, 17, "x", 0.5)]
    done = clean_bench.record(rows, cores=4, datapath="userspace", machine="m", path=table)
    got = checked.load(table)
    assert set(got) == {"lossless", "hedera"}  # fat-tree's 2-core claim fell; hedera's 8 stays
    assert got["lossless"]["cores"] == 4 and got["lossless"]["cpu_headroom"] == 0.3
    assert got["lossless"]["busiest_thread_cores"] == 0.5 and got["lossless"]["seeds"] == [1, 2]
    assert len(done) == 2


def test_the_bench_is_registered():
    from bench.__main__ import BENCHES

    assert BENCHES["clean"][1] is clean_bench.main
