"""The course pack (docs/teaching/, labs/exam*/, labs/*/solution/TEACHING.md): a plan of
twelve weeks that reaches every lab and both exams, a slide deck per lab with its question,
a figure that exists and the predictions, instructor notes beside every solution, exam
answer keys that a students' copy loses with the solutions, and answer keys whose
arithmetic is the project's own (the calculator, the PFC headroom, lab 9's cache check)."""

from __future__ import annotations

import importlib
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from testbed.experiments.storage.schema import Objects
from testbed.fabric.qos import FanIn, Pfc, headroom_bytes
from testbed.reports import grading
from topologies.calculator import TopologyError, calculate

REPO = Path(__file__).resolve().parents[2]
TEACHING = REPO / "docs" / "teaching"
LABS = grading.all_labs()
EXAMS = sorted((REPO / "labs").glob("exam*"))


def hooks():
    spec = importlib.util.spec_from_file_location("docs_hooks", REPO / "scripts" / "docs_hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def plan_rows() -> dict[int, str]:
    """The course plan's table: week number -> its row."""
    text = (TEACHING / "index.md").read_text()
    plan = text[text.index("## Course plan"):text.index("Every lab after the first")]
    return {int(m.group(1)): m.group(0) for m in re.finditer(r"^\| (\d+) \|.*$", plan, re.M)
            if "| week |" not in m.group(0)}


def test_the_plan_has_twelve_weeks_an_install_clinic_every_lab_and_both_exams():
    rows = plan_rows()
    assert sorted(rows) == list(range(1, 13))
    assert "(clinic.md)" in rows[1] and "install" in rows[1].lower()
    weeks_of = {lab.number: [w for w, row in rows.items()
                             if f"../labs/{lab.folder.name}/README.md" in row] for lab in LABS}
    assert all(len(weeks) == 1 for weeks in weeks_of.values()), weeks_of
    assert [w for w, row in rows.items() if "labs/exam" in row] == [6, 12]
    for exam in EXAMS:
        assert any(f"../labs/{exam.name}/README.md" in row for row in rows.values()), exam
    # each lab's week shows its slides and a reading
    for lab in LABS:
        row = rows[weeks_of[lab.number][0]]
        assert f"slides/lab{lab.number:02d}.md" in row, lab.number
        assert row.count("](") >= 3, row


def test_every_lab_has_a_slide_deck_with_its_question_a_figure_and_the_predictions():
    drawn = {f"{name}.png" for name in hooks().DRAWN}
    for lab in LABS:
        deck = TEACHING / "slides" / f"lab{lab.number:02d}.md"
        slides = re.split(r"^---$", deck.read_text(), flags=re.M)[1:]
        assert len(slides) == 5, deck
        question, figure, predict, task, debrief = (s.strip() for s in slides)
        assert question.startswith("## The question"), deck
        images = re.findall(r"!\[[^\]]+\]\(\.\./\.\./img/([^)]+)\)", figure)
        assert len(images) <= 1, deck
        for image in images:
            assert (REPO / "docs" / "img" / image).is_file() or image in drawn, (deck, image)
        # a plot of a run names its date and machine; without one the deck says so plainly
        # and gives the guide's measured figures (lab 2's are arithmetic)
        if images and images[0].startswith(("runs/", "watching/")):
            assert "2026-" in figure and ("Intel Xeon" in figure or "AMD EPYC" in figure) \
                    or "real lab" in figure, deck
        else:
            assert "No plot of" in figure or "runs no traffic" in figure, deck
            assert "|---|" in figure, deck
        assert predict.startswith("## Predict") and "the lab's predictions" in predict.lower()
        assert re.search(r"^1\. ", predict, re.M), deck
        assert f"testbed check {lab.number} " in task, deck
        assert debrief.startswith("## Debrief"), deck


def test_the_slides_hook_makes_a_section_of_each_slide_and_leaves_code_alone():
    text = "# Deck\n\nintro\n\n---\n\n## One\n\n```yaml\n---\nkey: 1\n```\n\n---\n\n## Two\n"
    out = hooks().slides(text)
    assert out.count('<section class="slide" markdown="1">') == 2
    assert out.startswith("# Deck\n\nintro\n\n<section")
    assert "```yaml\n---\nkey: 1\n```" in out


def test_every_lab_has_instructor_notes_beside_its_solution():
    for lab in LABS:
        notes = (lab.folder / "solution" / "TEACHING.md").read_text()
        assert notes.startswith(f"# Lab {lab.number}: instructor notes"), lab.folder
        for heading in ("## Timing", "## Expected ranges", "## Common mistakes"):
            assert heading in notes, (lab.folder, heading)
        ranges = notes[notes.index("## Expected ranges"):notes.index("## Common mistakes")]
        if lab.number != 2:  # lab 2 is arithmetic: the same on every datapath
            assert "| userspace datapath" in ranges and "| kernel datapath" in ranges, lab
            assert "not yet measured in the lab VM" in ranges, lab
        mistakes = notes[notes.index("## Common mistakes"):]
        assert len(re.findall(r"^- ", mistakes, re.M)) >= 3, lab.folder


def test_the_instructor_notes_join_the_site_only_where_the_solutions_are(tmp_path):
    module = hooks()
    found = module.instructor_notes(REPO / "labs")
    assert sorted(found) == [f"teaching/notes/lab{n:02d}.md" for n in range(1, 11)]
    nav = [{"Home": "index.md"}, {module.COURSE_PACK: [{"The course plan": "teaching/index.md"}]}]
    config = module.on_config({"nav": nav})
    notes = config["nav"][1][module.COURSE_PACK][-1]["Instructor notes"]
    assert notes[0] == {"Lab 1": "teaching/notes/lab01.md"} and len(notes) == 10
    # a students' copy: no solution folders, no notes, the nav as written
    copy = tmp_path / "labs"
    shutil.copytree(REPO / "labs", copy, ignore=shutil.ignore_patterns("solution", "__pycache__"))
    assert module.instructor_notes(copy) == {}


def test_a_students_copy_loses_every_answer_key_and_note_with_the_solutions(tmp_path):
    """``rm -r labs/*/solution``, as the teaching page says, removes the labs' solutions,
    answers and notes and the exams' answer keys, and keeps every guide and exam text."""
    assert len(EXAMS) == 2
    for exam in EXAMS:
        assert (exam / "README.md").is_file() and (exam / "solution" / "ANSWERS.md").is_file()
    shutil.copytree(REPO / "labs", tmp_path / "labs",
                    ignore=shutil.ignore_patterns("__pycache__"))
    assert "rm -r labs/*/solution" in (TEACHING / "index.md").read_text()
    subprocess.run(["sh", "-c", "rm -r labs/*/solution"], cwd=tmp_path, check=True)
    left = {p.relative_to(tmp_path).as_posix() for p in (tmp_path / "labs").rglob("*.md")}
    assert not [p for p in left if p.endswith(("ANSWERS.md", "TEACHING.md", "NOTES.md"))]
    assert {f"labs/{e.name}/README.md" for e in EXAMS} <= left
    assert len([p for p in left if re.fullmatch(r"labs/lab\d\d_\w+/README.md", p)]) == 10


def key(name: str) -> str:
    return re.sub(r"\s+", " ", (REPO / "labs" / name / "solution" / "ANSWERS.md").read_text())


def figure(n: float) -> str:
    return f"{n:,}"


def test_exam_1_answer_key_is_the_calculator_s_arithmetic():
    text = key("exam1_fabrics")
    two = calculate(switch_tbps=51.2, gpu_gbps=400, planes=2)
    one, multi, three = two["single_plane"], two["multi_plane"], two["single_plane_three_tier"]
    for value in (one["radix"], one["max_gpus"], one["switches"], multi["radix"],
                  multi["max_gpus"], multi["switches"], three["max_gpus"], three["switches"]):
        assert f"**{figure(value)}" in text, value
    with pytest.raises(TopologyError, match="slower than one 200 Gb/s SerDes lane"):
        calculate(switch_tbps=51.2, gpu_gbps=400, planes=4)
    assert one["max_gpus"] < 20_000 <= multi["max_gpus"] and "**Two planes**" in text
    # hashing: collision-free draws of 3 and 4 flows on 4 uplinks
    assert f"**{4 * 3 * 2 / 4 ** 3:.1%}".replace("%", " %") in text
    assert f"**{24 / 4 ** 4:.1%}".replace("%", " %") in text
    # the ECN table: the cut and the gain the key gives
    assert f"**{(1 - 380.3 / 519.4):.1%}".replace("%", " %") in text
    assert f"**+{(15.6 / 11.4 - 1):.1%}".replace("%", " %") in text


def test_exam_2_answer_key_is_the_headroom_and_cache_arithmetic_of_the_checks():
    text = key("exam2_operations")
    room = headroom_bytes(Pfc(enabled=True, reaction_ms=30), FanIn(80.0, 5, 20.0), 9000)
    assert f"**{figure(room)} bytes**" in text
    assert f"**{Pfc().xoff_kb + room / 1000:.1f} KB**" in text and Pfc().xoff_kb == 24
    lab20 = headroom_bytes(Pfc(enabled=True, reaction_ms=20), FanIn(80.0, 5, 20.0), 9000)
    assert figure(lab20) in text
    check = importlib.import_module("labs.lab09_storage.check")
    objects = Objects(keys=100, sizes_kb=[16, 64, 64, 256], zipf=1.0)
    k = check.fewest_keys(objects, 0.6)
    mb = check.smallest_cache_mb(objects, 0.6)
    held = check.fits(objects, mb * 1024)
    assert f"**k = {k}**" in text and f"**{figure(check.top_kb(objects, k))} KB**" in text
    assert f"**{mb} MB**" in text and f"top **{held}**" in text
    assert f"**{check.share(objects, held):.0%}".replace("%", " %") in text
    assert figure(check.top_kb(objects, held + 1)) in text
    uniform = Objects(keys=100, sizes_kb=[16, 64, 64, 256], zipf=0.0)
    k0 = check.fewest_keys(uniform, 0.75)
    assert f"**{k0} objects, {figure(check.top_kb(uniform, k0))} KB**" in text
    assert f"**{check.smallest_cache_mb(uniform, 0.75)} MB**" in text
    assert check.smallest_cache_mb(uniform, 0.75) > check.BUDGET_MB


MKDOCS = Path(sys.executable).with_name("mkdocs")


@pytest.mark.skipif(not MKDOCS.exists(), reason="mkdocs is not installed "
                    "(make setup installs it with the dev dependencies)")
def test_a_students_copy_builds_the_course_pack_without_notes_or_keys(tmp_path):
    """The site built strictly from a students' copy (``rm -r labs/*/solution``): the plan,
    the slides and the exam texts are there; no instructor note, no answer key."""
    root = tmp_path / "copy"
    for name in ("docs", "labs", "scripts"):
        shutil.copytree(REPO / name, root / name,
                        ignore=shutil.ignore_patterns("__pycache__", "solution"))
    for name in ("mkdocs.yml", "CHANGELOG.md", "CONTRIBUTING.md"):
        shutil.copy(REPO / name, root / name)
    site = tmp_path / "site"
    done = subprocess.run([str(MKDOCS), "build", "--strict", "-f", str(root / "mkdocs.yml"),
                           "-d", str(site)], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert done.returncode == 0 and "WARNING" not in done.stderr, done.stderr[-3000:]
    assert (site / "teaching" / "index.html").exists()
    assert len(list((site / "teaching" / "slides").glob("lab*.html"))) == 10
    assert {p.parent.name for p in (site / "labs").glob("exam*/index.html")} == \
        {e.name for e in EXAMS}
    assert not (site / "teaching" / "notes").exists()
    pages = "".join(p.read_text() for p in site.rglob("*.html"))
    assert "answer key (teachers)" not in pages and "Lab 1: instructor notes" not in pages
