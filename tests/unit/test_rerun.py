"""``testbed check LAB --rerun``: a submission is checked before anything runs (a plug-in
the lab does not ship, another lab's scenario, a command workload: one line, exit 2,
nothing run), the run gets the grader's seed and the student's plug-in copy, and the
class's queue resumes (what was done is read back, what was interrupted runs again).
The runs here are a stand-in that copies a real trimmed run of lab 1
(tests/fixtures/starters/lab01_oversubscription, graded 4/7); the real re-run is
tests/integration/test_rerun.py."""

from __future__ import annotations

import csv
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from testbed.core.cli import build_parser, main
from testbed.errors import ConfigError, Interrupted
from testbed.reports import grading, rerun

REPO = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
STARTER1 = FIXTURES / "starters" / "lab01_oversubscription"
LAB1 = REPO / "labs" / "lab01_oversubscription"
LAB3 = REPO / "labs" / "lab03_hashing"
FOREIGN = "examples.apps.pin_flow:PinFlow"


class FakeRun:
    """Stands in for ``testbed run``: writes a real run's folder (lab 1's starter) into
    the job's folder and exits 0; ``stop_at``: the call (1, 2, ...) that is interrupted
    half-way, leaving half a folder; ``status``: another exit status per call."""

    def __init__(self, stop_at: int | None = None, status: dict[int, int] | None = None):
        self.jobs: list[rerun.Job] = []
        self.stop_at, self.status = stop_at, status or {}

    def __call__(self, job: rerun.Job) -> int:
        self.jobs.append(job)
        assert not job.out.exists(), "a half folder was not removed before the run"
        n = len(self.jobs)
        if n == self.stop_at:
            job.out.mkdir()
            (job.out / "summary.json").write_text("{")  # half written
            raise KeyboardInterrupt
        if n in self.status:
            job.log.write_text("... \ntestbed: error: topology.nodes: must be 2 or more\n")
            return self.status[n]
        shutil.copytree(STARTER1, job.out)
        job.log.write_text("results: done\n")
        return 0

    def names(self) -> list[str]:
        return [j.out.name for j in self.jobs]


def submission(where: Path, lab: Path = LAB1, *, edit=None, code: dict | None = None,
               name: str = "scenario.yaml") -> Path:
    """A student's folder: the lab's starter scenario (``edit`` changes its document) and
    ``code`` (file name -> text) beside it."""
    where.mkdir(parents=True)
    starter = next(p for p in (lab / "starter").glob("*.yaml")
                   if p.name not in rerun.NOT_SCENARIOS)
    data = yaml.safe_load(starter.read_text())
    if edit:
        edit(data)
    (where / name).write_text(yaml.safe_dump(data, sort_keys=False))
    for file, text in (code or {}).items():
        (where / file).write_text(text)
    return where


def args(*argv: str):
    return build_parser().parse_args(["check", *argv])


def one_line_refusal(capsys, lab: str, sub: Path, out: Path, *words: str) -> str:
    code = main(["check", lab, "--rerun", str(sub), "--out", str(out)])
    _, err = capsys.readouterr()
    lines = err.splitlines()
    assert code == 2 and len(lines) == 1, (code, lines)
    for word in words:
        assert word in lines[0], lines[0]
    assert not out.exists(), "a refused submission created the queue"
    return lines[0]


# checked before anything runs --------------------------------------------------------
def foreign_app(data):
    data["variants"][3]["controller"]["apps"] = [FOREIGN]


def test_a_plugin_the_lab_does_not_ship_is_refused(tmp_path, capsys):
    sub = submission(tmp_path / "bob", LAB3, edit=foreign_app)
    one_line_refusal(capsys, "3", sub, tmp_path / "q", "variants[3].controller.apps[0]",
                     FOREIGN, "does not ship", "nothing was run")


def test_the_labs_solution_module_is_not_the_students_work(tmp_path, capsys):
    def solution(data):
        data["variants"][3]["controller"]["apps"] = [
            "labs.lab03_hashing.solution.placement:StridePlacement"]

    sub = submission(tmp_path / "eve", LAB3, edit=solution)
    one_line_refusal(capsys, "3", sub, tmp_path / "q", "apps[0]", "does not ship")


def test_a_module_of_the_students_own_in_the_starter_package_is_refused(tmp_path, capsys):
    def own(data):
        data["variants"][3]["controller"]["apps"] = ["labs.lab03_hashing.starter.mine:App"]

    sub = submission(tmp_path / "mal", LAB3, edit=own, code={"mine.py": "class App: pass\n"})
    one_line_refusal(capsys, "3", sub, tmp_path / "q", "apps[0]", "does not ship")


def test_another_labs_scenario_is_refused(tmp_path, capsys):
    sub = submission(tmp_path / "carol", LAB1)
    one_line_refusal(capsys, "3", sub, tmp_path / "q", "name", "lab03-hashing")


def test_other_variants_are_refused(tmp_path, capsys):
    sub = submission(tmp_path / "dan", edit=lambda d: d["variants"].pop())
    one_line_refusal(capsys, "1", sub, tmp_path / "q", "variants", "training-4to1-paced")


def test_a_command_workload_is_refused(tmp_path, capsys):
    def command(data):
        data["variants"][4]["workloads"] = [{"kind": "command", "host": "n0",
                                             "argv": ["sh", "-c", "echo 1 > summary.json"]}]

    sub = submission(tmp_path / "fay", edit=command)
    one_line_refusal(capsys, "1", sub, tmp_path / "q", "variants[4].workloads[0].kind",
                     "command")


def test_a_bad_section_is_refused_by_the_validator(tmp_path, capsys):
    sub = submission(tmp_path / "gus", edit=lambda d: d["topology"].update(nodes="many"))
    one_line_refusal(capsys, "1", sub, tmp_path / "q", "topology.nodes")


def test_a_lab_without_a_run_is_refused(tmp_path, capsys):
    sub = submission(tmp_path / "hal")
    one_line_refusal(capsys, "2", sub, tmp_path / "q", "--rerun", "no scenario to run")


def test_the_shipped_plugin_is_accepted_and_the_students_copy_runs(tmp_path):
    placement = (LAB3 / "solution" / "placement.py").read_text()
    sub = submission(tmp_path / "alice", LAB3, code={"placement.py": placement})
    head = rerun.grader_head(grading.find("3"), 4099, None)
    got = rerun.read_submission(grading.find("3"), sub, head)
    assert got.code == {"placement.py": sub / "placement.py"}
    scenario = rerun.stage(grading.find("3"), got, tmp_path / "alice.staged")
    staged = tmp_path / "alice.staged" / "labs" / "lab03_hashing" / "starter" / "placement.py"
    assert staged.read_text() == placement
    # the run's processes (the controller included) import the student's copy
    job = rerun.Job(scenario=scenario, out=tmp_path / "out", log=tmp_path / "log")
    found = subprocess.run(
        [sys.executable, "-c", "import importlib.util as u; print(u.find_spec("
         "'labs.lab03_hashing.starter.placement').origin)"],
        cwd=scenario.parent, env=rerun.run_env(job), capture_output=True, text=True,
        check=True).stdout.strip()
    assert Path(found) == staged


def test_the_guides_my_labs_folder_is_a_submission(tmp_path):
    """As lab 3's guide has it: my-labs/lab03.yaml names placement:StridePlacement, the
    student's copy beside it, and the predictions are my-labs/lab03-predictions.yaml."""
    def beside(data):
        data["variants"][3]["controller"]["apps"] = ["placement:StridePlacement"]

    mine = (LAB3 / "solution" / "placement.py").read_text()
    asked = (LAB3 / "starter" / "predictions.yaml").read_text()
    folder = submission(tmp_path / "my-labs", LAB3, edit=beside, name="lab03.yaml",
                        code={"placement.py": mine, "lab03-predictions.yaml": asked})
    lab = grading.find("3")
    for given in (folder, folder / "lab03.yaml"):
        got = rerun.read_submission(lab, given, rerun.grader_head(lab, 1, None))
        assert got.code == {"placement.py": folder / "placement.py"}
        assert got.scenario["variants"][3]["controller"]["apps"] == [
            "labs.lab03_hashing.starter.placement:StridePlacement"]
        assert got.predictions == folder / "lab03-predictions.yaml"
    rerun.stage(lab, got, tmp_path / "staged")
    assert (tmp_path / "staged" / "labs" / "lab03_hashing" / "starter" /
            "placement.py").read_text() == mine


def test_a_folder_with_two_scenarios_is_refused(tmp_path, capsys):
    sub = submission(tmp_path / "kim")
    shutil.copy(sub / "scenario.yaml", sub / "lab01.yaml")
    one_line_refusal(capsys, "1", sub, tmp_path / "q", "both lab01.yaml and scenario.yaml")


def test_without_a_copy_the_labs_starter_file_runs(tmp_path):
    sub = submission(tmp_path / "ivy", LAB3)
    lab = grading.find("3")
    got = rerun.read_submission(lab, sub, rerun.grader_head(lab, 1, None))
    assert got.code == {"placement.py": LAB3 / "starter" / "placement.py"}


# the grader's seed and duration -------------------------------------------------------
def test_the_grader_sets_seed_and_duration(tmp_path):
    sub = submission(tmp_path / "jo", edit=lambda d: d.update(seed=99, seeds=[5, 6],
                                                             duration_s=1))
    lab = grading.find("1")
    got = rerun.read_submission(lab, sub, rerun.grader_head(lab, rerun.GRADER_SEED, None))
    assert got.scenario["seed"] == rerun.GRADER_SEED and "seeds" not in got.scenario
    assert got.scenario["duration_s"] == 25  # the lab's, not the student's
    assert rerun.grader_head(lab, 7, 3.0) == {"seed": 7, "duration_s": 3.0}
    # a lab whose file runs two seeds gets two of the grader's
    assert rerun.grader_head(grading.find("4"), 50, None)["seeds"] == [50, 51]


# the queue ----------------------------------------------------------------------------
def class_of(tmp_path: Path, *names: str) -> list[str]:
    return [str(submission(tmp_path / "subs" / n)) for n in names]


def test_the_queue_resumes_after_an_interruption(tmp_path, capsys):
    subs = class_of(tmp_path, "ann", "ben", "cat")
    out, table = tmp_path / "q", tmp_path / "class.csv"
    argv = ["1", "--rerun", *subs, "--out", str(out), "--csv", str(table)]
    first = FakeRun(stop_at=2)
    with pytest.raises(KeyboardInterrupt):
        rerun.cmd_rerun(args(*argv), grading.find("1"), first)
    assert first.names() == ["ann", "ben"]
    state = rerun.Queue(out, grading.find("1"), rerun.grader_head(grading.find("1"),
                                                                  rerun.GRADER_SEED, None))
    assert state.entry("ann")["status"] == "done"
    assert state.entry("ben")["status"] == "running"  # half done: run again
    capsys.readouterr()

    second = FakeRun()
    code = rerun.cmd_rerun(args(*argv), grading.find("1"), second)
    printed = capsys.readouterr().out
    assert second.names() == ["ben", "cat"]  # ann read back, ben from scratch
    assert code == 1  # lab 1's starter run: 4/7
    assert "[1/3] ann: FAIL (done before, read back; 4/7 checks" in printed
    assert "[2/3] ben: FAIL (" in printed and "[3/3] cat: FAIL (" in printed
    rows = list(csv.reader(table.open()))
    assert [r[0] for r in rows[1:4]] == subs and {r[1] for r in rows[1:4]} == {"FAIL"}

    third = FakeRun()
    assert rerun.cmd_rerun(args(*argv), grading.find("1"), third) == 1
    assert third.names() == []  # every one done


def test_a_changed_submission_runs_again(tmp_path):
    subs = class_of(tmp_path, "ann", "ben")
    argv = ["1", "--rerun", *subs, "--out", str(tmp_path / "q")]
    rerun.cmd_rerun(args(*argv), grading.find("1"), FakeRun())
    (Path(subs[1]) / "scenario.yaml").write_text(
        (Path(subs[1]) / "scenario.yaml").read_text().replace("rate_mbps: 12", "rate_mbps: 4"))
    again = FakeRun()
    rerun.cmd_rerun(args(*argv), grading.find("1"), again)
    assert again.names() == ["ben"]


def test_a_queue_of_another_seed_is_not_mixed_in(tmp_path):
    subs = class_of(tmp_path, "ann")
    rerun.cmd_rerun(args("1", "--rerun", *subs, "--out", str(tmp_path / "q")),
                    grading.find("1"), FakeRun())
    with pytest.raises(ConfigError, match="--out"):
        rerun.cmd_rerun(args("1", "--rerun", *subs, "--out", str(tmp_path / "q"),
                             "--seed", "5"), grading.find("1"), FakeRun())


def test_a_refused_submission_is_a_row_and_the_class_runs(tmp_path, capsys):
    subs = class_of(tmp_path, "ann")
    bad = str(submission(tmp_path / "subs" / "bob", LAB1, edit=lambda d: d["variants"].pop()))
    table = tmp_path / "class.csv"
    run = FakeRun()
    code = rerun.cmd_rerun(args("1", "--rerun", subs[0], bad, "--out", str(tmp_path / "q"),
                                "--csv", str(table)), grading.find("1"), run)
    assert run.names() == ["ann"] and code == 1
    rows = {r["folder"]: r for r in csv.DictReader(table.open())}
    assert rows[bad]["verdict"] == "ERROR" and "refused" in rows[bad]["notes"] and \
        "variants" in rows[bad]["notes"]


def test_a_run_the_scenario_breaks_is_an_error_row_not_run_again(tmp_path):
    subs = class_of(tmp_path, "ann", "ben")
    argv = ["1", "--rerun", *subs, "--out", str(tmp_path / "q"), "--csv",
            str(tmp_path / "c.csv")]
    assert rerun.cmd_rerun(args(*argv), grading.find("1"), FakeRun(status={1: 2, 2: 1})) == 1
    rows = {Path(r["folder"]).name: r for r in csv.DictReader((tmp_path / "c.csv").open())}
    assert rows["ann"]["verdict"] == "ERROR" and "topology.nodes" in rows["ann"]["notes"]
    again = FakeRun()
    rerun.cmd_rerun(args(*argv), grading.find("1"), again)
    assert again.names() == ["ben"]  # exit 1 (the host) runs again; exit 2 does not


def test_a_run_stopped_by_a_signal_stops_the_queue(tmp_path):
    subs = class_of(tmp_path, "ann", "ben")
    run = FakeRun(status={1: 130})
    with pytest.raises(Interrupted):
        rerun.cmd_rerun(args("1", "--rerun", *subs, "--out", str(tmp_path / "q")),
                        grading.find("1"), run)
    assert run.names() == ["ann"]


def test_two_submissions_of_one_name_are_refused(tmp_path):
    a = submission(tmp_path / "x" / "ann")
    b = submission(tmp_path / "y" / "ann")
    with pytest.raises(ConfigError, match="two submissions named ann"):
        rerun.cmd_rerun(args("1", "--rerun", str(a), str(b), "--out", str(tmp_path / "q")),
                        grading.find("1"), FakeRun())


def test_a_kind_of_ones_own_is_refused_in_one_line(tmp_path, capsys):
    sub = submission(tmp_path / "lee", edit=lambda d: d.update(kind="examples.kinds.pingmesh"))
    one_line_refusal(capsys, "1", sub, tmp_path / "q", "kind", "examples.kinds.pingmesh")


def test_a_folder_name_cannot_write_into_the_staged_scenario(tmp_path):
    """The staged file's first line names the submission: a line break in a folder's
    name must not start a key of the scenario the grader runs."""
    sub = submission(tmp_path / "x\nworkloads: [{kind: command, argv: [id]}]")
    lab = grading.find("1")
    got = rerun.read_submission(lab, sub, rerun.grader_head(lab, 1, None))
    staged = rerun.stage(lab, got, tmp_path / "staged")
    assert yaml.safe_load(staged.read_text()) == got.scenario


def test_the_submissions_predictions_are_graded_with_the_rerun(tmp_path):
    asked = (LAB1 / "starter" / "predictions.yaml").read_text()  # handed in unanswered
    sub = submission(tmp_path / "mo", name="lab01.yaml",
                     code={"lab01-predictions.yaml": asked})
    table = tmp_path / "c.csv"
    rerun.cmd_rerun(args("1", "--rerun", str(sub), "--out", str(tmp_path / "q"), "--csv",
                         str(table)), grading.find("1"), FakeRun())
    (row,) = [r for r in csv.DictReader(table.open()) if r["folder"] == str(sub)]
    columns = [k for k in row if k.startswith("predict-")]
    assert columns and {row[k] for k in columns} == {"UNANSWERED"}
    assert row["predictions_right"] == "0"


@pytest.mark.parametrize("lab", [lab.folder.name for lab in grading.all_labs()
                                 if lab.number != 2])
def test_every_labs_starter_and_solution_scenario_is_accepted(lab, tmp_path):
    """Each lab's starter as handed out and its solution (lab 3's: its app handed in as
    the student's copy, the scenario naming the starter's module) are submissions."""
    found = grading.find(lab)
    head = rerun.grader_head(found, rerun.GRADER_SEED, None)
    for part in ("starter", "solution"):
        folder = tmp_path / part
        shutil.copytree(found.folder / part, folder)
        scenario = folder / rerun.lab_scenario(found).name
        scenario.write_text(scenario.read_text().replace(".solution.", ".starter."))
        got = rerun.read_submission(found, folder, head)
        assert got.scenario["seed"] == rerun.GRADER_SEED
        assert set(got.code.values()) <= {folder / "placement.py"}


def test_the_rerun_options_need_rerun(capsys):
    code = main(["check", "1", str(STARTER1), "--seed", "5"])
    err = capsys.readouterr().err.splitlines()
    assert code == 2 and len(err) == 1 and "--seed: only with --rerun" in err[0], err
