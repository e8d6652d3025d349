"""Grading of the lab guides in ``labs/``: ``testbed check LAB RESULTS``.

Each guide is a folder ``labs/labNN_name/`` whose ``check.py`` declares what it grades:
``NEEDS``, the file a results folder must hold (``summary.json`` for a ``testbed run``
folder), and ``CHECKS``, a list of functions that each take a :class:`Results` and
return a :class:`Verdict` (passed or not, and why, with the measured numbers). A check
that finds a field missing raises :class:`Missing`, which grades as a failure naming
the field. Checks read what a run measured (summary.json and the record files it
names); a design task's check may run the project's own validators instead.

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


Check = Callable[[Results], Verdict]


def host_kept_up(r: Results) -> Verdict:
    """The fidelity monitor flagged no variant (else the host, not the network, may have
    made the numbers)."""
    flagged = r.flagged()
    if flagged:
        return failed(f"flagged by the fidelity monitor: {', '.join(flagged)} (the host did "
                      "not keep up: rerun with nothing else busy)")
    return passed("no variant flagged by the fidelity monitor")


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


def grade(lab: Lab, folder: Path) -> list[tuple[str, Verdict]]:
    """Every check of ``lab`` on ``folder``, in order, each with its verdict."""
    checks, results = load(lab, folder)
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


def report(lab: Lab, verdicts: list[tuple[str, Verdict]]) -> str:
    """What ``testbed check`` prints for one folder: a line a check, then the count."""
    lines = [f"{'PASS' if v.ok else 'FAIL'} {name}: {v.reason}" for name, v in verdicts]
    good = sum(v.ok for _, v in verdicts)
    return "\n".join([*lines, f"{lab.title}: {good}/{len(verdicts)} checks passed"]) + "\n"


def cmd_check(args) -> int:
    from testbed.reports import predictions

    lab = find(args.lab)
    folders = [Path(f) for f in args.results]
    given = getattr(args, "predictions", None)
    if given and len(folders) > 1:
        raise ConfigError("--predictions", "grades one results folder; for a class, put "
                                           f"each student's {predictions.FILENAME} in their "
                                           "results folder")
    if len(folders) == 1 and not args.csv:
        verdicts = grade(lab, folders[0])
        guesses = predictions.grade_folder(lab, folders[0], given)
        print(report(lab, verdicts), end="")
        if guesses is not None:
            print(predictions.report(guesses), end="")
        right = all(g.status == "PASS" for g in guesses or ())
        return 0 if all(v.ok for _, v in verdicts) and right else 1
    rows = grade_class(lab, folders)
    names = [check_name(c) for c in lab.module().CHECKS]
    guessed = {folder: _class_predictions(lab, folder, given) for folder, _, e in rows
               if not e}
    width = max(len(str(f)) for f in folders)
    print(f"{lab.title}: {len(folders)} results folders")
    for folder, verdicts, error in rows:
        if error:
            print(f"{str(folder):<{width}}  ERROR {error}")
            continue
        good = sum(v.ok for _, v in verdicts)
        marks = " ".join("PASS" if v.ok else "FAIL" for _, v in verdicts)
        print(f"{str(folder):<{width}}  {good}/{len(verdicts)}  {marks}"
              + predictions.marks(guessed.get(folder)))
    if args.csv:
        write_csv(Path(args.csv), names, rows)
        predictions.add_columns(Path(args.csv), lab, guessed)
        print(f"{args.csv}: one row a folder, one column a check ({', '.join(names)})")
    right = all(g.status == "PASS" for gs in guessed.values() if isinstance(gs, list)
                for g in gs) and not any(isinstance(gs, str) for gs in guessed.values())
    return 0 if right and all(not e and all(v.ok for _, v in vs) for _, vs, e in rows) else 1


def _class_predictions(lab: Lab, folder: Path, given: str | None):
    """A class folder's graded predictions, None (it has none) or why its file is bad."""
    from testbed.reports import predictions

    try:
        return predictions.grade_folder(lab, folder, given)
    except ConfigError as exc:
        return str(exc)


def grade_class(lab: Lab, folders: list[Path]) -> list[tuple[Path, list, str | None]]:
    """Every folder graded (a class's results): its verdicts, or why it could not be read
    (one bad folder does not stop the others)."""
    rows = []
    for folder in folders:
        try:
            rows.append((folder, grade(lab, folder), None))
        except ConfigError as exc:
            rows.append((folder, [], str(exc)))
    return rows


def write_csv(path: Path, names: list[str], rows: list[tuple[Path, list, str | None]]) -> None:
    """One row a results folder: each check PASS or FAIL, the count passed, and the
    reasons of the failures (or why the folder could not be graded)."""
    import csv

    with path.open("w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(["folder", *names, "passed", "total", "notes"])
        for folder, verdicts, error in rows:
            if error:
                writer.writerow([str(folder), *([""] * len(names)), 0, len(names), error])
                continue
            marks = ["PASS" if v.ok else "FAIL" for _, v in verdicts]
            notes = "; ".join(f"{n}: {v.reason}" for n, v in verdicts if not v.ok)
            writer.writerow([str(folder), *marks, sum(v.ok for _, v in verdicts),
                             len(verdicts), notes])


def add_parsers(sub) -> None:
    from testbed.reports import predictions

    p = sub.add_parser("check", help="grade results folders against a lab guide (labs/)")
    p.add_argument("lab", help="lab number (1-10), folder or name (see labs/README.md)")
    p.add_argument("results", nargs="+", help="the results folder of the lab's run; several: "
                                              "a class, one line each")
    p.add_argument("--csv", help="also write the class's grades as a table (one row a "
                                 "folder, one column a check, one a prediction)")
    p.add_argument("--predictions", metavar="FILE",
                   help="the student's filled predictions file (the lab's "
                        "starter/predictions.yaml, answered before the run), graded against "
                        "the run's measurements beside the checks; without it, RESULTS/"
                        f"{predictions.FILENAME} is graded when the folder has one (a "
                        "class: each folder its own); an unanswered question is never PASS")
    p.set_defaults(func=cmd_check)
