"""The lab guides (labs/) and their grading (testbed/reports/grading.py), without root.

Labs 2 and 7 (design tasks) are graded here on the real starter and solution files;
the other labs' checks are fed synthetic summary.json files shaped like real runs
(the figures of the guides: a solution-like run passes, a starter-like run fails with
the reason). tests/integration/test_labs.py runs the guides' commands for real.
"""

from __future__ import annotations

import copy
import importlib
import json
from pathlib import Path

import pytest
import yaml

from testbed.core import digest, scenario
from testbed.core.cli import main
from testbed.errors import ConfigError
from testbed.experiments.backbone.schema import validate as validate_backbone
from testbed.reports import grading

LABS = grading.all_labs()


def grade(lab: int, folder: Path) -> dict[str, grading.Verdict]:
    return dict(grading.grade(grading.find(str(lab)), folder))


def failing(verdicts: dict[str, grading.Verdict]) -> set[str]:
    return {name for name, v in verdicts.items() if not v.ok}


# the framework ---------------------------------------------------------------------
def test_ten_labs_each_complete():
    assert [lab.number for lab in LABS] == [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]
    for lab in LABS:
        assert lab.title.startswith(f"Lab {lab.number}: "), lab.folder
        assert (lab.folder / "solution" / "NOTES.md").is_file(), lab.folder
        assert any((lab.folder / "starter").iterdir()), lab.folder
        steps = lab.commands()
        assert set(steps) >= set(grading.STEPS) - {"explore"}, (lab.name, sorted(steps))
        assert all(lab.module().CHECKS), lab.name
        readme = (lab.folder / "README.md").read_text()
        for heading in ("## Background", "## Predict, then run", "## What to observe",
                        "## Your task"):
            assert heading in readme, (lab.name, heading)


def test_find_by_number_folder_and_name():
    assert grading.find("03").name == "hashing"
    assert grading.find("lab05_resilience").number == 5
    assert grading.find("macsec").number == 6
    assert grading.find("storage").number == 9
    assert grading.find("10").name == "acceptance"
    with pytest.raises(ConfigError, match="LAB: no lab '11'"):
        grading.find("11")


@pytest.mark.parametrize("lab", LABS, ids=lambda lab: lab.name)
def test_starter_and_solution_scenarios_validate(lab):
    files = sorted(lab.folder.glob("*/*.yaml"))
    for path in files:
        if path.name not in ("answers.yaml", "predictions.yaml"):
            scenario.load(path)  # raises ConfigError with the field on a bad file
    assert files


def test_check_cli_exit_status(tmp_path, capsys):
    assert main(["check", "11", str(tmp_path)]) == 2
    assert "LAB: no lab '11'" in capsys.readouterr().err
    assert main(["check", "1", str(tmp_path)]) == 2
    assert "has no summary.json" in capsys.readouterr().err
    assert main(["check", "1", str(tmp_path / "nowhere")]) == 2
    (tmp_path / "summary.json").write_text("{not json")
    digest.write(tmp_path)
    assert main(["check", "1", str(tmp_path)]) == 2
    assert "not JSON" in capsys.readouterr().err
    solution = grading.find("2").folder / "solution"
    assert main(["check", "2", str(solution)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert all(line.startswith("PASS ") for line in out[:-1]) and "4/4" in out[-1]
    assert main(["check", "2", str(solution.parent / "starter")]) == 1
    assert capsys.readouterr().out.count("FAIL ") == 4


# lab 2: the calculator ---------------------------------------------------------------
def test_lab2_wrong_answers_named(tmp_path):
    folder = grading.find("2").folder
    data = yaml.safe_load((folder / "solution" / "answers.yaml").read_text())
    data["part_a"]["reach_ratio"] = 64          # the 102.4 Tb/s example's ratio
    data["part_a"]["more_gpus"] = "planes"
    data["part_b"]["planes"] = 8                # reaches 30,000 but 4 planes do too
    (tmp_path / "answers.yaml").write_text(yaml.safe_dump(data))
    v = grade(2, tmp_path)
    assert failing(v) == {"two-tier-radix-and-reach", "planes-or-third-tier", "fewest-planes"}
    assert "reach_ratio 64" in v["two-tier-radix-and-reach"].reason
    assert "4 planes already reach 30,000" in v["fewest-planes"].reason


# lab 7: the backbone design, graded from summary.json --------------------------------
def backbone_summary(path: Path, restore_ms: float, goodput: float = 30.0) -> dict:
    """summary.json of a backbone run of ``path`` (as the kind writes it), with every
    fault restored after ``restore_ms``."""
    section = yaml.safe_load(path.read_text())["backbone"]
    design = validate_backbone(copy.deepcopy(section))["design"]
    groups = {g["name"]: g["links"] for g in design["risk_groups"]}
    links = [{**lk, "risk_groups": [n for n, ls in groups.items() if lk["name"] in ls]}
             for lk in design["links"]]
    faults = [f for f in section["faults"] if not f["action"].startswith("restore")]
    failovers = [{"fault": f"{f['action']} {f['target']}", "ok": True, "restore_ms": restore_ms,
                  "reachability_after": 1.0} for f in faults]
    return {"backbone": {"pops": [p["name"] for p in design["pops"]],
                         "regions": [r["name"] for r in design["regions"]],
                         "links": links, "risk_groups": groups},
            "runs": [{"name": "student", "failovers": failovers,
                      "replication": [{"src": "us-east", "dst": "eu-central", "rate_mbps": 30,
                                       "goodput_mbps": goodput, "error": None}],
                      "fidelity": {"ok": True}}]}


def write(folder: Path, summary: dict) -> Path:
    """A results folder as a run leaves it: summary.json, then the digest of its files."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "summary.json").write_text(json.dumps(summary))
    digest.write(folder)
    return folder


def test_lab7_design_and_timers(tmp_path):
    folder = grading.find("7").folder
    good = write(tmp_path / "good", backbone_summary(folder / "solution" / "backbone.yaml", 250))
    assert failing(grade(7, good)) == set()
    starter = write(tmp_path / "starter",
                    backbone_summary(folder / "starter" / "backbone.yaml", 4519))
    v = grade(7, starter)
    assert failing(v) == {"fewer-links", "restore-within-target"}
    assert "21 PoP-PoP links against the default's 21" in v["fewer-links"].reason
    assert "too slow" in v["restore-within-target"].reason


def test_lab7_design_rule_recomputed_not_trusted(tmp_path):
    """A design that breaks the rule fails, whatever the run said about it."""
    folder = grading.find("7").folder
    summary = backbone_summary(folder / "solution" / "backbone.yaml", 100)
    summary["backbone"]["links"] = [lk for lk in summary["backbone"]["links"]
                                    if lk["name"] != "dxb-sin-2"]
    summary["backbone"]["design_check"] = {"ok": True}
    v = grade(7, write(tmp_path / "r", summary))
    assert not v["design-rule"].ok and "sin" in v["design-rule"].reason


# synthetic fabric runs ---------------------------------------------------------------
def fabric_run(name: str, *, p99: float, goodput: float = 0.0, iterations: int = 0,
               oversubscription: float = 1.0, pattern: str = "ring", **extra) -> dict:
    run = {"name": name, "pattern": pattern, "dir": f"variants/{name}",
           "fidelity": {"ok": True, "reasons": []},
           "agents": {"chains_started": 500, "chains_completed": 500, "chains_failed": 0,
                      "latency_ms": {"p50": p99 / 3, "p99": p99},
                      "hop_sum_ms": {"p50": p99 / 3 * 0.998, "p99": p99}},
           "training": {"goodput_mbps": goodput, "iterations": iterations,
                        "packets_lost": 0, "cnps_received": 0},
           "_spec": {"builder": "leaf-spine", "params": {
               "oversubscription": oversubscription, "leaves_per_plane": 4,
               "spines_per_plane": 4}}}
    run.update(extra)
    return run


def write_runs(folder: Path, runs: list[dict], **top) -> Path:
    for run in runs:
        d = folder / run["dir"]
        d.mkdir(parents=True, exist_ok=True)
        (d / "spec.json").write_text(json.dumps(run.pop("_spec")))
        (d / "controller.json").write_text(json.dumps({"apps": run.pop("_apps", [])}))
        (d / "training.json").write_text(json.dumps({"rate_mbps": run.pop("_rate", 12)}))
    return write(folder, {"runs": runs, **top})


def lab1_runs(paced_p99: float, paced_goodput: float, rate: float = 4) -> list[dict]:
    # the guide's figures (README run): 185.6 / 246.4 / 624.3 ms, 66.8 / 14.9 Mb/s
    return [fabric_run("agents-only", p99=185.6),
            fabric_run("agents-only-4to1", p99=200.0, oversubscription=4),
            fabric_run("training-1to1", p99=246.4, goodput=66.8, iterations=30),
            fabric_run("training-4to1", p99=624.3, goodput=14.9, iterations=7,
                       oversubscription=4),
            fabric_run("training-4to1-paced", p99=paced_p99, goodput=paced_goodput,
                       iterations=9, oversubscription=4, _rate=rate)]


def test_lab1_paced_variant_graded(tmp_path):
    assert failing(grade(1, write_runs(tmp_path / "sol", lab1_runs(240.0, 20.0)))) == set()
    v = grade(1, write_runs(tmp_path / "starter", lab1_runs(650.0, 14.0, rate=12)))
    assert failing(v) == {"paced-slower", "paced-protects-chains", "paced-trains-no-less"}
    assert "sends at 12 Mb/s per rank and plane, training-4to1 at 12: pace it" in \
        v["paced-slower"].reason
    assert "650 ms paced against 200 ms alone on 4:1 (3.25x, limit 1.5x" in \
        v["paced-protects-chains"].reason
    # a rate so low the chains are safe but the collective starves
    v = grade(1, write_runs(tmp_path / "starved", lab1_runs(200.0, 5.0)))
    assert failing(v) == {"paced-trains-no-less"}


def test_lab1_wrong_fabric_fails(tmp_path):
    runs = lab1_runs(240.0, 20.0)
    runs[3]["_spec"]["params"]["oversubscription"] = 1
    v = grade(1, write_runs(tmp_path / "r", runs))
    assert failing(v) == {"fabrics-as-asked"}
    assert "training-4to1 ran 1:1" in v["fabrics-as-asked"].reason


def test_a_flagged_run_is_rerun_not_pass(tmp_path, capsys):
    """The hardware decides no grade: a run the fidelity monitor flagged is RERUN (exit 3)
    even when every check passes, with the monitor's reason and what to change."""
    runs = lab1_runs(240.0, 20.0)
    runs[4]["fidelity"] = {"ok": False, "reasons": ["the host had less than 10 % idle CPU"]}
    folder = write_runs(tmp_path / "r", runs)
    graded = grading.assess(grading.find("1"), folder)
    assert graded.verdict == "RERUN" and failing(dict(graded.checks)) == set()
    assert main(["check", "1", str(folder)]) == 3
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("RERUN: the fidelity monitor flagged training-4to1-paced (the "
                             "host had less than 10 % idle CPU)")
    assert "more vCPUs" in out[0] and "Close other programs" in out[0]
    assert all(line.startswith("  (not graded) PASS ") for line in out[1:-1])
    assert out[-1].endswith(": RERUN (not graded; 7/7 checks passed)")


def test_a_flagged_run_that_fails_is_rerun_too(tmp_path):
    runs = lab1_runs(650.0, 14.0, rate=12)
    runs[0]["fidelity"] = {"ok": False, "reasons": ["ovs-vswitchd pegged"]}
    graded = grading.assess(grading.find("1"), write_runs(tmp_path / "r", runs))
    assert graded.verdict == "RERUN" and graded.exit_status == 3
    assert "agents-only (ovs-vswitchd pegged)" in graded.rerun


def test_the_real_flagged_folder_grades_rerun(capsys):
    """tests/fixtures/results/small: three real runs, all flagged by the monitor."""
    assert main(["check", "1", str(SMALL)]) == 3
    out = capsys.readouterr().out
    assert out.startswith("RERUN: the fidelity monitor flagged training-4to1 (the host had "
                          "less than 10 % idle CPU in 100 % of the samples")
    assert "watchdog (" in out and "degrade-health (" in out


def lab3_runs(app_goodput: float, apps: list[str]) -> list[dict]:
    # the README's stride figures (seed medians): ecmp 121.5, adaptive 165.6, spray 192.6,
    # one switch 197.7 Mb/s
    runs = [fabric_run(n, p99=0, goodput=g, iterations=4, pattern="stride")
            for n, g in (("ecmp-stride", 121.5), ("adaptive-stride", 165.6),
                         ("spray-stride", 192.6), ("placement-stride", app_goodput),
                         ("reference", 197.7))]
    runs[3]["_apps"] = apps
    return runs


def test_lab3_placement_graded(tmp_path):
    app = ["labs.lab03_hashing.solution.placement:StridePlacement"]
    assert failing(grade(3, write_runs(tmp_path / "sol", lab3_runs(190.0, app)))) == set()
    v = grade(3, write_runs(tmp_path / "starter", lab3_runs(75.0, app)))
    assert failing(v) == {"placement-beats-ecmp", "placement-near-reference"}
    assert "(0.62x, needs 1.25x" in v["placement-beats-ecmp"].reason
    v = grade(3, write_runs(tmp_path / "noapp", lab3_runs(190.0, [])))
    assert failing(v) == {"app-loaded"}


def test_lab3_app_graded_on_the_two_variants_it_compares(tmp_path):
    """A folder of only ``--variant ecmp-stride --variant placement-stride`` (a student
    iterating on the app): the task's comparison is graded, the checks that need the
    other variants name the one missing."""
    app = ["labs.lab03_hashing.starter.placement:StridePlacement"]
    runs = [r for r in lab3_runs(75.0, app) if r["name"] in ("ecmp-stride", "placement-stride")]
    v = grade(3, write_runs(tmp_path / "two", runs))
    assert v["placement-beats-ecmp"].reason == (
        "placement 75.0 Mb/s against ECMP 121.5 Mb/s (0.62x, needs 1.25x)")
    assert v["app-loaded"].ok
    assert v["hashing-collides"].reason.startswith("no variant named 'reference'")


@pytest.mark.parametrize("who, collide", [("solution", False), ("starter", True)])
def test_lab3_placement_plan(who, collide):
    """The placement apps' plans on the lab's fabric: the solution puts a leaf's four
    flows on four uplinks (and so on four spine downlinks); the starter stacks them."""
    sc = scenario.load(grading.find("3").folder / who / "scenario.yaml")
    variant = next(v for v in sc.variants if v.name == "placement-stride")
    spec = variant.fabric("tb0000")
    rules = importlib.import_module(f"labs.lab03_hashing.{who}.placement").plan(spec)
    assert sorted(len(r) for r in rules.values()) == [4, 4, 4, 4]
    shared = any(len({port for _, _, port in r}) < len(r) for r in rules.values())
    assert shared is collide


def lab4_runs(p99: float, goodput: float, marks: int = 8254) -> list[dict]:
    # ecn-off and ecn-tuned of the README's ecn-tuning run (medians of 3 seeds)
    ecn = {"backend": "phantom", "marked": {"collective": marks, "agents": 2214}}
    return [fabric_run("ecn-off", p99=519.4, goodput=11.4, iterations=5, oversubscription=4),
            fabric_run("ecn-student", p99=p99, goodput=goodput, iterations=6,
                       oversubscription=4, ecn=ecn)]


def test_lab4_thresholds_graded(tmp_path):
    runs = lab4_runs(358.0, 16.2)
    runs[1]["training"]["cnps_received"] = 900
    assert failing(grade(4, write_runs(tmp_path / "sol", runs))) == set()
    # textbook thresholds: p99 1.15x of off, training unchanged
    runs = lab4_runs(598.7, 11.4, marks=2124)
    runs[1]["training"]["cnps_received"] = 300
    v = grade(4, write_runs(tmp_path / "textbook", runs))
    assert failing(v) == {"chain-p99-cut"}
    assert "(-15% cut, needs >= 30%)" in v["chain-p99-cut"].reason
    # marking everything hard: chains fast, training pays more than 10 %
    runs = lab4_runs(240.0, 8.9)
    runs[1]["training"]["cnps_received"] = 5000
    assert failing(grade(4, write_runs(tmp_path / "hard", runs))) == {"training-kept"}


def fault(kind: str, **fields) -> dict:
    return {"fault": kind, "ok": True, "lost_packets": 0, "chains_failed": 0,
            "repair_ms": None, "detect_ms": None, "detected_by": None, **fields}


def lab5_runs(repaired: bool) -> list[dict]:
    # the README's link-faults / plane-failure / controller-crash figures
    cut = (fault("link_down", repair_ms=8.0, lost_packets=3) if repaired else
           fault("link_down", lost_packets=1605, chains_failed=16))
    degrade = (fault("degrade", repair_ms=536.0, detected_by="health") if repaired else
               fault("degrade", lost_packets=900, chains_failed=7))
    plane = fault("plane_fail", detect_ms=12.8, detected_by="host:agents",
                  chains_failed=0 if repaired else 31, chains_inflight=261)
    return [fabric_run("cut", p99=300, faults=[cut]),
            fabric_run("degrade", p99=300, faults=[degrade]),
            fabric_run("plane", p99=300, iterations=20, faults=[plane]),
            fabric_run("crash", p99=300, faults=[fault("controller_kill"),
                                                 fault("controller_restart")])]


def test_lab5_repairs_graded(tmp_path):
    assert failing(grade(5, write_runs(tmp_path / "sol", lab5_runs(True)))) == set()
    v = grade(5, write_runs(tmp_path / "starter", lab5_runs(False)))
    assert failing(v) == {"link-cut-repaired", "lossy-link-drained", "plane-loss-survived"}
    assert "repaired after never (limit 100 ms), 1605 probes lost, 16 chains failed" in \
        v["link-cut-repaired"].reason
    runs = lab5_runs(True)
    runs[3]["faults"][0]["lost_packets"] = 4
    assert failing(grade(5, write_runs(tmp_path / "lossy", runs))) == \
        {"controller-crash-lossless"}


def lab8_runs(p99: float, drops: int = 0, pfc: bool = True, reaction: float = 16.2) -> list:
    # the tenants scenario's figures (seed 2: B alone 246.3 ms, one FIFO 687.0 ms)
    qos = {"pfc": pfc, "lossless_classes": ["tenant-a"] if pfc else [],
           "per_class": {"tenant-a": {"bytes": 9, "drops": drops, "peak_backlog_bytes": 1},
                         "tenant-b": {"bytes": 9, "drops": 8, "peak_backlog_bytes": 1}},
           "pfc_frames": {"xoff_tx": 900 if pfc else 0, "xon_tx": 800, "rx": 1700},
           "reaction_p99_sum_ms": reaction if pfc else None, "reaction_assumed_ms": 20.0}
    return [fabric_run("b-alone", p99=246.3, oversubscription=4),
            fabric_run("one-fifo", p99=687.0, goodput=19.8, iterations=10,
                       oversubscription=4),
            fabric_run("tenants-student", p99=p99, goodput=14.0, iterations=9,
                       oversubscription=4, qos=qos)]


def test_lab8_lossless_tenants_graded(tmp_path):
    assert failing(grade(8, write_runs(tmp_path / "sol", lab8_runs(286.0)))) == set()
    # the starter: equal weights, both lossy, PFC off
    v = grade(8, write_runs(tmp_path / "starter", lab8_runs(371.7, drops=419, pfc=False)))
    assert failing(v) == {"roce-lossless", "headroom-held", "tenant-b-isolated"}
    assert "without PFC" in v["roce-lossless"].reason
    assert "1.51x of B alone" in v["tenant-b-isolated"].reason
    # PFC on but the headroom too small for the reaction measured: drops, and said so
    v = grade(8, write_runs(tmp_path / "tight", lab8_runs(280.0, drops=21, reaction=31.0)))
    assert failing(v) == {"roce-lossless", "headroom-held"}
    assert "tenant-a 21" in v["roce-lossless"].reason



def lab9_results(folder: Path, scenario_file: str, *, cache_mb: int | None = None,
                 cached_p99: float = 230.0, disk_mb: int | None = None) -> Path:
    """A storage run of the lab's starter or solution scenario (manifest.json records the
    scenario it ran, as the runner writes it), with the figures of the guide's runs."""
    source = yaml.safe_load((grading.find("9").folder / scenario_file).read_text())
    if cache_mb is not None:
        source["storage"]["cache_mb"] = cache_mb
    if disk_mb is not None:
        source["storage"]["node_disk_mb"] = disk_mb
    folder.mkdir(parents=True)
    (folder / "manifest.json").write_text(json.dumps({"scenario_source": source}))
    store_reads = {"reads": 260, "errors": 0, "hit_ratio": None, "hit_ms": None,
                   "miss_ms": None, "read_ms": {"p50": 34.2, "p99": 345.0}}
    cache_reads = {"reads": 419, "errors": 0, "hit_ratio": 0.754, "read_ms": {"p50": 0.86},
                   "hit_ms": {"p50": 0.68}, "miss_ms": {"p50": 33.5}}
    runs = [fabric_run("uncached", p99=416.0, reads=store_reads,
                       throughput=[{"readers": n, "mbps": m, "reads": 50, "errors": 0}
                                   for n, m in ((1, 18.6), (2, 19.2), (4, 19.2))]),
            fabric_run("cached", p99=cached_p99, reads=cache_reads,
                       throughput=[{"readers": n, "mbps": m, "reads": 900, "errors": 0}
                                   for n, m in ((1, 606.0), (2, 3298.0), (4, 35.6))])]
    for run in runs:
        run.pop("_spec")
    return write(folder, {"runs": runs, "storage": {"speedup": 40.0, "hit_speedup": 50.1}})


def test_lab9_cache_sized_from_popularity(tmp_path):
    v = grade(9, lab9_results(tmp_path / "sol", "solution/scenario.yaml"))
    assert failing(v) == set()
    assert "3 MB is the smallest" in v["cache-sized-from-popularity"].reason
    # the starter: 1 MB holds the top 11 objects, 58 % of the reads
    v = grade(9, lab9_results(tmp_path / "starter", "starter/scenario.yaml"))
    assert failing(v) == {"cache-sized-from-popularity"}
    assert ("cache_mb 1 holds the top 11 objects, 58% of the reads; 75% needs the top 27 "
            "(2,652 KB with headers): too small") in v["cache-sized-from-popularity"].reason
    # more than needed is not the smallest; over the budget, or a budget raised, fails
    v = grade(9, lab9_results(tmp_path / "big", "starter/scenario.yaml", cache_mb=4))
    assert "3 MB already does it" in v["cache-sized-from-popularity"].reason
    v = grade(9, lab9_results(tmp_path / "raised", "starter/scenario.yaml", cache_mb=8,
                              disk_mb=10))
    assert "node_disk_mb is 10, the node's budget is 6 MB" in \
        v["cache-sized-from-popularity"].reason


def test_lab9_lesson_checks_read_the_run(tmp_path):
    v = grade(9, lab9_results(tmp_path / "slow", "solution/scenario.yaml", cached_p99=300.0))
    assert failing(v) == {"chains-p99-cut"}
    assert "(0.72x, needs <= 0.6x)" in v["chains-p99-cut"].reason
    folder = lab9_results(tmp_path / "nomanifest", "solution/scenario.yaml")
    (folder / "manifest.json").unlink()
    digest.write(folder)  # a run that wrote no manifest
    v = grade(9, folder)
    assert failing(v) == {"cache-sized-from-popularity"}
    assert "no manifest.json" in v["cache-sized-from-popularity"].reason

def lab10_runs(student: bool) -> list[dict]:
    """The rack-acceptance run's figures (seed 1); ``student``: the starter's choices
    (the cabling check alone, the health loop off)."""
    planted = [{"at_s": 0, "action": "rate", "target": "p0l1-p0s2", "rate_mbps": 5.0},
               {"at_s": 0, "action": "degrade", "target": "n4-p0l2", "loss": 0.02},
               {"at_s": 0, "action": "swap_rails", "target": "n0p0r0"},
               {"at_s": 0, "action": "throttle", "target": "n1p0r0", "rate_mbps": 5.0,
                "burst_kb": 1250.0}]
    expected = ["n0", "n0-p0l0", "n0-p0l1", "n1", "n4", "n4-p0l2", "p0l1-p0s2"]
    found = ["n0", "n0-p0l0", "n0-p0l1"] if student else expected
    score = {"found": found, "missed": [x for x in expected if x not in found],
             "extra": []}
    accepted = {"enabled": True, "planted": planted, "seconds": 2.7 if student else 32.96,
                "excluded_nodes": [x for x in found if "-" not in x], "score": score}
    unaccepted = fabric_run("unaccepted", p99=0, acceptance={"enabled": False,
                                                             "planted": planted})
    unaccepted["agents"].update(chains_started=85, chains_completed=0, chains_failed=85,
                                latency_ms={"p50": None, "p99": None})
    runs = [unaccepted,
            fabric_run("accepted", p99=1210.4 if student else 494.6, acceptance=accepted),
            fabric_run("healthy", p99=510.4, reference=True),
            fabric_run("replaced", p99=1266.2 if student else 542.3)]
    if student:
        runs[1]["agents"].update(chains_completed=488, chains_failed=12)
        runs[3]["agents"].update(chains_started=398, chains_completed=378, chains_failed=20)
    else:
        runs[3]["replacement"] = {
            "watched": ["n0", "n1", "n4", "n5"], "error": None,
            "events": [{"node": "n4", "nic": "n4:n4p0r0", "declared_s": 6.251,
                        "reason": "lost 45% of its probes to its leaf (at most 5%)",
                        "roles": ["retriever", "rank1"], "moved": {"retriever": "n6"},
                        "to": "n6", "replace_ms": 86.7, "action": "services moved to n6",
                        "chains_after": 420, "chains_failed_after": 0, "failed_after": []}]}
    for run in runs:
        run.pop("_spec")
    return runs


def test_lab10_acceptance_and_replacement_graded(tmp_path):
    v = grade(10, write(tmp_path / "sol", {"runs": lab10_runs(False)}))
    assert failing(v) == set()
    assert "7 exclusions of 7 made" in v["every-planted-fault-found"].reason
    assert "retriever to n6 in 87 ms; 0 of 420 chains started after it failed" in \
        v["degraded-node-replaced"].reason
    # the starter: the cabling check alone, the health loop off
    v = grade(10, write(tmp_path / "starter", {"runs": lab10_runs(True)}))
    assert failing(v) == {"every-planted-fault-found", "accepted-fabric-carries-chains",
                          "degraded-node-replaced"}
    assert ("missed degrade n4-p0l2, rate p0l1-p0s2, throttle n1p0r0 (not excluded: n1, "
            "n4, n4-p0l2, p0l1-p0s2)") in v["every-planted-fault-found"].reason
    assert "12 failed; p99 1210.4 ms against 510.4 ms on the healthy rack (2.37x, limit " \
        "1.5x)" in v["accepted-fabric-carries-chains"].reason
    assert "the health loop was off: nothing replaced n4 (20 of 398 chains failed)" in \
        v["degraded-node-replaced"].reason


def test_lab10_refuses_shortcuts(tmp_path):
    """Plants removed, a healthy link excluded, a chain failing after the declaration,
    a node declared but nothing moved: each fails, and says so."""
    runs = lab10_runs(False)
    runs[1]["acceptance"]["planted"] = runs[1]["acceptance"]["planted"][:2]
    v = grade(10, write(tmp_path / "unplanted", {"runs": runs}))
    assert failing(v) == {"every-planted-fault-found"}
    assert "keep the starter's plants" in v["every-planted-fault-found"].reason
    runs = lab10_runs(False)
    runs[1]["acceptance"]["score"]["extra"] = ["p0l0-p0s3"]
    runs[3]["replacement"]["events"][0].update(chains_failed_after=1,
                                               failed_after=["timeout"])
    v = grade(10, write(tmp_path / "sloppy", {"runs": runs}))
    assert failing(v) == {"every-planted-fault-found", "degraded-node-replaced"}
    assert "healthy but excluded: p0l0-p0s3" in v["every-planted-fault-found"].reason
    assert "1 of 420 chains started after it failed (timeout)" in \
        v["degraded-node-replaced"].reason
    runs = lab10_runs(False)
    runs[3]["replacement"]["events"][0].update(moved={}, to=None, replace_ms=None,
                                               action="declared; no spare left "
                                                      "(replacement.spares)")
    v = grade(10, write(tmp_path / "nospare", {"runs": runs}))
    assert failing(v) == {"degraded-node-replaced"}
    assert "nothing moved: declared; no spare left" in v["degraded-node-replaced"].reason


def test_lab6_secy_graded(tmp_path):
    side = {"OutPktsEncrypted": 40000, "OutPktsProtected": 0, "OutPktsUntagged": 0}
    attack = {"tampered_sent": 25, "replayed_sent": 25, "untagged_sent": 25,
              "delivered_to_tap": 0, "accounting_exact": True,
              "counters_b": {"InPktsNotValid": 25, "InPktsLate": 25, "InPktsNoTag": 25}}
    macsec = {"links": [{"sides": {"a": side, "b": side}}], "attack": attack,
              "rotations": [{"at_s": 5.0, "an": 1}],
              "throughput_mbps": {"protected": 14.0, "unprotected": 15.6}}
    runs = [{"name": n, "agents": {"chains_failed": 0}, "fidelity": {"ok": True}}
            for n in ("unprotected", "protected")]
    assert failing(grade(6, write(tmp_path / "sol", {"runs": runs, "macsec": macsec}))) == set()
    # the starter's SecY: integrity only, validate check, a huge replay window, no rotation
    bad = copy.deepcopy(macsec)
    plain = {"OutPktsEncrypted": 0, "OutPktsProtected": 40000, "OutPktsUntagged": 0}
    bad["links"][0]["sides"] = {"a": plain, "b": plain}
    bad["attack"].update(delivered_to_tap=50, counters_b={"InPktsInvalid": 25,
                                                          "InPktsNoTag": 25})
    bad["rotations"] = []
    v = grade(6, write(tmp_path / "starter", {"runs": runs, "macsec": bad}))
    assert failing(v) == {"confidential", "attack-rejected", "attack-counted", "keys-rotated"}
    assert "50 of 75 injected frames reached the host" in v["attack-rejected"].reason
    assert "InPktsLate 0/25" in v["attack-counted"].reason


def test_app_with_a_syntax_error_is_one_line(tmp_path, monkeypatch, plugins_load):
    """A student's app that does not compile is refused naming the file and line (it
    was a traceback)."""
    from controllers.__main__ import app_module

    (tmp_path / "halfdone.py").write_text("import os\nx = (\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ValueError, match=r"cannot import 'halfdone': .*halfdone.py, line 2"):
        app_module("halfdone:App")


def test_a_class_is_graded_in_one_table(tmp_path):
    """testbed check LAB DIR DIR ... --csv FILE: one line and one CSV row a student's
    folder; a folder that cannot be graded is named, the others are still graded."""
    import csv
    import subprocess
    import sys

    good = write_runs(tmp_path / "ada", lab1_runs(240.0, 20.0))
    weak = write_runs(tmp_path / "bob", lab1_runs(650.0, 14.0, rate=12))
    empty = tmp_path / "cy"
    empty.mkdir()
    table = tmp_path / "class.csv"
    done = subprocess.run([sys.executable, "-m", "testbed.core.cli", "check", "1", str(good),
                           str(weak), str(empty), "--csv", str(table)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done.stderr  # not every folder passes
    lines = done.stdout.splitlines()
    assert any(str(good) in ln and "PASS" in ln and "FAIL" not in ln for ln in lines)
    assert any(str(empty) in ln and "ERROR" in ln and "summary.json" in ln for ln in lines)
    assert "0 of 3 must rerun" in lines
    rows = list(csv.DictReader(table.open()))
    assert rows.pop()["folder"] == "0 of 3 must rerun"
    assert [r["folder"] for r in rows] == [str(good), str(weak), str(empty)]
    assert [r["verdict"] for r in rows] == ["PASS", "FAIL", "ERROR"]
    total = int(rows[0]["total"])
    assert rows[0]["passed"] == str(total) and rows[1]["paced-slower"] == "FAIL"
    assert int(rows[1]["passed"]) == total - 3 and "pace it" in rows[1]["notes"]
    assert rows[2]["passed"] == "0" and "summary.json" in rows[2]["notes"]


STARTERS = Path(__file__).resolve().parents[1] / "fixtures" / "starters"
SMALL = Path(__file__).resolve().parents[1] / "fixtures" / "results" / "small"


@pytest.mark.parametrize("lab", LABS, ids=lambda lab: lab.name)
def test_each_starter_grades_as_the_teachers_pack_says(lab):
    """The teacher's pack shows each starter's ``testbed check`` output
    (``starter/expected-check.txt``, from a real full-length run of the guide's
    ``run-starter`` commands): it names the lab's checks in order, and grading the files
    that run's checks read (kept in tests/fixtures/starters/, by
    scripts/starter_expected.py) prints exactly that today."""
    expected = (lab.folder / "starter" / "expected-check.txt").read_text()
    lines = expected.splitlines()
    assert [ln.split(" ", 1)[1].split(":", 1)[0] for ln in lines[:-1]] == \
        [grading.check_name(c) for c in lab.module().CHECKS]
    assert all(ln.split(" ", 1)[0] in ("PASS", "FAIL") for ln in lines[:-1])
    # a starter is not the answer: the student's task fails on it
    assert "FAIL" in expected
    graded = grading.assess(lab, STARTERS / lab.folder.name)
    assert grading.report(lab, graded) == expected


def test_a_class_counts_who_must_rerun(tmp_path, capsys):
    """The class's table has a verdict column; RERUN is neither PASS nor FAIL, and the
    last row says how many must rerun (exit 3 when nobody failed)."""
    import csv

    good = write_runs(tmp_path / "ada", lab1_runs(240.0, 20.0))
    runs = lab1_runs(240.0, 20.0)
    runs[2]["fidelity"] = {"ok": False, "reasons": ["idle CPU"]}
    busy = write_runs(tmp_path / "bob", runs)
    table = tmp_path / "class.csv"
    assert main(["check", "1", str(good), str(busy), "--csv", str(table)]) == 3
    assert "1 of 2 must rerun" in capsys.readouterr().out.splitlines()
    rows = list(csv.reader(table.open()))
    assert rows[0][:2] == ["folder", "verdict"]
    assert [r[1] for r in rows[1:3]] == ["PASS", "RERUN"]
    notes = rows[2][rows[0].index("notes")]
    assert notes.startswith("RERUN: the fidelity monitor flagged training-1to1 (idle")
    assert rows[-1] == ["1 of 2 must rerun"]
