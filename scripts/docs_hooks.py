"""MkDocs hooks of the docs site (``mkdocs.yml``): the pages generated from the code and
the lab guides, added to the site at build time and never written into ``docs/``.

- ``reference/scenario-file.md``, ``reference/cli.md`` and ``reference/results.md``:
  :mod:`testbed.core.reference`, from ``testbed schema``, ``testbed``'s argument parser
  and the table of record files (:mod:`testbed.core.records`);
- ``img/SCENARIO.png``: the topology of each scenario a page shows (``testbed graph``);
- ``labs/``: every lab guide (``labs/*/README.md``) and their index, as they are in the
  repository, so a guide has one source; likewise ``changelog.md`` and
  ``contributing.md``;
- ``teaching/starters.md``: what ``testbed check`` prints on each lab's starter
  (``labs/*/starter/expected-check.txt``, recorded from real runs by
  ``scripts/starter_expected.py`` and checked by ``tests/unit/test_labs.py``);
- ``labs/exam*/README.md``: the exam-style exercises (their answer keys, in ``solution/``,
  are never put in the site);
- ``teaching/notes/labNN.md``: each lab's instructor notes (``labs/*/solution/TEACHING.md``),
  only where the solutions are in the tree: a student copy (``rm -r labs/*/solution``)
  builds without them, and without their entries in the navigation;
- the slide decks (``docs/teaching/slides/*.md``): each slide, the text between two ``---``
  lines, becomes a ``<section class="slide">`` that ``docs/assets/slides.css`` prints one
  to a page.
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

from mkdocs.structure.files import File, Files

REPO = Path(__file__).resolve().parents[1]
#: the scenarios whose topology a page draws (``![...](img/NAME.png)``)
DRAWN = ("agents-vs-training", "ecmp-vs-adaptive", "fat-tree", "lossless",
         "backbone-failover", "cross-region-writes", "storage-cache",
         # the slide decks of labs 4 and 10 (docs/teaching/slides/)
         "ecn-tuning", "rack-acceptance")


def drawing(name: str, folder: Path) -> bytes:
    """The PNG ``testbed graph NAME -o FILE.png`` draws (first variant)."""
    from testbed.core import scenario
    from testbed.reports import graph

    g, title = graph.scenario_graph(scenario.load(scenario.path_of(name)))
    return graph.to_png(g, title, folder / f"{name}.png").read_bytes()


STARTERS_INTRO = """# What the starters grade

A student who runs a lab's starter unchanged and grades it sees the output below: the
checks marked "the lesson" pass (the run reproduces the lesson), the student's task
fails, with the reason. The numbers in a student's run differ from these (each is one
real run of the guide's `run-starter` commands, on the machine named in
`tests/fixtures/starters/README.md`); the PASS and FAIL column should not, unless the
run was flagged by the fidelity monitor (then the grade is RERUN, not PASS or FAIL: rerun
it on a quiet machine). A test grades the files each of these runs' checks read and compares the
output with this page, so the page changes when a check does.
"""


def starters_page() -> str:
    """The teacher's page of every starter's expected ``testbed check`` output."""
    from testbed.reports import grading

    parts = [STARTERS_INTRO]
    for lab in grading.all_labs():
        step = lab.commands()["check-starter"][-1]
        expected = (lab.folder / "starter" / "expected-check.txt").read_text()
        parts.append(f"## {lab.title}\n\n```\n$ {step}\n{expected}```\n")
    return "\n".join(parts)


#: the nav section the instructor notes are added to, when the solutions are in the tree
COURSE_PACK = "Course pack"


def instructor_notes(labs: Path) -> dict[str, Path]:
    """``teaching/notes/labNN.md`` -> the lab's ``solution/TEACHING.md``, where it exists."""
    notes = {}
    for path in sorted(labs.glob("lab*/solution/TEACHING.md")):
        number = re.match(r"lab(\d\d)_", path.parents[1].name)
        if number:
            notes[f"teaching/notes/lab{number.group(1)}.md"] = path
    return notes


def on_config(config):
    """Instructor notes in the navigation, under the course pack, when they are in the tree."""
    notes = instructor_notes(REPO / "labs")
    if notes:
        for section in config["nav"]:
            if isinstance(section, dict) and COURSE_PACK in section:
                section[COURSE_PACK].append({"Instructor notes": [
                    {f"Lab {int(page[-5:-3])}": page} for page in notes]})
    return config


def slides(markdown: str) -> str:
    """A deck's slides (separated by lines of ``---`` outside code fences) as sections.

    >>> print(slides("# Deck\\n\\n---\\n\\n## One\\n\\n---\\n\\n## Two\\n"))
    # Deck
    <BLANKLINE>
    <section class="slide" markdown="1">
    <BLANKLINE>
    ## One
    <BLANKLINE>
    </section>
    <BLANKLINE>
    <section class="slide" markdown="1">
    <BLANKLINE>
    ## Two
    <BLANKLINE>
    </section>
    <BLANKLINE>
    """
    parts, current, fenced = [], [], False
    for line in markdown.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        if line.strip() == "---" and not fenced:
            parts.append("\n".join(current).strip("\n"))
            current = []
        else:
            current.append(line)
    parts.append("\n".join(current).strip("\n"))
    head, *decks = parts
    return "\n\n".join([head] + [f'<section class="slide" markdown="1">\n\n{part}\n\n</section>'
                                  for part in decks if part]) + "\n"


def on_page_markdown(markdown: str, page, config, files) -> str:
    src = page.file.src_uri
    if src.startswith("teaching/slides/") and src != "teaching/slides/index.md":
        return slides(markdown)
    return markdown


def on_files(files: Files, config) -> Files:
    from testbed.core.reference import markdown_pages

    for path, text in markdown_pages().items():
        files.append(File.generated(config, path, content=text))
    labs = REPO / "labs"
    files.append(File.generated(config, "labs/index.md",
                                content=(labs / "README.md").read_text()))
    for guide in sorted(labs.glob("lab*/README.md")) + sorted(labs.glob("exam*/README.md")):
        files.append(File.generated(config, f"labs/{guide.parent.name}/README.md",
                                    content=guide.read_text()))
    with tempfile.TemporaryDirectory() as tmp:
        for name in DRAWN:
            files.append(File.generated(config, f"img/{name}.png",
                                        content=drawing(name, Path(tmp))))
    files.append(File.generated(config, "teaching/starters.md", content=starters_page()))
    for page, source in instructor_notes(labs).items():
        files.append(File.generated(config, page, content=source.read_text()))
    for name in ("CHANGELOG", "CONTRIBUTING"):
        files.append(File.generated(config, f"{name.lower()}.md",
                                    content=(REPO / f"{name}.md").read_text()))
    return files
