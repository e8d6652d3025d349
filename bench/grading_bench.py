"""Benchmark: the grader answers a hostile results folder within 10 s.

A class's folders are graded one after the other, so one folder that takes minutes (a
YAML file whose aliases expand to billions of nodes, 200,000 nested brackets, a summary
of 16 MB) would stall the whole class. Each case below is graded by ``testbed check``
in this process, as the grader runs it; the target is fixed: every case answers (one
line and exit 2, or a grade) within ``TARGET_S`` on the machine the bench runs on.

    python -m bench grading

Prints one line a case (seconds, exit status, the answer's first line) and exits 1 when
a case misses the target.
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import tempfile
import time
from pathlib import Path

from testbed.core import digest

TARGET_S = 10.0
FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures"
SMALL = FIXTURES / "results" / "small"

YAML_BOMB = "".join(
    f"{name}: &{name} [{', '.join([f'*{prev}'] * 10) if prev else ', '.join(['x'] * 10)}]\n"
    for prev, name in zip(["", "a", "b", "c", "d", "e", "f", "g"], "abcdefgh", strict=True))
YAML_BOMB += "part_a: [" + ", ".join(["*h"] * 10) + "]\n"


def _answers(folder: Path, text: str) -> tuple[str, Path]:
    folder.mkdir()
    (folder / "answers.yaml").write_text(text)
    return "2", folder


def _summary(folder: Path, text: str) -> tuple[str, Path]:
    folder.mkdir()
    (folder / "summary.json").write_text(text)
    digest.write(folder)
    return "1", folder


def _small(folder: Path) -> tuple[str, Path]:
    shutil.copytree(SMALL, folder, symlinks=True)
    return "1", folder


CASES = {
    "lab 2 answers: YAML aliases expanding to 10^9 nodes":
        lambda d: _answers(d, YAML_BOMB),
    "lab 2 answers: 5,000 nested brackets":
        lambda d: _answers(d, "part_a: " + "[" * 5000 + "]" * 5000 + "\n"),
    "summary.json: 200,000 nested brackets":
        lambda d: _summary(d, '{"runs": [], "x": ' + "[" * 200_000 + "]" * 200_000 + "}"),
    "summary.json: 17 MB":
        lambda d: _summary(d, json.dumps({"runs": [], "x": "y" * (17 << 20)})),
    "a real run of lab 1 (tests/fixtures/results/small)": _small,
}


def grade(lab: str, folder: Path) -> tuple[float, int, str]:
    from testbed.core.cli import main

    out, err = io.StringIO(), io.StringIO()
    start = time.monotonic()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(["check", lab, str(folder)])
        except SystemExit as exc:
            code = exc.code
    took = time.monotonic() - start
    first = (err.getvalue() or out.getvalue()).strip().splitlines()[:1]
    return took, code, first[0][:90] if first else ""


def main(argv: list[str] | None = None) -> int:
    missed = 0
    print(f"{'case':<54} {'s':>6}  exit  answer")
    with tempfile.TemporaryDirectory(prefix="testbed-grading-bench.") as tmp:
        for i, (name, make) in enumerate(CASES.items()):
            lab, folder = make(Path(tmp) / f"case{i}")
            took, code, first = grade(lab, folder)
            missed += took >= TARGET_S
            print(f"{name:<54} {took:6.2f}  {code!s:>4}  {first}", flush=True)
    print(f"grading: every case within {TARGET_S:.0f} s: "
          f"{'yes' if not missed else f'no, {missed} missed'}")
    return 1 if missed else 0
