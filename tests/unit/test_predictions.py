"""Predictions graded (testbed/reports/predictions.py, ``testbed check --predictions``) on
real results: the starters' recorded runs in tests/fixtures/starters/ (see its README).

Lab 5's recorded run named its variants by fault (cut, degrade, plane, crash); the
starter now names them f1-f4 so the student diagnoses each. The tests relabel the
recorded variants as the starter names them (same measurements, nothing else changed).
"""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest
import yaml

from testbed.core import digest
from testbed.core.cli import main
from testbed.reports import grading, predictions

STARTERS = Path(__file__).resolve().parents[1] / "fixtures" / "starters"
LAB5_IDS = {"degrade": "f1", "cut": "f2", "crash": "f3", "plane": "f4"}


def lab5_run(tmp_path: Path) -> Path:
    """The recorded lab 5 starter run with its variants named as the starter names them."""
    data = json.loads((STARTERS / "lab05_resilience" / "summary.json").read_text())
    for run in data["runs"]:
        run["name"] = LAB5_IDS[run["name"]]
    folder = tmp_path / "lab05-starter"
    folder.mkdir()
    (folder / "summary.json").write_text(json.dumps(data))
    digest.write(folder)  # as the run writes it, over the renamed variants
    return folder


def filled(lab: str, answers: dict, tmp_path: Path, name: str = "p.yaml") -> Path:
    """The lab's starter predictions file with ``answers`` (id -> answer) filled in."""
    folder = grading.find(lab).folder
    data = yaml.safe_load((folder / "starter" / "predictions.yaml").read_text())
    for entry in data["predictions"]:
        if entry["id"] in answers:
            entry["answer"] = answers[entry["id"]]
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data))
    return path


def graded(lab: str, folder: Path, path: Path) -> dict[str, predictions.Graded]:
    lab_ = grading.find(lab)
    return {g.id: g for g in predictions.grade_folder(lab_, folder, str(path))}


def status(result: dict[str, predictions.Graded]) -> dict[str, str]:
    return {k: g.status for k, g in result.items()}


def test_lab1_numbers_within_the_stated_tolerance(tmp_path):
    """Lab 1's recorded starter run: p99 training-1to1 / agents-only 0.98x, alone 4:1 /
    1:1 1.48x, training 4:1 / 1:1 3.73x; right within 25 %."""
    run = STARTERS / "lab01_oversubscription"
    right = filled("1", {"1a": 1, "1b": 1.5, "2": 3}, tmp_path)
    assert status(graded("1", run, right)) == {"1a": "PASS", "1b": "PASS", "2": "PASS"}
    wrong = filled("1", {"1a": 1.5, "2": 10}, tmp_path)
    got = graded("1", run, wrong)
    assert status(got) == {"1a": "FAIL", "1b": "UNANSWERED", "2": "FAIL"}
    assert "predicted 10 x, the run measured 3.73 x (right within 25%)" in got["2"].reason


def test_lab3_and_lab4_graded_on_their_runs(tmp_path):
    # lab 3: ECMP 93.9 Mb/s against the reference's 207.4 (0.45x)
    assert status(graded("3", STARTERS / "lab03_hashing",
                         filled("3", {"1": 0.5}, tmp_path))) == {"1": "PASS"}
    assert status(graded("3", STARTERS / "lab03_hashing",
                         filled("3", {"1": 0.8}, tmp_path))) == {"1": "FAIL"}
    # lab 4: chain p99 569 against 595 ms (-4 %), goodput 12.9 against 12.4 (+4 %)
    run = STARTERS / "lab04_ecn"
    got = graded("4", run, filled("4", {"1a": "down", "1b": "stays"}, tmp_path))
    assert status(got) == {"1a": "FAIL", "1b": "PASS"}
    assert got["1a"].reason == "predicted down, the run shows stays"


@pytest.mark.parametrize("lab, right, wrong", [
    # lab 6: bulk 13.2 against 15.3 Mb/s (0.86x); 75 of 75 injected frames delivered
    ("6", {"1": 0.9, "3": 75}, {"1": 0.98, "3": 0}),
    # lab 7: cut_link 14 ms, fail_pop 789 ms, cut_risk_group never routed around
    ("7", {"1": "cut_risk_group"}, {"1": "fail_pop"}),
    # lab 8: B's chain p99 652 ms in one FIFO against 223 ms alone (2.92x)
    ("8", {"1": 3}, {"1": 1.2}),
    # lab 9: a hit 49.9x faster than a store read (p50); 4 readers 0.90x of 1's
    ("9", {"2": 50, "3": 1}, {"2": 8, "3": 4}),
    # lab 10: 0 of 80 chains completed on the unaccepted rack
    ("10", {"3": 3}, {"3": 40}),
])
def test_labs_6_to_10_graded_on_their_runs(tmp_path, lab, right, wrong):
    run = STARTERS / grading.find(lab).folder.name
    assert set(status(graded(lab, run, filled(lab, right, tmp_path))).values()) == {"PASS"}
    assert set(status(graded(lab, run, filled(lab, wrong, tmp_path))).values()) == {"FAIL"}


def test_lab5_diagnosis_graded_on_the_starter_run(tmp_path):
    run = lab5_run(tmp_path)
    solution = grading.find("5").folder / "solution" / "predictions.yaml"
    got = graded("5", run, solution)
    assert set(status(got).values()) == {"PASS"}, got
    assert "unrepaired_streams = 2" in got["d2"].reason
    # the wrong layer, a figure that does not match the run, a figure that tells
    # nothing, an uncited figure
    wrong = filled("5", {
        "1": 8,
        "d1": {"layer": "controller", "field": "detected_by", "value": "none"},
        "d2": {"layer": "switch", "field": "unrepaired_streams", "value": 5},
        "d3": {"layer": "none", "field": "streams", "value": 8},
        "d4": {"layer": "host"},
    }, tmp_path)
    got = graded("5", run, wrong)
    assert status(got) == {"1": "FAIL", "4": "UNANSWERED", "d1": "FAIL", "d2": "FAIL",
                           "d3": "FAIL", "d4": "FAIL"}
    assert "layer controller does not repair this fault" in got["d1"].reason
    assert "unrepaired_streams cited as 5, the run measured 2" in got["d2"].reason
    assert "streams does not tell this fault apart" in got["d3"].reason
    assert "no measured figure cited" in got["d4"].reason


def test_check_prints_predictions_beside_the_checks(tmp_path, capsys):
    run = lab5_run(tmp_path)
    empty = grading.find("5").folder / "starter" / "predictions.yaml"
    assert main(["check", "5", str(run), "--predictions", str(empty)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[4] == "Lab 5: Layered resilience: 1/4 checks passed"
    assert out[5] == "UNANSWERED predict-1: no answer given"
    assert out[-1] == "Predictions: 0/6 right, 6 unanswered"
    # found in the results folder without --predictions
    shutil.copy(grading.find("5").folder / "solution" / "predictions.yaml",
                run / predictions.FILENAME)
    assert main(["check", "5", str(run)]) == 1  # the task's checks still fail
    assert capsys.readouterr().out.splitlines()[-1] == "Predictions: 6/6 right, 0 unanswered"


@pytest.mark.parametrize("text, line", [
    ("lab: 5\npredictions: {}\n", "p.yaml: predictions: must be a list of questions"),
    ("lab: 1\npredictions: []\n", "p.yaml: lab: this file is for lab 1, graded against lab 5"),
    ("predictions:\n  - {id: '9', answer: 3}\n",
     "p.yaml: predictions[0].id: no question '9' in lab 5 (known: 1, 4, d1, d2, d3, d4)"),
    ("predictions:\n  - {id: '4', answer: many}\n",
     "p.yaml: predictions[0].answer: must be a number (probes) or left empty, got 'many'"),
    ("predictions:\n  - {id: d1, answer: {layer: dpu}}\n",
     "p.yaml: predictions[0].answer.layer: must be one of switch, controller, probes, host, "
     "none, got 'dpu'"),
    ("predictions:\n  - {id: '4', answer: 1}\n  - {id: '4', answer: 2}\n",
     "p.yaml: predictions[1].id: question 4 answered twice"),
    ("predictions: [\n", "p.yaml:2: YAML syntax"),
])
def test_a_bad_predictions_file_is_one_line_exit_2(tmp_path, capsys, text, line):
    run = lab5_run(tmp_path)
    (tmp_path / "p.yaml").write_text(text)
    assert main(["check", "5", str(run), "--predictions", str(tmp_path / "p.yaml")]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert err.count("\n") == 0 and line in err, err
    assert captured.out == ""  # nothing graded, nothing half-printed


def test_a_class_table_has_a_column_a_prediction(tmp_path, capsys):
    ada, bob = tmp_path / "ada", tmp_path / "bob"
    for who in (ada, bob):
        who.mkdir()
        shutil.copy(lab5_run(who) / "summary.json", who / "summary.json")
        digest.write(who)
    shutil.copy(grading.find("5").folder / "solution" / "predictions.yaml",
                ada / predictions.FILENAME)
    filled("5", {"4": 100}, bob, predictions.FILENAME)
    table = tmp_path / "class.csv"
    assert main(["check", "5", str(ada), str(bob), "--csv", str(table)]) == 1
    rows = list(csv.DictReader(table.open()))
    assert rows.pop()["folder"] == "0 of 2 must rerun"
    assert [r["predict-d2"] for r in rows] == ["PASS", "UNANSWERED"]
    assert [r["predict-4"] for r in rows] == ["PASS", "FAIL"]
    assert [r["predictions_right"] for r in rows] == ["6", "0"]
    assert "predict-4: predicted 100 probes" in rows[1]["notes"]
    assert main(["check", "5", str(ada), str(bob), "--predictions", "x.yaml"]) == 2
    assert "--predictions: grades one results folder" in capsys.readouterr().err


@pytest.mark.parametrize("lab", ["1", "3", "4", "5", "6", "7", "8", "9", "10"])
def test_each_starter_file_matches_its_lab_and_is_unanswered(lab, tmp_path):
    """Every question of the lab's PREDICTIONS is in its starter file, in order, empty,
    and the guide numbers each graded question and states its tolerance."""
    lab_ = grading.find(lab)
    path = lab_.folder / "starter" / predictions.FILENAME
    answers = predictions.read(lab_, path)
    assert list(answers) == [q.id for q in predictions.questions(lab_)]
    assert all(a is None or set(a.values()) == {None} for a in answers.values())
    guide = (lab_.folder / "README.md").read_text()
    assert "predictions.yaml" in guide and "--predictions" in guide
    for q in predictions.questions(lab_):
        label = "`d1` to `d4`" if q.kind == "diagnosis" else f"(**{q.id}**)"
        assert label in guide, (lab, q.id)
    flat = " ".join(guide.split())
    assert "within **" in flat or "**the right choice**" in flat  # the tolerance, stated
