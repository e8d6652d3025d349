"""Grades a class can trust: the results folder's digest (an edit is refused), and a
grader that no malformed folder breaks (one line and exit 2, or FAIL for the one check
whose record is bad, within 10 s; one bad folder never stops a class's table).

Real results are the trimmed runs under tests/fixtures/: lab 1's starter run (graded
4/7) and ``results/small`` (three runs the fidelity monitor flagged)."""

from __future__ import annotations

import csv
import json
import shutil
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from testbed.core import digest, layout, runner
from testbed.core.cli import main
from testbed.reports import grading

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
STARTER1 = FIXTURES / "starters" / "lab01_oversubscription"
SMALL = FIXTURES / "results" / "small"
#: a guard against a grader that hangs (an alias bomb expanded, a recursion run away), not
#: the speed target: answering within 10 s is `make bench BENCH=grading`'s (these answers
#: take under 1.5 s here, 12 s in an emulated arm64 VM beside other work)
LIMIT_S = 60.0


def copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst, symlinks=True)
    return dst


def check(capsys, *args: str) -> tuple[int, str, list[str]]:
    """``testbed check ARGS``: exit status, standard output, standard error's lines;
    within LIMIT_S."""
    start = time.monotonic()
    code = main(["check", *args])
    took = time.monotonic() - start
    assert took < LIMIT_S, f"took {took:.1f} s"
    out, err = capsys.readouterr()
    return code, out, err.splitlines()


def refused(capsys, lab: str, folder: Path, *words: str) -> str:
    """The folder is refused: exit 2, one line on standard error holding ``words``."""
    code, out, err = check(capsys, lab, str(folder))
    assert code == 2 and len(err) == 1, (code, out, err)
    for word in words:
        assert word in err[0], err[0]
    return err[0]


# the digest ----------------------------------------------------------------------------
def test_the_real_run_grades_as_before(capsys):
    code, out, _ = check(capsys, "1", str(STARTER1))
    assert code == 1 and out.endswith("4/7 checks passed\n")


def test_an_edited_number_in_summary_json_is_refused(tmp_path, capsys):
    """A hand edit of one number of a real run's summary.json (the paced chains' p99,
    which would pass paced-protects-chains) is refused, naming the file."""
    folder = copy(STARTER1, tmp_path / "r")
    summary = folder / "summary.json"
    text = summary.read_text()
    assert '"p99": 579.907' in text
    summary.write_text(text.replace('"p99": 579.907', '"p99": 179.907'))
    line = refused(capsys, "1", folder, "summary.json changed since the run wrote digest.json")
    assert line.startswith("testbed: error: RESULTS: ")


def test_a_changed_baseline_variant_is_refused(tmp_path, capsys):
    """Raising the unpaced baseline's rate (so that the starter's paced rate looks paced)
    changes a record the run wrote: refused, naming it."""
    folder = copy(STARTER1, tmp_path / "r")
    config = folder / "variants" / "training-4to1" / "training.json"
    data = json.loads(config.read_text())
    data["rate_mbps"] = 20
    config.write_text(json.dumps(data))
    refused(capsys, "1", folder, "variants/training-4to1/training.json changed")


def test_a_record_replaced_by_a_link_is_refused(tmp_path, capsys):
    """The same bytes through a symbolic link (to a file outside the folder) are not the
    run's file."""
    folder = copy(STARTER1, tmp_path / "r")
    config = folder / "variants" / "training-4to1" / "training.json"
    outside = tmp_path / "mine.json"
    outside.write_bytes(config.read_bytes())
    config.unlink()
    config.symlink_to(outside)
    refused(capsys, "1", folder, "variants/training-4to1/training.json: outside the results "
                                 "folder")


def test_a_deleted_record_is_refused(tmp_path, capsys):
    folder = copy(STARTER1, tmp_path / "r")
    (folder / "variants" / "training-4to1-paced" / "training.json").unlink()
    refused(capsys, "1", folder, "training-4to1-paced/training.json is listed in digest.json "
                                 "but missing")


def test_a_folder_without_a_digest_is_refused_with_a_hint(tmp_path, capsys):
    folder = copy(STARTER1, tmp_path / "r")
    (folder / layout.DIGEST).unlink()
    refused(capsys, "1", folder, "no digest.json", "run the lab again")


def test_an_edited_digest_is_refused(tmp_path, capsys):
    """A digest whose file list was edited without its own digest."""
    folder = copy(STARTER1, tmp_path / "r")
    summary = folder / "summary.json"
    summary.write_text(summary.read_text().replace("579.907", "179.907"))
    doc = json.loads((folder / layout.DIGEST).read_text())
    doc["files"]["summary.json"] = digest.file_hash(summary)
    (folder / layout.DIGEST).write_text(json.dumps(doc))
    refused(capsys, "1", folder, "digest.json does not match its own file list")


def test_the_run_writes_the_digest_last(tmp_path, monkeypatch):
    """runner.run (its experiment, host probe and report replaced by stand-ins) ends with
    digest.json over every file it wrote, the report included, and the folder grades."""

    class Experiment:
        def check_host(self, caps):
            pass

        def start(self, ctx):
            pass

        def run_variant(self, variant, *, seed, out, tag, ctx):
            (out / layout.SPEC).write_text('{"builder": "leaf-spine"}')
            return {"name": variant.name, "seed": seed,
                    "agents": {"chains_started": 1, "chains_completed": 1,
                               "latency_ms": {"p50": None}},
                    "training": {"iterations": 0}}

        def finish(self, entries, out, ctx):
            return {}

    monkeypatch.setattr(runner, "probe", lambda run_id: SimpleNamespace(to_dict=dict))
    monkeypatch.setattr(runner.report, "write",
                        lambda summary, out: (out / layout.REPORT).write_text("# report\n"))
    sc = SimpleNamespace(name="t", kind="fabric", description="", seed=1, run_seeds=(1,),
                         duration_s=1, variants=[SimpleNamespace(name="a")], monitor=None,
                         source={}, experiment=Experiment(), picked=())
    out = tmp_path / "out"
    runner.run(sc, out, progress=lambda line: None, monitor=False)
    listed = digest.verify(out)
    assert {layout.SUMMARY, layout.MANIFEST, layout.REPORT, "variants/a/spec.json"} <= \
        set(listed)
    assert set(listed) == {p.relative_to(out).as_posix() for p in out.rglob("*")
                           if p.is_file() and p.name != layout.DIGEST}
    lab = grading.Lab(0, "t", tmp_path)
    (tmp_path / "check.py").write_text(
        "from testbed.reports.grading import verdict\n"
        "def spec_read(r):\n    return verdict(r.spec('a')['builder'] == 'leaf-spine', 'ok')\n"
        "CHECKS = [spec_read]\n")
    assert grading.assess(lab, out).verdict == "PASS"


# hostile folders ---------------------------------------------------------------------------
def folder_with(tmp_path: Path, summary: bytes | str) -> Path:
    """A folder whose summary.json holds ``summary``, with a digest as a run writes it (so
    the grader reads the content, not only the digest)."""
    folder = tmp_path / "r"
    folder.mkdir()
    (folder / "summary.json").write_bytes(summary.encode() if isinstance(summary, str)
                                          else summary)
    digest.write(folder)
    return folder


def run(name: str, **fields) -> dict:
    return {"name": name, "dir": f"variants/{name}", **fields}


HOSTILE_SUMMARIES = {
    "not an object": ("[1, 2]", "must be a JSON object"),
    "runs not a list": ('{"runs": "abc"}', "runs: must be a list"),
    "a run not an object": ('{"runs": [1]}', "runs[0]: must be an object with a name"),
    "a run without a name": ('{"runs": [{"name": 7}]}', "runs[0]: must be an object"),
    "NaN": ('{"runs": [{"name": "agents-only", "agents": {"latency_ms": {"p99": NaN}}}]}',
            "NaN is not a number JSON allows"),
    "Infinity": ('{"runs": [], "x": -Infinity}', "-Infinity is not a number"),
    "a huge float": ('{"runs": [], "x": 1e999}', "1e999 is too large a number"),
    "a 5,000-digit integer": ('{"runs": [], "x": 1' + "0" * 5000 + "}", "not JSON a run"),
    "deep nesting": ('{"runs": [], "x": ' + "[" * 200_000 + "]" * 200_000 + "}",
                     "not JSON a run writes"),
    "not UTF-8": (b'{"runs": [], "x": "\xff"}', "not JSON a run writes"),
    "fidelity not an object": (json.dumps({"runs": [run("a", fidelity=[1])]}),
                               "runs[0].fidelity: must be an object"),
    "fidelity ok not a bool": (json.dumps({"runs": [run("a", fidelity={"ok": "no"})]}),
                               "runs[0].fidelity: must be an object"),
    "dir up and out": (json.dumps({"runs": [run("a", dir="../../etc")]}),
                       "runs[0].dir: '../../etc' leaves the results folder"),
    "dir absolute": (json.dumps({"runs": [run("a", dir="/etc")]}),
                     "runs[0].dir: '/etc' leaves the results folder"),
    "dir not a string": (json.dumps({"runs": [run("a", dir=5)]}), "runs[0].dir: '5' leaves"),
    "a seed's dir out": (json.dumps({"runs": [run("a", seeds=[{"dir": "variants/../../x"}])]}),
                         "leaves the results folder"),
    "seeds not a list": (json.dumps({"runs": [run("a", seeds="x")]}),
                         "runs[0].seeds: must be a list of objects"),
}


@pytest.mark.parametrize("case", HOSTILE_SUMMARIES, ids=str)
def test_a_malformed_summary_is_one_line_and_exit_2(tmp_path, capsys, case):
    text, words = HOSTILE_SUMMARIES[case]
    refused(capsys, "1", folder_with(tmp_path, text), "summary.json", words)


def test_a_50_mb_summary_is_refused_in_time(tmp_path, capsys):
    folder = folder_with(tmp_path, '{"runs": [], "pad": "' + "x" * (50 << 20) + '"}')
    refused(capsys, "1", folder, "summary.json: over 16 MB")


def test_a_variants_folder_linked_out_of_the_results_is_refused(tmp_path, capsys):
    outside = tmp_path / "elsewhere" / "a"
    outside.mkdir(parents=True)
    (outside / "spec.json").write_text('{"oversubscription": 4}')
    folder = folder_with(tmp_path, json.dumps({"runs": [run("a")]}))
    (folder / "variants").symlink_to(tmp_path / "elsewhere")
    refused(capsys, "1", folder, "runs[0].dir: 'variants/a' leaves the results folder")


def test_a_summary_linked_to_a_file_outside_is_refused(tmp_path, capsys):
    folder = copy(STARTER1, tmp_path / "r")
    mine = tmp_path / "mine.json"
    mine.write_bytes((folder / "summary.json").read_bytes())
    (folder / "summary.json").unlink()
    (folder / "summary.json").symlink_to(mine)
    refused(capsys, "1", folder, "summary.json is not a regular file")


@pytest.mark.parametrize("doc, words", [
    ("{not json", "digest.json is not JSON"),
    ('{"algorithm": "md5", "files": {}}', "is not a digest of this testbed"),
    (json.dumps({"algorithm": "sha256", "files": {"../../etc/passwd": "0" * 64}}),
     "names '../../etc/passwd', a path outside the results folder"),
    (json.dumps({"algorithm": "sha256", "files": {"/etc/passwd": "0" * 64}}),
     "a path outside the results folder"),
    ("[" * 100_000, "digest.json is not JSON"),
])
def test_a_malformed_digest_is_one_line_and_exit_2(tmp_path, capsys, doc, words):
    folder = copy(STARTER1, tmp_path / "r")
    (folder / layout.DIGEST).write_text(doc)
    refused(capsys, "1", folder, words)


def test_a_huge_digest_is_refused(tmp_path, capsys):
    folder = copy(STARTER1, tmp_path / "r")
    (folder / layout.DIGEST).write_text(" " * (9 << 20))
    refused(capsys, "1", folder, "digest.json is not a regular file of at most 8 MB")


def test_a_record_that_does_not_read_fails_its_check_only(tmp_path, capsys):
    """A record the run wrote badly (spec.json not JSON): FAIL for the checks that read
    it, the others graded."""
    folder = copy(STARTER1, tmp_path / "r")
    (folder / "variants" / "training-4to1" / "spec.json").write_text("{oops")
    digest.write(folder)
    code, out, err = check(capsys, "1", str(folder))
    assert code == 1 and not err
    lines = out.splitlines()
    bad = [ln for ln in lines if ln.startswith("FAIL fabrics-as-asked")]
    assert bad and "is not as a run writes it (JSONDecodeError" in bad[0]
    assert "PASS chains-complete: " in out and lines[-1].endswith("3/7 checks passed")


YAML_BOMB = """a: &a ["x", "x", "x", "x", "x", "x", "x", "x", "x", "x"]
b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]
c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]
d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]
e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]
f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]
g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f, *f]
h: &h [*g, *g, *g, *g, *g, *g, *g, *g, *g, *g]
part_a: [*h, *h, *h, *h, *h, *h, *h, *h, *h, *h]
"""


@pytest.mark.parametrize("text, words", [
    (YAML_BOMB, "with its aliases expanded"),
    ("part_a: " + "[" * 5000 + "]" * 5000 + "\n", "nested deeper than"),
    ("part_a: {x: 1}\npart_a: {x: 2}\n", "part_a"),
])
def test_a_hostile_answers_file_is_one_line_and_exit_2(tmp_path, capsys, text, words):
    """Lab 2 grades answers.yaml: it goes through the scenario files' bounded loader."""
    (tmp_path / "answers.yaml").write_text(text)
    refused(capsys, "2", tmp_path, "answers.yaml", words)


def test_one_bad_folder_never_stops_the_class(tmp_path, capsys):
    """A class of a run that fails, a folder whose summary is a list, a folder linked out,
    and a run the monitor flagged: every folder gets its row and the table its count."""
    weak = copy(STARTER1, tmp_path / "ada")
    broken = tmp_path / "bob"
    broken.mkdir()
    (broken / "summary.json").write_text("[1]")
    digest.write(broken)
    out_of = tmp_path / "cy"
    out_of.mkdir()
    (out_of / "summary.json").write_text(json.dumps({"runs": [run("a", dir="../../etc")]}))
    digest.write(out_of)
    flagged = copy(SMALL, tmp_path / "dee")
    table = tmp_path / "class.csv"
    folders = [weak, broken, out_of, flagged]
    start = time.monotonic()
    code = main(["check", "1", *map(str, folders), "--csv", str(table)])
    assert time.monotonic() - start < LIMIT_S
    assert code == 1
    assert "1 of 4 must rerun" in capsys.readouterr().out
    rows = list(csv.reader(table.open()))
    assert [r[0] for r in rows[1:5]] == [str(f) for f in folders]
    assert [r[1] for r in rows[1:5]] == ["FAIL", "ERROR", "ERROR", "RERUN"]
    notes = rows[0].index("notes")
    assert "must be a JSON object" in rows[2][notes] and "leaves the results" in rows[3][notes]
    assert rows[-1] == ["1 of 4 must rerun"]


def test_a_check_that_breaks_costs_one_row_not_the_class(tmp_path):
    """A check's own bug (an exception no record explains) is that folder's ERROR row."""
    labdir = tmp_path / "lab"
    labdir.mkdir()
    (labdir / "check.py").write_text("def boom(r):\n    raise RuntimeError('planted')\n"
                                     "CHECKS = [boom]\n")
    lab = grading.Lab(0, "t", labdir)
    good = copy(STARTER1, tmp_path / "a")
    rows = grading.grade_class(lab, [good, copy(STARTER1, tmp_path / "b")])
    assert [(g, e) for _, g, e in rows] == [(None, "the grader failed on this folder "
                                                   "(RuntimeError: planted)")] * 2


def test_reanalysing_the_faults_keeps_the_digest_true(tmp_path, monkeypatch):
    """``python -m testbed.faults.run RESULTS`` rewrites summary.json from the records on
    purpose: it writes the digest again, so the folder still grades."""
    from testbed.faults import run as faults_run
    from testbed.reports import report

    monkeypatch.setattr(report, "write",
                        lambda summary, out: (out / layout.REPORT).write_text("# again\n"))
    folder = copy(SMALL, tmp_path / "r")
    before = (folder / layout.DIGEST).read_text()
    faults_run.reanalyze(folder)
    assert (folder / layout.DIGEST).read_text() != before
    assert layout.REPORT in digest.verify(folder)


def test_a_flagged_run_with_right_predictions_is_still_rerun(tmp_path, capsys):
    """Predictions are checks with verdicts: on a flagged run they are shown, not graded."""
    data = json.loads((FIXTURES / "starters" / "lab05_resilience" / "summary.json")
                      .read_text())
    names = {"degrade": "f1", "cut": "f2", "crash": "f3", "plane": "f4"}
    for entry in data["runs"]:
        entry["name"] = names[entry["name"]]
    data["runs"][0]["fidelity"] = {"ok": False, "reasons": ["idle CPU below 10 %"]}
    folder = tmp_path / "r"
    folder.mkdir()
    (folder / "summary.json").write_text(json.dumps(data))
    digest.write(folder)
    right = grading.find("5").folder / "solution" / "predictions.yaml"
    code, out, _ = check(capsys, "5", str(folder), "--predictions", str(right))
    lines = out.splitlines()
    assert code == 3 and lines[0].startswith(
        f"RERUN: the fidelity monitor flagged {data['runs'][0]['name']} (idle")
    assert lines[-1] == "Predictions: 6/6 right, 0 unanswered"
