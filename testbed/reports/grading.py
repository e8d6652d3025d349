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

import csv
import importlib.util
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from types import ModuleType

from testbed import REPO
from testbed.core import digest, layout
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
    """A results folder: its summary.json (or the lab's ``NEEDS`` file) and records.
    ``listed``: the folder's digest (path -> SHA-256, :mod:`testbed.core.digest`); each
    record read is checked against it."""

    def __init__(self, folder: Path, summary: dict | None = None,
                 listed: dict[str, str] | None = None):
        self.folder = folder
        self.summary = summary if summary is not None else {}
        self.listed = listed

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
        if not inside(path, self.folder):
            raise ConfigError("RESULTS", f"{path}: outside the results folder {self.folder}")
        rel = path.relative_to(self.folder).as_posix()
        if self.listed is not None and (rel in self.listed or path.is_symlink() or
                                        path.exists()):
            digest.check(self.folder, self.listed, rel)  # the run's file, as it wrote it
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
        return [r.get("name") for r in self.runs()
                if isinstance(r.get("fidelity"), dict) and r["fidelity"].get("ok") is False]


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
    #: the graded predictions (testbed.reports.predictions.Graded, each PASS, FAIL or
    #: UNANSWERED), why the predictions file is bad, or None when there is none
    predictions: list | str | None = None

    @property
    def verdict(self) -> str:
        """RERUN (whatever the rest says); PASS when every check passed and every
        prediction is right; else FAIL."""
        if self.rerun:
            return "RERUN"
        right = self.predictions is None or (
            isinstance(self.predictions, list) and
            all(g.status == "PASS" for g in self.predictions))
        return "PASS" if right and all(v.ok for _, v in self.checks) else "FAIL"

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


#: a summary.json larger than this is not one a run wrote (real ones: tens of KB)
MAX_SUMMARY_BYTES = 16 << 20


def inside(path: Path, folder: Path) -> bool:
    """``path``, links resolved, lies in ``folder``."""
    return path.resolve().is_relative_to(folder.resolve())


def _no_constant(name: str):
    raise ValueError(f"{name} is not a number JSON allows")


def _finite(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise ValueError(f"{text[:24]} is too large a number")
    return value


def read_summary(path: Path) -> dict:
    """A run's summary.json, bounded: at most MAX_SUMMARY_BYTES, strict JSON (no NaN, no
    infinite or 4,300-digit number, no nesting deep enough to exhaust the stack), an
    object whose ``runs`` are objects with a name and, where given, a ``dir`` inside the
    results folder; every problem one line naming the field."""
    where = str(path)
    if path.stat().st_size > MAX_SUMMARY_BYTES:
        raise ConfigError(where, f"over {MAX_SUMMARY_BYTES >> 20} MB: not a run's summary")
    try:
        data = json.loads(path.read_bytes(), parse_constant=_no_constant,
                          parse_float=_finite)
    except (ValueError, RecursionError) as exc:  # JSON, UTF-8, number and depth errors
        raise ConfigError(where, f"not JSON a run writes ({str(exc)[:120]})") from None
    if not isinstance(data, dict):
        raise ConfigError(where, f"must be a JSON object, got {type(data).__name__}")
    runs = data.get("runs", [])
    if not isinstance(runs, list):
        raise ConfigError(f"{where}: runs", f"must be a list, got {type(runs).__name__}")
    folder = path.parent
    for i, run in enumerate(runs):
        field = f"{where}: runs[{i}]"
        if not isinstance(run, dict) or not isinstance(run.get("name"), str):
            raise ConfigError(field, "must be an object with a name (a string)")
        fid = run.get("fidelity")
        if fid is not None and not (isinstance(fid, dict) and
                                    isinstance(fid.get("ok", True), bool)):
            raise ConfigError(f"{field}.fidelity", "must be an object whose ok is true or "
                                                   "false")
        seeds = run.get("seeds")
        if seeds is not None and not (isinstance(seeds, list) and
                                      all(isinstance(e, dict) for e in seeds)):
            raise ConfigError(f"{field}.seeds", "must be a list of objects")
        for entry in [run, *(seeds or [])]:
            rel = entry.get("dir", f"{layout.VARIANTS}/{run['name']}")
            if not isinstance(rel, str) or not rel or Path(rel).is_absolute() or \
                    ".." in Path(rel).parts or "\0" in rel or \
                    not inside(folder / rel, folder):
                raise ConfigError(f"{field}.dir", f"{str(rel)[:80]!r} leaves the results "
                                                  "folder (a variant's folder is inside it)")
    return data


def load(lab: Lab, folder: Path) -> tuple[list[Check], Results]:
    """The lab's checks and the results folder they grade; :class:`ConfigError` when the
    folder lacks the file the lab needs, its digest does not match its files, or the file
    is malformed. A run's folder (``summary.json``) must carry the digest the run wrote."""
    module = lab.module()
    needs = getattr(module, "NEEDS", layout.SUMMARY)
    path = folder / needs
    if not folder.is_dir():
        raise ConfigError("RESULTS", f"{folder}: no such folder")
    if not path.is_file():
        raise ConfigError("RESULTS", f"{folder} has no {needs} "
                                     f"({getattr(module, 'NEEDS_HINT', 'a testbed run folder')})")
    if needs != layout.SUMMARY:  # a design task's own file (lab 2: answers.yaml)
        return list(module.CHECKS), Results(folder, module.read(path))
    listed = digest.read(folder)
    digest.check(folder, listed, layout.SUMMARY)
    if layout.MANIFEST in listed or (folder / layout.MANIFEST).exists():
        digest.check(folder, listed, layout.MANIFEST)
    return list(module.CHECKS), Results(folder, read_summary(path), listed)


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
        except (KeyError, TypeError, ValueError, AttributeError, IndexError, OSError,
                ArithmeticError, RecursionError) as exc:  # a record of another shape
            v = failed(f"a record this check reads is not as a run writes it "
                       f"({type(exc).__name__}: {str(exc)[:120]})")
        out.append((check_name(check), v))
    return out


verdicts = _verdicts  # public: testbed.reports.students grades a student's folder with it


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
    from testbed.reports import live_checks, predictions, rerun, students

    lab = find(args.lab)
    if (status := rerun.dispatch(args, lab)) is not None:  # --rerun: submissions run again
        return status
    if live_checks.wanted(args):
        return live_checks.cmd_check_live(lab, args.live, args.live_checks)
    folders = [Path(f) for f in args.results]
    by_id = students.grader(lab, args, folders)  # --student, --students: each id's values
    assess_one = by_id or (lambda folder: assess(lab, folder))
    given = getattr(args, "predictions", None)
    if given and len(folders) > 1:
        raise ConfigError("--predictions", "grades one results folder; for a class, put "
                                           f"each student's {predictions.FILENAME} in their "
                                           "results folder")
    if len(folders) == 1 and not args.csv:
        graded = assess_one(folders[0])
        graded = replace(graded, predictions=predictions.grade_folder(lab, folders[0], given))
        print(report(lab, graded), end="")
        if graded.predictions is not None:
            print(predictions.report(graded.predictions), end="")
        return graded.exit_status
    rows = [(folder, graded if error else
             replace(graded, predictions=_class_predictions(lab, folder, given)), error)
            for folder, graded, error in grade_class(lab, folders, assess_one)]
    names = [*([students.CHECK_NAME] if by_id else []),
             *(check_name(c) for c in lab.module().CHECKS)]
    width = max(len(str(f)) for f in folders)
    print(f"{lab.title}: {len(folders)} results folders")
    for folder, graded, error in rows:
        if error:
            print(f"{str(folder):<{width}}  ERROR {error}")
            continue
        marks = " ".join("PASS" if v.ok else "FAIL" for _, v in graded.checks)
        print(f"{str(folder):<{width}}  {graded.verdict:<5}  {graded.passed}/"
              f"{len(graded.checks)}  {marks}" + predictions.marks(graded.predictions))
    print(rerun_count(rows))
    if args.csv:
        write_csv(Path(args.csv), names, rows, predictions.columns(lab))
        print(f"{args.csv}: one row a folder, its verdict, one column a check "
              f"({', '.join(names)}), then how many must rerun")
    return class_status(rows)


def _class_predictions(lab: Lab, folder: Path, given: str | None):
    """A class folder's graded predictions, None (it has none) or why its file is bad."""
    from testbed.reports import predictions

    try:
        return predictions.grade_folder(lab, folder, given)
    except ConfigError as exc:
        return str(exc)


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


def grade_class(lab: Lab, folders: list[Path],
                assess_one: Callable[[Path], Grade] | None = None) -> list[Row]:
    """Every folder graded (a class's results): its grade, or why it could not be read
    (one bad folder does not stop the others). ``assess_one``: how a folder is graded
    (default :func:`assess`; a class with student ids grades each against its own)."""
    rows: list[Row] = []
    for folder in folders:
        try:
            rows.append((folder, (assess_one or (lambda f: assess(lab, f)))(folder), None))
        except ConfigError as exc:
            rows.append((folder, None, str(exc)))
        except Exception as exc:  # noqa: BLE001 - a check's own bug: the class's other rows
            rows.append((folder, None, f"the grader failed on this folder "
                                       f"({type(exc).__name__}: {str(exc)[:160]})"))
    return rows


def write_csv(path: Path, names: list[str], rows: list[Row],
              predicted: list[str] = ()) -> None:
    """One row a results folder: its verdict (PASS, FAIL, RERUN or ERROR), each check
    PASS or FAIL, the count passed, and the notes: RERUN's reason, the failures' reasons,
    or why the folder could not be graded; then a column a prediction (``predicted``) and
    the count right; a last row, ``N of M must rerun``."""
    from testbed.reports.predictions import table_cells

    tail = [*predicted, "predictions_right"] if predicted else []
    with path.open("w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(["folder", "verdict", *names, "passed", "total", "notes", *tail])
        for folder, graded, error in rows:
            cells, more = table_cells(predicted, graded and graded.predictions)
            cells = cells if predicted else []
            if error:
                writer.writerow([str(folder), "ERROR", *([""] * len(names)), 0, len(names),
                                 error, *cells])
                continue
            marks = ["PASS" if v.ok else "FAIL" for _, v in graded.checks]
            notes = [f"{n}: {v.reason}" for n, v in graded.checks if not v.ok]
            if graded.rerun:
                notes.insert(0, f"RERUN: {graded.rerun}")
            if more and predicted:
                notes.append(more)
            writer.writerow([str(folder), graded.verdict, *marks, graded.passed,
                             len(graded.checks), "; ".join(notes), *cells])
        writer.writerow([rerun_count(rows)])


def add_parsers(sub) -> None:
    from testbed.reports import live_checks, predictions, rerun, students

    p = sub.add_parser(
        "check", help="grade results folders against a lab guide (labs/)",
        description="Grade results folders against a lab guide (labs/).",
        epilog="exit status:\n"
               "  0  every check passed\n"
               "  1  a check failed (a class: a folder failed or could not be graded)\n"
               "  2  bad input, one line naming it: an unknown lab, a malformed folder, or\n"
               "     files changed since the run wrote its digest.json\n"
               "  3  RERUN: the fidelity monitor flagged the run (the host did not keep up),\n"
               "     so it is not graded: close other programs or give the VM more vCPUs,\n"
               "     then run the lab again")
    p.add_argument("lab", help="lab number (1-10), folder or name (see labs/README.md)")
    p.add_argument("results", nargs="*", help="the results folder of the lab's run; several: "
                                              "a class, one line each")
    p.add_argument("--csv", help="also write the class's grades as a table (one row a "
                                 "folder, one column a check, one a prediction)")
    p.add_argument("--predictions", metavar="FILE",
                   help="the student's filled predictions file (the lab's "
                        "starter/predictions.yaml, answered before the run), graded against "
                        "the run's measurements beside the checks; without it, RESULTS/"
                        f"{predictions.FILENAME} is graded when the folder has one (a "
                        "class: each folder its own); an unanswered question is never PASS")
    students.add_check_options(p)
    live_checks.add_arguments(p)
    rerun.add_arguments(p)
    p.set_defaults(func=cmd_check)
