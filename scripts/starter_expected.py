"""Record what a lab's starter grades as, from a real run of it:

    python scripts/starter_expected.py LAB RESULTS

grades RESULTS (the folder of the guide's ``run-starter`` commands; lab 2: the copied
answers) with ``testbed check``, copies the files its checks read into
``tests/fixtures/starters/labNN/`` (nothing else of the run: no captures, no logs), and
writes the check's output to ``labs/labNN_*/starter/expected-check.txt``, which the
teacher's pack shows. ``tests/unit/test_labs.py`` grades the copy and compares it with
that file, line for line, so a change to a check that changes a starter's grade shows up.
It refuses a run the fidelity monitor flagged: such a run measures the host.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from testbed.core import digest, layout  # noqa: E402
from testbed.reports import grading  # noqa: E402

FIXTURES = REPO / "tests" / "fixtures" / "starters"


def output(lab: grading.Lab, folder: Path) -> str:
    """What ``testbed check LAB FOLDER`` prints."""
    return grading.report(lab, grading.assess(lab, folder))


def files_read(lab: grading.Lab, folder: Path) -> tuple[str, set[Path]]:
    """The output, and every file under ``folder`` the checks read to make it."""
    seen: set[Path] = set()
    real_read, real_open = Path.read_text, Path.open

    def read_text(self, *a, **k):
        seen.add(Path(self).resolve())
        return real_read(self, *a, **k)

    def open_(self, *a, **k):
        seen.add(Path(self).resolve())
        return real_open(self, *a, **k)

    Path.read_text, Path.open = read_text, open_
    try:
        text = output(lab, folder)
    finally:
        Path.read_text, Path.open = real_read, real_open
    root = folder.resolve()
    return text, {p for p in seen if p.is_relative_to(root) and p.is_file()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("lab", help="lab number (1-10), folder or name")
    ap.add_argument("results", type=Path, help="the starter's results folder")
    args = ap.parse_args()
    lab = grading.find(args.lab)
    summary = args.results / "summary.json"
    if summary.is_file():
        flagged = grading.Results(args.results, json.loads(summary.read_text())).flagged()
        if flagged:
            print(f"{args.results}: flagged by the fidelity monitor ({', '.join(flagged)}): "
                  "rerun it with nothing else busy", file=sys.stderr)
            return 1
    text, read = files_read(lab, args.results)
    target = FIXTURES / lab.folder.name
    shutil.rmtree(target, ignore_errors=True)
    for path in sorted(read):
        copy = target / path.relative_to(args.results.resolve())
        copy.parent.mkdir(parents=True, exist_ok=True)
        # no path of the machine it ran on: the run's folder and the checkout, by name
        copy.write_text(path.read_text().replace(str(args.results.resolve()), "RESULTS")
                        .replace(str(REPO), "REPO"))
    if (target / layout.SUMMARY).exists():  # the copy's own digest, made as the run makes it
        digest.write(target)
    again = output(lab, target)
    if again != text:
        print("the copy grades differently from the run (a file the checks read was not "
              f"copied):\n{text}\n{again}", file=sys.stderr)
        return 1
    (lab.folder / "starter" / "expected-check.txt").write_text(text)
    print(text, end="")
    print(f"{len(read)} files into {target.relative_to(REPO)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
