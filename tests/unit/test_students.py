"""Per-student variants of the labs (testbed/reports/students.py): ``testbed start LAB
--student ID`` writes the id's values into a copy of the starter, ``testbed check ...
--student ID`` / ``--students ROSTER`` grades against them, without root."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest
import yaml

from testbed.core import digest, scenario
from testbed.core.cli import main
from testbed.experiments.storage.schema import validate as validate_storage
from testbed.reports import grading, students
from topologies.calculator import calculate

LAB2, LAB9, LAB10 = grading.find("2"), grading.find("9"), grading.find("10")
CLASS = [f"s{n:03d}" for n in range(60)]


@pytest.fixture(autouse=True)
def no_course_secret(monkeypatch):
    monkeypatch.delenv(students.SECRET_ENV, raising=False)


def derive(lab, sid, secret=b""):
    return students.derive(lab, sid, secret)


# the values ---------------------------------------------------------------------------
def test_one_id_always_the_same_values_two_ids_different():
    # pinned: copies handed out must keep grading after an upgrade of the testbed
    assert derive(LAB2, "ada").params == {
        "part_a": {"switch_tbps": 51.2, "gpu_gbps": 1600, "planes": 8},
        "part_b": {"switch_tbps": 51.2, "gpu_gbps": 800, "target_gpus": 5300}}
    assert derive(LAB9, "ada").params == {"seed": 14382, "keys": 100, "zipf": 1.1,
                                          "sizes_kb": [16, 64, 64, 256]}
    assert derive(LAB10, "ada").params == {
        "seed": 4368, "planted": ["p0l0-p0s2", "p0l2-p0s1", "n5p0r0", "n0p0r0"]}
    for lab in grading.all_labs():
        ada, again, bob = derive(lab, "ada"), derive(lab, "ada"), derive(lab, "bob")
        assert ada == again and ada.params != bob.params, lab.name
        assert derive(lab, "ada", b"course").params != ada.params, lab.name
        # every lab with a scenario gets a seed; lab 2 (arithmetic) has none
        assert ("seed" in ada.params) == (lab.number != 2), lab.name
    # a class of 60: no two share a seed; lab 2's designs (17 x 15 answer sets, and
    # the targets) differ but for a pair or so
    for lab in (LAB9, LAB10, grading.find("1")):
        assert len({derive(lab, s).params["seed"] for s in CLASS}) == 60, lab.name
    assert len({json.dumps(derive(LAB2, s).params) for s in CLASS}) >= 58
    assert len({json.dumps(derive(LAB9, s).params) for s in CLASS}) == 60
    assert derive(grading.find("4"), "ada").params["seeds"] == \
        [derive(grading.find("4"), "ada").params["seed"] + i for i in (0, 1)]


def test_every_variant_keeps_the_lesson():
    """Lab 2: designs the calculator accepts where planes and a third tier do not tie,
    never the starter's or the guide's; lab 9: the smallest cache 3 or 4 MB (the
    solution's 3), within the 6 MB budget, the starter's 1 MB too small; lab 10: the
    plants touch at most three nodes (as on the measured seeds 1-3)."""
    check2, check9, check10 = (students._module(lab) for lab in (LAB2, LAB9, LAB10))
    for sid in CLASS:
        a = derive(LAB2, sid).params["part_a"]
        c = calculate(**a)
        assert c["multi_plane_vs_three_tier"] != 1 and c["single_plane"]["radix"] >= 16
        assert (a["switch_tbps"], a["gpu_gbps"], a["planes"]) not in \
            ((51.2, 800, 4), (102.4, 1600, 8))
        b = derive(LAB2, sid).params["part_b"]
        splits = [p for p in (1, 2, 4, 8) if b["gpu_gbps"] / p >= 200]
        reach = {p: calculate(planes=p, **{k: b[k] for k in ("switch_tbps", "gpu_gbps")}
                              )["max_gpus"] for p in splits}
        fewest = min(p for p in reach if reach[p] >= b["target_gpus"])
        assert fewest > 1 and b["target_gpus"] % 100 == 0
        p9 = derive(LAB9, sid).params
        objects = validate_storage({"objects": {
            k: p9[k] for k in ("keys", "zipf", "sizes_kb")}}).objects
        assert check9.smallest_cache_mb(objects, 0.75) in (3, 4), p9
        assert check9.fits(objects, 1024) < check9.fewest_keys(objects, 0.75)
        p10 = derive(LAB10, sid).params
        assert len(check10._place(p10["seed"])[1]) <= 3
        assert p10["planted"] == check10.planted(p10["seed"])
    assert check2.PART_A and check10.planted(1) == ["p0l1-p0s2", "n4-p0l2", "n0p0r0",
                                                    "n1p0r0"]


# testbed start ------------------------------------------------------------------------
def test_start_writes_the_values_into_the_copy(tmp_path, capsys):
    out = tmp_path / "my-labs"
    assert main(["start", "2", "--student", "ada", "--out", str(out)]) == 0
    copy = out / "lab02-ada"
    assert sorted(p.name for p in copy.iterdir()) == ["answers.yaml", "student.json"]
    answers = yaml.safe_load((copy / "answers.yaml").read_text())
    params = derive(LAB2, "ada").params
    for part in ("part_a", "part_b"):
        assert {k: answers[part][k] for k in params[part]} == params[part]
    assert answers["part_a"]["single_plane_radix"] == "TODO"
    text = (copy / "answers.yaml").read_text()
    assert "# Part A: a 51.2 Tb/s switch, 1,600 Gb/s per GPU, split over 8 planes." in text
    assert "(256 lanes of 200 Gb/s), 800 Gb/s per GPU." in text
    assert "so a GPU's 800 Gb/s splits over 1, 2 or 4" in text
    assert "reaches 5,300 GPUs:" in text
    record = json.loads((copy / "student.json").read_text())
    assert record == {"lab": 2, "student": "ada", "params": params, "course_secret": False,
                      "check": "testbed check 2 RESULTS --student ada"}
    assert "my-labs/lab02-ada: Lab 2: Multi-plane scaling, student ada" in \
        capsys.readouterr().out

    assert main(["start", "9", "--student", "ada", "--out", str(out)]) == 0
    copy9 = out / "lab09-ada" / "scenario.yaml"
    source = yaml.safe_load(copy9.read_text())
    p9 = derive(LAB9, "ada").params
    assert source["seed"] == p9["seed"]
    assert source["storage"]["objects"] == {k: p9[k] for k in ("keys", "sizes_kb", "zipf")}
    assert source["storage"]["cache_mb"] == 1  # the student's task stays theirs
    scenario.validate(copy9)
    # the rest of the starter is as it was: only the values' lines (and their comments)
    starter = (LAB9.folder / "starter" / "scenario.yaml").read_text().splitlines()
    changed = [a for a, b in zip(starter, copy9.read_text().splitlines(), strict=True)
               if a != b]
    assert {ln.split(":")[0].split(" (")[0] for ln in changed} == {
        "# which together draw at least 75 % of the reads", "# draw H_k / H_n of them, H_k = "
        "1 + 1/2 + ... + 1/k), within the node's budget", "seed", "  objects", "    zipf"}

    # lab 4: seed and both seeds; lab 10: the seed that plants where params say
    assert main(["start", "4", "--student", "ada", "--out", str(out)]) == 0
    src4 = yaml.safe_load((out / "lab04-ada" / "scenario.yaml").read_text())
    p4 = derive(grading.find("4"), "ada").params
    assert (src4["seed"], src4["seeds"]) == (p4["seed"], p4["seeds"])
    assert main(["start", "10", "--student", "ada", "--out", str(out)]) == 0
    src10 = yaml.safe_load((out / "lab10-ada" / "scenario.yaml").read_text())
    assert src10["seed"] == derive(LAB10, "ada").params["seed"]
    assert not (out / "lab10-ada" / "expected-check.txt").exists()

    # made once: a second start refuses, one line, and leaves the copy as it was
    before = (copy / "answers.yaml").read_text()
    assert main(["start", "2", "--student", "ada", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "lab02-ada exists and is not empty" in err[0]
    assert (copy / "answers.yaml").read_text() == before
    assert not [p for p in out.iterdir() if p.name.startswith(".")]  # nothing half made


def test_a_teacher_makes_the_class_s_copies_with_the_course_secret(tmp_path, monkeypatch,
                                                                    capsys):
    roster = tmp_path / "roster.csv"
    roster.write_text("student,name\nada,Ada L.\nbob,Bob M.\n")
    monkeypatch.setenv(students.SECRET_ENV, "s3cret")
    assert main(["start", "9", "--students", str(roster), "--out", str(tmp_path / "h")]) == 0
    made = {p.name for p in (tmp_path / "h").iterdir()}
    assert made == {"lab09-ada", "lab09-bob"}
    record = json.loads((tmp_path / "h" / "lab09-ada" / "student.json").read_text())
    assert record["course_secret"] is True
    assert record["params"] == derive(LAB9, "ada", b"s3cret").params != \
        derive(LAB9, "ada").params


BAD_IDS = ["", "a/b", "../x", "-x", ".hidden", "a" * 41, "a b", "é", "a\nb", "a;rm"]


@pytest.mark.parametrize("bad", BAD_IDS, ids=range(len(BAD_IDS)))
def test_ids_are_validated(bad, tmp_path, capsys):
    out = tmp_path / "my-labs"
    assert main(["start", "2", f"--student={bad}", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("testbed: error: --student: ")
    assert "1 to 40 letters, digits" in err
    assert not out.exists()
    folder = tmp_path / "answers"
    folder.mkdir()
    (folder / "answers.yaml").write_text("part_a: {}\n")
    assert main(["check", "2", str(folder), f"--student={bad}"]) == 2
    assert capsys.readouterr().err.strip().startswith("testbed: error: --student: ")
    roster = tmp_path / "roster.csv"
    roster.write_text(f"student,folder\nada,{folder}\n\"{bad}\",{folder}-{len(bad)}\n")
    assert main(["check", "2", str(folder), "--students", str(roster)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and f"{roster}: line 3: student" in err


def test_start_refuses_bad_requests_with_one_line(tmp_path, capsys):
    for argv, said in ((["start", "2"], "--student: give the student's id"),
                       (["start", "12", "--student", "ada"], "LAB: no lab '12'"),
                       (["start", "2", "--student", "ada", "--students", "r.csv"],
                        "not both"),
                       (["start", "2", "--students", str(tmp_path / "none.csv")],
                        "none.csv: No such file")):
        assert main([*argv, "--out", str(tmp_path / "o")]) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and said in err, err
    roster = tmp_path / "r.csv"
    roster.write_text("id,folder\nada,x\n")
    assert main(["start", "2", "--students", str(roster), "--out", str(tmp_path / "o")]) == 2
    assert "columns student (missing: student)" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


# lab 2 graded for two students ---------------------------------------------------------
def solve(copy: Path) -> Path:
    """Fill a lab 2 copy's answers with the calculator's, for the inputs it states."""
    path = copy / "answers.yaml"
    data = yaml.safe_load(path.read_text())
    a, b = data["part_a"], data["part_b"]
    c = calculate(switch_tbps=a["switch_tbps"], gpu_gbps=a["gpu_gbps"], planes=a["planes"])
    t = c["single_plane_three_tier"]
    a.update(single_plane_radix=c["single_plane"]["radix"],
             multi_plane_radix=c["multi_plane"]["radix"],
             single_plane_max_gpus=c["single_plane_max_gpus"],
             multi_plane_max_gpus=c["max_gpus"], reach_ratio=c["reach_ratio"],
             three_tier_max_gpus=t["max_gpus"], three_tier_switches=t["switches"],
             three_tier_switch_hops=t["switch_hops"],
             more_gpus="planes" if c["multi_plane_vs_three_tier"] > 1 else "third-tier")
    for planes in [p for p in (1, 2, 4, 8) if b["gpu_gbps"] / p >= 200]:
        d = calculate(switch_tbps=b["switch_tbps"], gpu_gbps=b["gpu_gbps"], planes=planes)
        if d["max_gpus"] >= b["target_gpus"]:
            b.update(planes=planes, max_gpus=d["max_gpus"],
                     switches=d["multi_plane"]["switches"],
                     leaves_needed=planes * math.ceil(
                         b["target_gpus"] / (d["multi_plane"]["radix"] // 2)))
            break
    path.write_text(yaml.safe_dump(data))
    return copy


def verdicts(argv: list[str], capsys) -> tuple[int, dict[str, str]]:
    status = main(argv)
    lines = capsys.readouterr().out.splitlines()
    return status, {ln.split(" ", 2)[1].rstrip(":"): ln.split(" ", 1)[0]
                    for ln in lines if ln.startswith(("PASS ", "FAIL "))}


def test_lab2_each_student_passes_with_their_own_answers_only(tmp_path, capsys):
    out = tmp_path / "my-labs"
    for sid in ("ada", "bob"):
        assert main(["start", "2", "--student", sid, "--out", str(out)]) == 0
    capsys.readouterr()
    ada, bob = solve(out / "lab02-ada"), solve(out / "lab02-bob")
    status, v = verdicts(["check", "2", str(ada), "--student", "ada"], capsys)
    assert status == 0 and set(v.values()) == {"PASS"} and "student-variant" in v
    status, v = verdicts(["check", "2", str(bob), "--student", "bob"], capsys)
    assert status == 0 and set(v.values()) == {"PASS"}
    # ada's folder handed in as bob's: refused, and its answers are not bob's
    status = main(["check", "2", str(ada), "--student", "bob"])
    text = capsys.readouterr().out
    assert status == 1
    assert "FAIL student-variant: not student bob's values: the folder has part_a " \
           "{switch_tbps 51.2, gpu_gbps 1600, planes 8}" in text
    assert "(its student.json is ada's)" in text
    # bob copies ada's answers file into his own folder: graded on bob's inputs, it fails
    (bob / "answers.yaml").write_text((ada / "answers.yaml").read_text())
    status, v = verdicts(["check", "2", str(bob), "--student", "bob"], capsys)
    assert status == 1 and v["student-variant"] == "FAIL"
    assert v["two-tier-radix-and-reach"] == "FAIL"
    # the checks compute with the id's inputs, not the file's: ada edits her inputs to
    # an easier design and answers for it: every answer is graded against her design
    data = yaml.safe_load((ada / "answers.yaml").read_text())
    data["part_a"].update(switch_tbps=51.2, gpu_gbps=800, planes=4)
    (ada / "answers.yaml").write_text(yaml.safe_dump(data))
    solve(ada)
    status, v = verdicts(["check", "2", str(ada), "--student", "ada"], capsys)
    assert status == 1 and v["student-variant"] == "FAIL"
    assert v["two-tier-radix-and-reach"] == v["third-tier"] == "FAIL"
    # without an id, the lab grades as before (the inputs the file states)
    status, v = verdicts(["check", "2", str(ada)], capsys)
    assert status == 0 and "student-variant" not in v


def test_a_class_is_graded_each_against_its_own_id(tmp_path, capsys):
    out = tmp_path / "class"
    for sid in ("ada", "bob", "cy"):
        assert main(["start", "2", "--student", sid, "--out", str(out)]) == 0
    folders = [solve(out / f"lab02-{sid}") for sid in ("ada", "bob", "cy")]
    stray = tmp_path / "stray"
    stray.mkdir()
    (stray / "answers.yaml").write_text((folders[0] / "answers.yaml").read_text())
    roster = tmp_path / "roster.csv"
    # cy handed in ada's folder (the teacher's roster says whose folder is whose)
    roster.write_text("student,folder\n" + "".join(
        f"{sid},{out / f'lab02-{f}'}\n" for sid, f in (("ada", "ada"), ("bob", "bob"))) +
        f"cy,{folders[0]}-copy\n")
    copy = Path(f"{folders[0]}-copy")
    copy.mkdir()
    (copy / "answers.yaml").write_text((folders[0] / "answers.yaml").read_text())
    capsys.readouterr()
    table = tmp_path / "lab02.csv"
    status = main(["check", "2", *map(str, folders[:2]), str(copy), str(stray),
                   "--students", str(roster), "--csv", str(table)])
    assert status == 1
    rows = {r["folder"]: r for r in csv.DictReader(table.open())}
    assert rows[str(folders[0])]["verdict"] == rows[str(folders[1])]["verdict"] == "PASS"
    assert rows[str(folders[0])]["student-variant"] == "PASS"
    assert rows[str(copy)]["verdict"] == "FAIL"
    assert rows[str(copy)]["student-variant"] == "FAIL"
    assert "not student cy's values" in rows[str(copy)]["notes"]
    assert rows[str(stray)]["verdict"] == "ERROR"
    assert "is not in the roster" in rows[str(stray)]["notes"]
    # one student and several folders, or both options: one line, exit 2
    assert main(["check", "2", *map(str, folders[:2]), "--student", "ada"]) == 2
    assert main(["check", "2", str(folders[0]), "--student", "ada",
                 "--students", str(roster)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(e.startswith("testbed: error: --student: ") for e in err)


# runs: labs 9 and 10 -------------------------------------------------------------------
def run_folder(folder: Path, source: dict, runs: list[dict], fidelity_ok: bool = True
               ) -> Path:
    """A results folder as the runner writes it: summary.json (seed, seeds, runs),
    manifest.json (the scenario it ran), then the digest."""
    folder.mkdir(parents=True)
    seeds = source.get("seeds") or [source.get("seed", 1)]
    top = {"scenario": source["name"], "seed": source.get("seed", 1), "seeds": seeds}
    (folder / "manifest.json").write_text(json.dumps({**top, "scenario_source": source}))
    for run in runs:
        run.setdefault("dir", f"variants/{run['name']}")
        run.setdefault("fidelity", {"ok": fidelity_ok, "reasons": [] if fidelity_ok
                                    else ["ovs-vswitchd busy"]})
    (folder / "summary.json").write_text(json.dumps({**top, "runs": runs}))
    digest.write(folder)
    return folder


def lab9_runs(cached_p99: float = 230.0) -> list[dict]:
    chains = {"chains_started": 500, "chains_completed": 500, "chains_failed": 0}
    return [{"name": "uncached", "agents": {**chains, "latency_ms": {"p99": 416.0}},
             "reads": {"read_ms": {"p50": 34.2}},
             "throughput": [{"readers": n, "mbps": m} for n, m in ((1, 18.6), (4, 19.2))]},
            {"name": "cached", "agents": {**chains, "latency_ms": {"p99": cached_p99}},
             "reads": {"hit_ms": {"p50": 0.68}},
             "throughput": [{"readers": n, "mbps": m} for n, m in ((1, 606.0), (4, 35.6))]}]


def answer_lab9(copy: Path) -> dict:
    """The student's scenario with the cache sized right for their objects."""
    source = yaml.safe_load((copy / "scenario.yaml").read_text())
    objects = validate_storage(source["storage"]).objects
    source["storage"]["cache_mb"] = students._module(LAB9).smallest_cache_mb(objects, 0.75)
    return source


def test_lab9_run_graded_against_the_id_s_objects(tmp_path, capsys):
    out = tmp_path / "my-labs"
    for sid in ("ada", "bob"):
        assert main(["start", "9", "--student", sid, "--out", str(out)]) == 0
    ada = run_folder(tmp_path / "r-ada", answer_lab9(out / "lab09-ada"), lab9_runs())
    capsys.readouterr()
    status, v = verdicts(["check", "9", str(ada), "--student", "ada"], capsys)
    assert status == 0 and set(v.values()) == {"PASS"}
    # ada's run handed in for bob: other seed, other objects
    status = main(["check", "9", str(ada), "--student", "bob"])
    text = capsys.readouterr().out
    assert status == 1 and "FAIL student-variant: not student bob's values" in text
    p = derive(LAB9, "ada").params
    assert f"the folder has seed {p['seed']}" in text
    # the shared starter run (seed 1, zipf 1.0), its cache sized right for its objects
    starter = yaml.safe_load((LAB9.folder / "solution" / "scenario.yaml").read_text())
    shared = run_folder(tmp_path / "r-shared", starter, lab9_runs())
    status, v = verdicts(["check", "9", str(shared), "--student", "ada"], capsys)
    assert status == 1 and v["student-variant"] == "FAIL"
    assert v["cache-sized-from-popularity"] == "PASS"  # right for what it ran, not ada's
    # a run made with another seed on the command line (testbed run --seeds) is not ada's
    source = answer_lab9(out / "lab09-ada")
    source["seeds"] = [7]
    other = run_folder(tmp_path / "r-seeds", source, lab9_runs())
    status, v = verdicts(["check", "9", str(other), "--student", "ada"], capsys)
    assert status == 1 and v["student-variant"] == "FAIL"


def test_a_flagged_run_with_another_id_s_values_fails_not_rerun(tmp_path, capsys):
    out = tmp_path / "my-labs"
    assert main(["start", "9", "--student", "ada", "--out", str(out)]) == 0
    source = answer_lab9(out / "lab09-ada")
    flagged = run_folder(tmp_path / "flagged", source, lab9_runs(), fidelity_ok=False)
    assert main(["check", "9", str(flagged), "--student", "ada"]) == 3  # her own: RERUN
    assert main(["check", "9", str(flagged), "--student", "bob"]) == 1  # not bob's: FAIL
    text = capsys.readouterr().out
    assert "RERUN: the fidelity monitor flagged" in text
    assert text.rstrip().endswith("checks passed")  # the second grade: no RERUN


def lab10_runs(planted: list[str]) -> list[dict]:
    kinds = ("rate", "degrade", "swap_rails", "throttle")
    record = {"enabled": True, "seconds": 30.0,
              "planted": [{"at_s": 0, "action": k, "target": t}
                          for k, t in zip(kinds, planted, strict=True)],
              "score": {"found": ["x"], "missed": [], "extra": []}}
    chains = {"chains_started": 400, "chains_completed": 400, "chains_failed": 0,
              "latency_ms": {"p50": 100.0, "p99": 500.0}}
    return [{"name": "unaccepted", "agents": {**chains, "chains_completed": 0,
                                              "chains_failed": 85}},
            {"name": "accepted", "agents": chains, "acceptance": record},
            {"name": "healthy", "agents": chains},
            {"name": "replaced", "agents": chains, "replacement": {"events": [{
                "node": "n4", "declared_s": 6.2, "reason": "lost 40 %",
                "moved": {"retriever": "n6"}, "replace_ms": 66.0, "chains_after": 400,
                "chains_failed_after": 0}]}}]


def test_lab10_run_must_plant_where_the_id_s_seed_puts_the_faults(tmp_path, capsys):
    out = tmp_path / "my-labs"
    assert main(["start", "10", "--student", "ada", "--out", str(out)]) == 0
    source = yaml.safe_load((out / "lab10-ada" / "scenario.yaml").read_text())
    p = derive(LAB10, "ada").params
    mine = run_folder(tmp_path / "mine", source, lab10_runs(p["planted"]))
    capsys.readouterr()
    status, v = verdicts(["check", "10", str(mine), "--student", "ada"], capsys)
    assert status == 0 and set(v.values()) == {"PASS"}
    # seed 1's run (the guide's), or ada's seed written in with seed 1's plants: refused
    seed1 = yaml.safe_load((LAB10.folder / "starter" / "scenario.yaml").read_text())
    shared = run_folder(tmp_path / "shared", seed1, lab10_runs(
        students._module(LAB10).planted(1)))
    status = main(["check", "10", str(shared), "--student", "ada"])
    text = capsys.readouterr().out
    assert status == 1 and "the folder has seed 1, planted [p0l1-p0s2, n4-p0l2" in text
    forged = run_folder(tmp_path / "forged", source, lab10_runs(
        students._module(LAB10).planted(1)))
    status, v = verdicts(["check", "10", str(forged), "--student", "ada"], capsys)
    assert status == 1 and v["student-variant"] == "FAIL"


def test_a_copy_made_with_the_course_secret_needs_it_to_grade(tmp_path, monkeypatch,
                                                              capsys):
    monkeypatch.setenv(students.SECRET_ENV, "s3cret")
    assert main(["start", "2", "--student", "ada", "--out", str(tmp_path)]) == 0
    ada = solve(tmp_path / "lab02-ada")
    assert main(["check", "2", str(ada), "--student", "ada"]) == 0
    monkeypatch.delenv(students.SECRET_ENV)
    capsys.readouterr()
    assert main(["check", "2", str(ada), "--student", "ada"]) == 1
    assert "made with the course secret: set TESTBED_COURSE_SECRET" in \
        capsys.readouterr().out


def test_draws_spread_over_the_options():
    """Each option of a choice is drawn for about its share of a class (no option
    starved by the hash): lab 9's zipf over 400 ids."""
    lab9 = students._module(LAB9)
    counts = {z: 0 for z in lab9.ZIPF}
    for n in range(400):
        counts[derive(LAB9, f"id{n}").params["zipf"]] += 1
    assert all(math.isclose(c, 100, abs_tol=35) for c in counts.values()), counts


ROSTERS = {
    "no folder column": ("student\nada\n", "columns student, folder (missing: folder)"),
    "no row": ("student,folder\n", "no student in it"),
    "empty folder": ("student,folder\nada,\n", "line 2: folder: empty"),
    "one folder, two ids": ("student,folder\nada,x\nbob,x\n", "x is given for ada and bob"),
    "not UTF-8": (b"student,folder\n\xff\xfe,x\n", "not UTF-8 text"),
    "too large": ("student,folder\n" + "ada,x\n" * 200_000, "over 1 MB"),
    "an unclosed quote": ('student,folder\n"ada,x\n', "line 2: student"),
}


@pytest.mark.parametrize("case", ROSTERS)
def test_a_bad_roster_is_one_line_and_exit_2(case, tmp_path, capsys):
    text, said = ROSTERS[case]
    roster = tmp_path / "roster.csv"
    (roster.write_bytes if isinstance(text, bytes) else roster.write_text)(text)
    folder = tmp_path / "x"
    folder.mkdir()
    (folder / "answers.yaml").write_text("part_a: {}\n")
    assert main(["check", "2", str(folder), "--students", str(roster)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and said in err, err


def test_start_into_a_file_is_one_line(tmp_path, capsys):
    (tmp_path / "f").write_text("")
    assert main(["start", "2", "--student", "ada", "--out", str(tmp_path / "f")]) == 2
    assert "--out: " in capsys.readouterr().err and (tmp_path / "f").read_text() == ""


def test_the_teachers_page_counts_lab_2_s_answer_sets():
    """docs/teaching/variants.md: part A's 17 designs give 10 answer sets; with part B's
    (its target's leaves), the 60 ids of a class get 60 different ones."""
    m = students._module(LAB2)

    def part_a(t, g, p):
        c = calculate(switch_tbps=t, gpu_gbps=g, planes=p)
        three = c["single_plane_three_tier"]
        return (c["single_plane"]["radix"], c["multi_plane"]["radix"], c["max_gpus"],
                c["reach_ratio"], three["max_gpus"], three["switches"],
                c["multi_plane_vs_three_tier"] > 1)

    def part_b(t, g, target):
        planes = min(p for p in (1, 2, 4, 8) if g / p >= 200 and calculate(
            switch_tbps=t, gpu_gbps=g, planes=p)["max_gpus"] >= target)
        c = calculate(switch_tbps=t, gpu_gbps=g, planes=planes)
        leaves = planes * math.ceil(target / (c["multi_plane"]["radix"] // 2))
        return planes, c["max_gpus"], c["multi_plane"]["switches"], leaves

    assert (len(m.PART_A), len({part_a(*d) for d in m.PART_A})) == (17, 10)
    designs_b = {(p, calculate(switch_tbps=t, gpu_gbps=g, planes=p)["max_gpus"],
                  calculate(switch_tbps=t, gpu_gbps=g, planes=p)["multi_plane"]["switches"])
                 for t, g, p in m.PART_B}
    assert (len(m.PART_B), len(designs_b)) == (13, 10)  # without the target's leaves
    sets, parts_b = set(), set()
    for sid in CLASS:
        a, b = derive(LAB2, sid).params["part_a"], derive(LAB2, sid).params["part_b"]
        sets.add((part_a(*a.values()), part_b(*b.values())))
        parts_b.add(part_b(*b.values()))
    assert (len(sets), len(parts_b)) == (60, 57)
    page = " ".join((grading.REPO / "docs" / "teaching" / "variants.md").read_text().split())
    assert "its 17 designs give 10 different sets of answers" in page
    assert "all 60 answer sets came out different (57 different part B answers)" in page
    assert "part B: 13 designs" in page


@pytest.mark.parametrize("lab", [lab for lab in grading.all_labs() if lab.number != 2],
                         ids=lambda lab: lab.name)
def test_every_lab_s_copy_is_a_valid_scenario_with_the_id_s_seed(lab, tmp_path):
    copy = students.start(lab, derive(lab, "ada"), tmp_path)
    seed = derive(lab, "ada").params["seed"]
    files = [p for p in copy.glob("*.yaml") if p.name != "predictions.yaml"]
    assert files
    for path in files:
        scenario.validate(path)
        assert yaml.safe_load(path.read_text())["seed"] == seed
    starter = {p.name for p in (lab.folder / "starter").iterdir()} - {"expected-check.txt"}
    assert {p.name for p in copy.iterdir()} - {"student.json"} == starter - {"__pycache__"}
