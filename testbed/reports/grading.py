"""Grading of the lab guides in ``labs/``: ``testbed check LAB RESULTS``.

Each guide is a folder ``labs/labNN_name/`` whose ``check.py`` declares what it grades:
``NEEDS``, the file a results folder must hold (``summary.json`` for a ``testbed run``
folder), and ``CHECKS``, a list of functions that each take a :class:`Results` and
return a :class:`Verdict` (passed or not, and why, with the measured numbers). A check
that finds a field missing raises :class:`Missing`, which grades as a failure naming
the field. Checks read what a run measured (summary.json and the record files it
names); a design task's check may run the project's own validators instead.

A run the fidelity monitor flagged (the host did not keep up) is not graded: its grade is
RERUN whatever its checks say (they are still shown, as information), with the monitor's
reason and what to change. ``testbed check`` exits 0 (every check passed), 1 (a check
failed), 2 (bad input: one line naming the problem) or 3 (rerun on a quieter machine).

>>> r = Results(Path("/r"), {"runs": [{"name": "a", "agents": {"latency_ms": {"p99": 9.5}}}]})
>>> r.value("a", "agents.latency_ms.p99")
9.5
>>> r.value("a", "agents.latency_ms.p50")
Traceback (most recent call last):
...
testbed.reports.grading.Missing: variant a: summary.json has no agents.latency_ms.p50
>>> r.run("b")
Traceback (most recent call last):
...
testbed.reports.grading.Missing: no variant named 'b' in summary.json (it has: a)
"""

from __future__ import annotations

import importlib.util
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from testbed import REPO
from testbed.core import layout
from testbed.errors import ConfigError

LABS = REPO / "labs"
_FOLDER = re.compile(r"^lab(\d\d)_([a-z0-9_]+)$")
_BLOCK = re.compile(r"^```sh\n# lab: ([a-z-]+)\n(.*?)^```", re.M | re.S)
#: the steps a guide's command blocks are marked with (``# lab: STEP`` as first line)
STEPS = ("run-starter", "check-starter", "run-solution", "check-solution", "explore")


@dataclass(frozen=True)
class Verdict:
    ok: bool
    reason: str


class Missing(Exception):
    """A field or record a check needs is not in the results (the check fails)."""


def passed(reason: str) -> Verdict:
    return Verdict(True, reason)


def failed(reason: str) -> Verdict:
    return Verdict(False, reason)


def verdict(ok: bool, reason: str) -> Verdict:
    return Verdict(bool(ok), reason)


class Results:
    """A results folder: its summary.json (or the lab's ``NEEDS`` file) and records."""

    def __init__(self, folder: Path, summary: dict | None = None):
        self.folder = folder
        self.summary = summary if summary is not None else {}

    def runs(self) -> list[dict]:
        return list(self.summary.get("runs") or [])

    def names(self) -> list[str]:
        return [r.get("name", "?") for r in self.runs()]

    def run(self, name: str) -> dict:
        for entry in self.runs():
            if entry.get("name") == name:
                return entry
        raise Missing(f"no variant named {name!r} in summary.json "
                      f"(it has: {', '.join(self.names()) or 'none'})")

    def value(self, name: str, path: str):
        """A field of variant ``name`` by dotted path; :class:`Missing` when absent."""
        node = self.run(name)
        for key in path.split("."):
            if not isinstance(node, dict) or node.get(key) is None:
                raise Missing(f"variant {name}: summary.json has no {path}")
            node = node[key]
        return node

    def record(self, name: str, filename: str) -> Path:
        """A record file of variant ``name`` (its first seed's folder)."""
        path = layout.run_dir(self.run(name), self.folder) / filename
        if not path.is_file():
            raise Missing(f"variant {name}: no {filename} in {path.parent}")
        return path

    def spec(self, name: str) -> dict:
        """The topology spec variant ``name`` ran on (its spec.json), with the builder's
        ``params`` (leaves_per_plane, oversubscription, ...) lifted to the top level."""
        spec = json.loads(self.record(name, layout.SPEC).read_text())
        return {**spec, **(spec.get("params") or {})}

    def flagged(self) -> list[str]:
        """Variants the fidelity monitor flagged (the host did not keep up)."""
        return [r["name"] for r in self.runs()
                if not (r.get("fidelity") or {}).get("ok", True)]


    def rerun_reason(self) -> str | None:
        """Why the run must be repeated (None when the fidelity monitor flagged nothing):
        what the monitor flagged, with its own reasons, and what to change."""
        flagged = [r for r in self.runs() if r.get("name") in self.flagged()]
        if not flagged:
            return None
        parts = []
        for run in flagged:
            reasons = (run.get("fidelity") or {}).get("reasons") or []
            why = "; ".join(str(x)[:300] for x in reasons[:3]) if isinstance(reasons, list) \
                else str(reasons)[:300]
            parts.append(f"{run.get('name')} ({why or 'no reason recorded'})")
        return (f"the fidelity monitor flagged {', '.join(parts)}: the host did not keep up, "
                f"so the numbers describe the host, not the network. {RERUN_CHANGE}")


#: what a student whose run was flagged changes before running the lab again
RERUN_CHANGE = ("Close other programs (a browser, an editor, another VM), or give the VM "
                "more vCPUs (TESTBED_CPUS=4 vagrant reload), then run the lab again")

#: ``testbed check``'s exit statuses
EXIT_PASS, EXIT_FAIL, EXIT_BAD_INPUT, EXIT_RERUN = 0, 1, 2, 3

Check = Callable[[Results], Verdict]


@dataclass(frozen=True)
class Grade:
    """A results folder graded: each check's verdict, and why the whole run must be
    repeated instead (``rerun``: the fidelity monitor flagged it; then no PASS or FAIL)."""

    checks: list[tuple[str, Verdict]]
    rerun: str | None = None

    @property
    def verdict(self) -> str:
        """PASS, FAIL or RERUN."""
        if self.rerun:
            return "RERUN"
        return "PASS" if all(v.ok for _, v in self.checks) else "FAIL"

    @property
    def passed(self) -> int:
        return sum(v.ok for _, v in self.checks)

    @property
    def exit_status(self) -> int:
        return {"PASS": EXIT_PASS, "FAIL": EXIT_FAIL, "RERUN": EXIT_RERUN}[self.verdict]


@dataclass(frozen=True)
class Lab:
    number: int
    name: str
    folder: Path

    @property
    def title(self) -> str:
        """The guide's first heading."""
        guide = self.folder / "README.md"
        for line in guide.read_text().splitlines() if guide.is_file() else ():
            if line.startswith("# "):
                return line[2:].strip()
        return self.name

    def commands(self) -> dict[str, list[str]]:
        """The guide's marked command blocks: step -> command lines (comments dropped).

        A block is a fenced ``sh`` block whose first line is ``# lab: STEP``; a line ending
        in a backslash goes on on the next. The test of the guides
        (tests/integration/test_labs.py) runs them in a shortened form.
        """
        text = (self.folder / "README.md").read_text()
        blocks: dict[str, list[str]] = {}
        for step, body in _BLOCK.findall(text):
            body = body.replace("\\\n", " ")  # a line continued with a backslash
            lines = [line.split("  #")[0].strip() for line in body.splitlines()]
            blocks.setdefault(step, []).extend(x for x in lines if x and not x.startswith("#"))
        return blocks

    def module(self) -> ModuleType:
        path = self.folder / "check.py"
        spec = importlib.util.spec_from_file_location(f"labs_check_{self.folder.name}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module


def all_labs(root: Path = LABS) -> list[Lab]:
    """Every guide under ``root`` (``labNN_name`` folders with a check.py), by number."""
    labs = []
    for folder in sorted(root.iterdir()) if root.is_dir() else ():
        m = _FOLDER.fullmatch(folder.name)
        if m and (folder / "check.py").is_file():
            labs.append(Lab(int(m.group(1)), m.group(2), folder))
    return labs


def find(key: str, root: Path = LABS) -> Lab:
    """A lab by number (``3``, ``03``), folder (``lab03_hashing``) or name (``hashing``).

    >>> find("1").name, find("lab07_backbone").number, find("ecn").number
    ('oversubscription', 7, 4)
    """
    labs = all_labs(root)
    for lab in labs:
        if key.strip().isdigit() and int(key) == lab.number:
            return lab
        if key in (lab.folder.name, lab.name):
            return lab
    known = ", ".join(f"{lab.number} ({lab.name})" for lab in labs)
    raise ConfigError("LAB", f"no lab {key!r} (known: {known})")


def load(lab: Lab, folder: Path) -> tuple[list[Check], Results]:
    """The lab's checks and the results folder they grade; :class:`ConfigError` when the
    folder lacks the file the lab needs."""
    module = lab.module()
    needs = getattr(module, "NEEDS", layout.SUMMARY)
    path = folder / needs
    if not folder.is_dir():
        raise ConfigError("RESULTS", f"{folder}: no such folder")
    if not path.is_file():
        raise ConfigError("RESULTS", f"{folder} has no {needs} "
                                     f"({getattr(module, 'NEEDS_HINT', 'a testbed run folder')})")
    if needs.endswith(".json"):
        try:
            data = json.loads(path.read_text())
        except json.JSONDecodeError as exc:
            raise ConfigError("RESULTS", f"{path}: not JSON ({exc})") from None
    else:
        data = module.read(path)
    return list(module.CHECKS), Results(folder, data)


def check_name(check: Check) -> str:
    return check.__name__.replace("_", "-")


def assess(lab: Lab, folder: Path) -> Grade:
    """``lab``'s grade of ``folder``: every check's verdict, and RERUN's reason when the
    fidelity monitor flagged the run."""
    checks, results = load(lab, folder)
    return Grade(_verdicts(checks, results), results.rerun_reason())


def grade(lab: Lab, folder: Path) -> list[tuple[str, Verdict]]:
    """Every check of ``lab`` on ``folder``, in order, each with its verdict."""
    return assess(lab, folder).checks


def _verdicts(checks: list[Check], results: Results) -> list[tuple[str, Verdict]]:
    out = []
    for check in checks:
        try:
            v = check(results)
        except Missing as exc:
            v = failed(str(exc))
        except (KeyError, TypeError) as exc:  # results of another shape (an older run)
            v = failed(f"the results lack a field this check reads ({exc!r})")
        out.append((check_name(check), v))
    return out


def report(lab: Lab, graded: Grade) -> str:
    """What ``testbed check`` prints for one folder: RERUN's reason first when the run was
    flagged, a line a check, then the grade."""
    verdicts = graded.checks
    lines = [f"{'PASS' if v.ok else 'FAIL'} {name}: {v.reason}" for name, v in verdicts]
    count = f"{graded.passed}/{len(verdicts)} checks passed"
    if graded.rerun:
        return "\n".join([f"RERUN: {graded.rerun}",
                          *(f"  (not graded) {line}" for line in lines),
                          f"{lab.title}: RERUN (not graded; {count})"]) + "\n"
    return "\n".join([*lines, f"{lab.title}: {count}"]) + "\n"


def cmd_check(args) -> int:
    lab = find(args.lab)
    folders = [Path(f) for f in args.results]
    if len(folders) == 1 and not args.csv:
        graded = assess(lab, folders[0])
        print(report(lab, graded), end="")
        return graded.exit_status
    rows = grade_class(lab, folders)
    names = [check_name(c) for c in lab.module().CHECKS]
    width = max(len(str(f)) for f in folders)
    print(f"{lab.title}: {len(folders)} results folders")
    for folder, graded, error in rows:
        if error:
            print(f"{str(folder):<{width}}  ERROR {error}")
            continue
        marks = " ".join("PASS" if v.ok else "FAIL" for _, v in graded.checks)
        print(f"{str(folder):<{width}}  {graded.verdict:<5}  {graded.passed}/"
              f"{len(graded.checks)}  {marks}")
    print(rerun_count(rows))
    if args.csv:
        write_csv(Path(args.csv), names, rows)
        print(f"{args.csv}: one row a folder, its verdict, one column a check "
              f"({', '.join(names)})")
    return class_status(rows)


Row = tuple[Path, Grade | None, str | None]


def class_status(rows: list[Row]) -> int:
    """A class's exit status: 1 when a folder failed or could not be graded, else 3 when
    one must be rerun, else 0."""
    if any(error or graded.verdict == "FAIL" for _, graded, error in rows):
        return EXIT_FAIL
    return EXIT_RERUN if any(g.verdict == "RERUN" for _, g, _ in rows) else EXIT_PASS


def rerun_count(rows: list[Row]) -> str:
    """``N of M must rerun``: the class's folders the fidelity monitor flagged."""
    n = sum(1 for _, graded, error in rows if not error and graded.verdict == "RERUN")
    return f"{n} of {len(rows)} must rerun"


def grade_class(lab: Lab, folders: list[Path]) -> list[Row]:
    """Every folder graded (a class's results): its grade, or why it could not be read
    (one bad folder does not stop the others)."""
    rows: list[Row] = []
    for folder in folders:
        try:
            rows.append((folder, assess(lab, folder), None))
        except ConfigError as exc:
            rows.append((folder, None, str(exc)))
    return rows


def write_csv(path: Path, names: list[str], rows: list[Row]) -> None:
    """One row a results folder: its verdict (PASS, FAIL, RERUN or ERROR), each check
    PASS or FAIL, the count passed, and the notes: RERUN's reason, the failures' reasons,
    or why the folder could not be graded. The last row: ``N of M must rerun``."""
    import csv

    with path.open("w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(["folder", "verdict", *names, "passed", "total", "notes"])
        for folder, graded, error in rows:
            if error:
                writer.writerow([str(folder), "ERROR", *([""] * len(names)), 0, len(names),
                                 error])
                continue
            marks = ["PASS" if v.ok else "FAIL" for _, v in graded.checks]
            notes = [f"{n}: {v.reason}" for n, v in graded.checks if not v.ok]
            if graded.rerun:
                notes.insert(0, f"RERUN: {graded.rerun}")
            writer.writerow([str(folder), graded.verdict, *marks, graded.passed,
                             len(graded.checks), "; ".join(notes)])
        writer.writerow([rerun_count(rows)])


def add_parsers(sub) -> None:
    p = sub.add_parser(
        "check", help="grade results folders against a lab guide (labs/)",
        description="Grade results folders against a lab guide (labs/).",
        epilog="exit status: 0 every check passed; 1 a check failed (a class: a folder "
               "failed or could not be graded); 2 bad input (one line naming it); 3 RERUN: "
               "the fidelity monitor flagged the run (the host did not keep up), so it is "
               "not graded: close other programs or give the VM more vCPUs and run again")
    p.add_argument("lab", help="lab number (1-10), folder or name (see labs/README.md)")
    p.add_argument("results", nargs="+", help="the results folder of the lab's run; several: "
                                              "a class, one line each")
    p.add_argument("--csv", help="also write the class's grades as a table (one row a "
                                 "folder, one column a check)")
    p.set_defaults(func=cmd_check)
