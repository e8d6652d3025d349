"""Per-student variants of the lab guides: ``testbed start LAB --student ID`` copies a
lab's starter with the student's own seed and parameters in it; ``testbed check LAB
RESULTS --student ID`` (or ``--students ROSTER`` for a class) grades against them.

A student's values are derived from the lab and the id alone (HMAC-SHA256 of both, keyed
by the course secret in ``TESTBED_COURSE_SECRET`` when the teacher sets one), so the
check derives them again and never takes them from the student's files: a run (or an
answers file) whose parameters are not the id's fails ``student-variant``, whatever its
other checks say. What varies:

- the seed, for every lab with a scenario (``seed:``, and ``seeds:`` counted on from it);
- what a lab's ``check.py`` draws in ``student_params(draw)`` (lab 2's switch, GPU and
  plane counts, lab 9's object popularity, lab 10's fault placement), writes into the
  copy with ``personalize(folder, params)`` and reads back from a folder with
  ``student_stated(results)``; ``student_inputs(data, params)`` puts the id's values
  into what the checks read, where they read inputs the student writes (lab 2).

>>> d = Draw(2, "ada")
>>> d.pick("x", ["a", "b", "c"]) == Draw(2, "ada").pick("x", ["a", "b", "c"])
True
>>> Draw(2, "ada").between("seed", 1, 99_999) != Draw(2, "bob").between("seed", 1, 99_999)
True
>>> check_id("ada.lovelace-1")
'ada.lovelace-1'
>>> check_id("../x")  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
testbed.errors.ConfigError: --student: '../x': 1 to 40 letters, digits, ... or digit
"""

from __future__ import annotations

import csv
import hashlib
import hmac
import io
import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from testbed.errors import ConfigError
from testbed.reports import grading
from testbed.reports.grading import Grade, Lab, Results, Verdict, failed, passed
from topologies.params import clip

#: a student id: what a roster holds (a login, a matriculation number), safe as a folder name
STUDENT_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,39}")
#: the course secret: with it, nobody without it can compute a student's values
SECRET_ENV = "TESTBED_COURSE_SECRET"
#: what ``testbed start`` writes beside the starter: the id and its values
RECORD = "student.json"
#: the seeds a student's run gets (the labs' solutions were judged on seeds 1 to 4)
SEEDS = (1, 99_999)
#: a roster (CSV) larger than this is not a class list
MAX_ROSTER_BYTES = 1 << 20
#: starter files ``testbed start`` does not copy (the un-personalized starter's grade)
SKIP = ("expected-check.txt", "__pycache__")
_SEED_LINE = re.compile(r"^seed: *\d+ *$", re.M)
_SEEDS_LINE = re.compile(r"^seeds: *\[([\d, ]*)\] *$", re.M)
CHECK_NAME = "student-variant"


def check_id(text: Any, where: str = "--student") -> str:
    """``text`` if it is a student id (one line naming ``where`` otherwise)."""
    if not isinstance(text, str) or not STUDENT_ID.fullmatch(text):
        raise ConfigError(where, f"{clip(repr(text), 60)}: 1 to 40 letters, digits, '.', '_' "
                                 "or '-', starting with a letter or digit")
    return text


def course_secret() -> bytes:
    """The course secret (``TESTBED_COURSE_SECRET``), empty when none is set."""
    return os.environ.get(SECRET_ENV, "").encode()


class Draw:
    """One student's choices in one lab: each a number from HMAC-SHA256(secret, lab, id,
    name), so the same id always draws the same values (on any machine, any Python) and
    every named choice is independent of the others."""

    def __init__(self, lab: int, student: str, secret: bytes = b""):
        self.lab, self.student, self._secret = lab, check_id(student), secret

    def number(self, name: str) -> int:
        msg = f"testbed-lab/{self.lab}/{self.student}/{name}".encode()
        return int.from_bytes(hmac.new(self._secret, msg, hashlib.sha256).digest(), "big")

    def pick(self, name: str, options: Sequence):
        return options[self.number(name) % len(options)]

    def between(self, name: str, low: int, high: int) -> int:
        """An integer from ``low`` to ``high``, both included."""
        return low + self.number(name) % (high - low + 1)


@dataclass(frozen=True)
class Variant:
    """A student's values in one lab: ``params`` (``seed`` and the lab's own)."""

    lab: int
    student: str
    params: dict[str, Any] = field(default_factory=dict)
    #: derived with the course secret (TESTBED_COURSE_SECRET)
    keyed: bool = False

    def describe(self) -> str:
        return ", ".join(f"{k} {_show(v)}" for k, v in self.params.items()) or "no values"

    def record(self) -> dict:
        return {"lab": self.lab, "student": self.student, "params": self.params,
                "course_secret": self.keyed,
                "check": f"testbed check {self.lab} RESULTS --student {self.student}"}


def _show(value: Any) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} {_show(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_show(v) for v in value) + "]"
    return f"{value:g}" if isinstance(value, float) else str(value)


_MODULES: dict[tuple[Path, int], Any] = {}


def _module(lab: Lab):
    """The lab's check.py, loaded once (lab 10's placement caches its rack in it)."""
    path = lab.folder / "check.py"
    key = (path.resolve(), path.stat().st_mtime_ns)
    if key not in _MODULES:
        _MODULES[key] = lab.module()
    return _MODULES[key]


def _starter_yaml(lab: Lab) -> list[Path]:
    return sorted((lab.folder / "starter").glob("*.yaml"))


def _seeds_count(lab: Lab) -> tuple[bool, int]:
    """Whether the lab's starter scenario has a ``seed:`` line, and how many ``seeds:``."""
    seeded, count = False, 0
    for path in _starter_yaml(lab):
        text = path.read_text()
        seeded = seeded or bool(_SEED_LINE.search(text))
        m = _SEEDS_LINE.search(text)
        if m:
            count = len([s for s in m.group(1).split(",") if s.strip()])
    return seeded, count


def derive(lab: Lab, student: str, secret: bytes | None = None) -> Variant:
    """Student ``student``'s values in ``lab``: the seed (a lab with a scenario) and what
    the lab's ``student_params`` draws."""
    secret = course_secret() if secret is None else secret
    draw = Draw(lab.number, student, secret)
    params: dict[str, Any] = {}
    seeded, count = _seeds_count(lab)
    if seeded:
        params["seed"] = draw.between("seed", *SEEDS)
        if count:
            params["seeds"] = [params["seed"] + i for i in range(count)]
    own: Callable | None = getattr(_module(lab), "student_params", None)
    if own is not None:
        params.update(own(draw))
    return Variant(lab.number, student, params, keyed=bool(secret))


# --- the starter copy -------------------------------------------------------------------

def folder_name(lab: Lab, student: str) -> str:
    return f"lab{lab.number:02d}-{student}"


def start(lab: Lab, variant: Variant, out: Path) -> Path:
    """Copy ``lab``'s starter into ``out/labNN-ID/`` with the student's values written in,
    and :data:`RECORD` beside it; refuses a folder that exists and is not empty. The copy
    is made aside and moved into place, so a failure leaves nothing half made."""
    dest = out / folder_name(lab, variant.student)
    if dest.is_symlink() or (dest.exists() and (not dest.is_dir() or any(dest.iterdir()))):
        raise ConfigError("--out", f"{dest} exists and is not empty (a student's copy is "
                                   "made once; move it away to make it again)")
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=out))
    try:
        for src in sorted((lab.folder / "starter").iterdir()):
            if src.name in SKIP or src.is_symlink():
                continue
            if src.is_dir():
                shutil.copytree(src, work / src.name, ignore=shutil.ignore_patterns(*SKIP))
            else:
                shutil.copyfile(src, work / src.name)
        _write_seed(work, variant.params)
        own = getattr(_module(lab), "personalize", None)
        if own is not None:
            own(work, variant.params)
        (work / RECORD).write_text(json.dumps(variant.record(), indent=1) + "\n")
        if dest.exists():
            dest.rmdir()  # empty (checked above)
        work.rename(dest)
    finally:
        if work.exists():
            shutil.rmtree(work)
    return dest


def substitute(text: str, pattern: str, new: str, where: str) -> str:
    """``text`` with the one line matching ``pattern`` replaced by ``new``; an error when
    the starter no longer has exactly one such line (the lab's files changed)."""
    found = re.findall(pattern, text, flags=re.M)
    if len(found) != 1:
        raise RuntimeError(f"{where}: {len(found)} lines match {pattern!r}, expected 1")
    return re.sub(pattern, new.replace("\\", "\\\\"), text, count=1, flags=re.M)


def _write_seed(folder: Path, params: dict) -> None:
    if "seed" not in params:
        return
    for path in sorted(folder.glob("*.yaml")):
        text = path.read_text()
        if not _SEED_LINE.search(text):
            continue
        text = substitute(text, _SEED_LINE.pattern, f"seed: {params['seed']}", str(path))
        if "seeds" in params:
            text = substitute(text, _SEEDS_LINE.pattern,
                              f"seeds: [{', '.join(map(str, params['seeds']))}]", str(path))
        path.write_text(text)


# --- grading against a student's values -------------------------------------------------

def stated(lab: Lab, results: Results) -> dict[str, Any]:
    """The values a folder says it ran with (the run's summary.json, and what the lab's
    ``student_stated`` reads), each key of the student's values; None where absent."""
    out: dict[str, Any] = {"seed": results.summary.get("seed"),
                           "seeds": results.summary.get("seeds")}
    own = getattr(_module(lab), "student_stated", None)
    if own is not None:
        try:
            out.update(own(results))
        except (grading.Missing, KeyError, TypeError, ValueError, AttributeError,
                IndexError, OSError, ConfigError):  # not recorded, or not as a run writes
            pass  # its values count as missing
    return out


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return float(a) == float(b)
    return a == b


def _record_of(folder: Path) -> dict:
    """The folder's student.json (written by ``testbed start``), {} when none is there or
    it is not one."""
    path = folder / RECORD
    try:
        if path.is_file() and not path.is_symlink() and path.stat().st_size < 1 << 16:
            data = json.loads(path.read_text())
            return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        pass
    return {}


def expected(variant: Variant) -> dict[str, Any]:
    """What a folder of the student's must state: their values, and the seeds a run of
    theirs runs (``seeds``, else their one seed: ``testbed run --seeds`` changes them)."""
    if "seed" in variant.params and "seeds" not in variant.params:
        return {**variant.params, "seeds": [variant.params["seed"]]}
    return variant.params


def variant_verdict(lab: Lab, variant: Variant, results: Results) -> Verdict:
    """``student-variant``: the folder ran with (or answers for) the student's values."""
    said = stated(lab, results)
    wrong = [k for k, want in expected(variant).items() if not _same(said.get(k), want)]
    if not wrong:
        return passed(f"student {variant.student}: {variant.describe()} (as the "
                      f"{'answers state' if 'seed' not in variant.params else 'run used'})")
    theirs = ", ".join(f"{k} {_show(said.get(k)) if said.get(k) is not None else 'missing'}"
                       for k in wrong)
    mine = ", ".join(f"{k} {_show(expected(variant)[k])}" for k in wrong)
    hint = ""
    made = _record_of(results.folder)
    if made.get("student") not in (None, variant.student):
        hint = f" (its {RECORD} is {clip(str(made['student']), 40)}'s)"
    elif made.get("course_secret") is True and not variant.keyed:
        hint = f" (it was made with the course secret: set {SECRET_ENV} to grade it)"
    return failed(f"not student {variant.student}'s values: the folder has {theirs}; "
                  f"{variant.student}'s are {mine}: work in the copy `testbed start "
                  f"{lab.number} --student {variant.student}` made{hint}")


def assess(lab: Lab, folder: Path, variant: Variant) -> Grade:
    """``lab``'s grade of ``folder`` for one student: ``student-variant`` first, then the
    lab's checks on the student's values. A folder with another id's values is FAIL even
    when the fidelity monitor flagged it (running it again would not help)."""
    checks, results = grading.load(lab, folder)
    first = variant_verdict(lab, variant, results)
    own = getattr(_module(lab), "student_inputs", None)
    if own is not None:  # inputs the student writes: the checks read the id's instead
        results = Results(results.folder, own(results.summary, variant.params),
                          results.listed)
    verdicts = [(CHECK_NAME, first), *grading.verdicts(checks, results)]
    return Grade(verdicts, results.rerun_reason() if first.ok else None)


# --- a class: the roster ----------------------------------------------------------------

def read_roster(path: Path, need_folder: bool) -> list[tuple[str, Path | None]]:
    """A roster: a CSV file with a header, a ``student`` column and (for ``testbed
    check``) a ``folder`` column, one row a student (or a student's results folder)."""
    where = str(path)
    try:
        if path.stat().st_size > MAX_ROSTER_BYTES:
            raise ConfigError(where, f"over {MAX_ROSTER_BYTES >> 20} MB: not a class roster")
        text = path.read_text(encoding="utf-8-sig")
    except OSError as exc:
        raise ConfigError(where, exc.strerror or str(exc)) from None
    except UnicodeDecodeError:
        raise ConfigError(where, "not UTF-8 text (a CSV file: student,folder)") from None
    reader = csv.DictReader(io.StringIO(text, newline=""))
    columns = ("student", "folder") if need_folder else ("student",)
    try:
        header = reader.fieldnames or []
        rows, last = [], reader.line_num
        for row in reader:  # each row with the line it starts on
            rows.append((last + 1, row))
            last = reader.line_num
    except csv.Error as exc:
        raise ConfigError(where, f"line {reader.line_num}: not CSV ({exc})") from None
    missing = [c for c in columns if c not in header]
    if missing:
        raise ConfigError(where, f"needs a header with the columns {', '.join(columns)} "
                                 f"(missing: {', '.join(missing)})")
    if not rows:
        raise ConfigError(where, "no student in it (one row a student after the header)")
    out: list[tuple[str, Path | None]] = []
    for n, row in rows:
        student = check_id((row.get("student") or "").strip(), f"{where}: line {n}: student")
        folder = None
        if need_folder:
            text = (row.get("folder") or "").strip()
            if not text or "\0" in text:
                raise ConfigError(f"{where}: line {n}: folder", "empty (the student's "
                                                                 "results folder)")
            folder = Path(text)
        out.append((student, folder))
    return out


def _key(folder: Path) -> Path:
    return Path(os.path.abspath(folder))


def roster_ids(path: Path) -> dict[Path, str]:
    """Results folder -> student id, from a roster; a folder given twice with two ids is
    refused."""
    ids: dict[Path, str] = {}
    for student, folder in read_roster(path, need_folder=True):
        key = _key(folder)
        if ids.setdefault(key, student) != student:
            raise ConfigError(str(path), f"{folder} is given for {ids[key]} and {student}")
    return ids


def grader(lab: Lab, args, folders: list[Path]) -> Callable[[Path], Grade] | None:
    """How ``testbed check`` grades each folder when ``--student`` or ``--students`` is
    given (None: as the lab does without ids)."""
    student, roster = getattr(args, "student", None), getattr(args, "students", None)
    if student is None and roster is None:
        return None
    if student is not None and roster is not None:
        raise ConfigError("--student", "give one student (--student) or a class roster "
                                       "(--students), not both")
    secret = course_secret()
    if student is not None:
        if len(folders) > 1:
            raise ConfigError("--student", "grades one results folder; for a class, give "
                                           "--students ROSTER (student,folder)")
        variant = derive(lab, check_id(student), secret)
        return lambda folder: assess(lab, folder, variant)
    ids = roster_ids(Path(roster))
    path = str(roster)

    def grade_one(folder: Path) -> Grade:
        sid = ids.get(_key(folder))
        if sid is None:
            raise ConfigError("RESULTS", f"{folder} is not in the roster {path}")
        return assess(lab, folder, derive(lab, sid, secret))

    return grade_one


def add_check_options(p) -> None:
    """``testbed check``'s options for per-student variants."""
    p.add_argument("--student", metavar="ID",
                   help="grade against this student's own values (the seed and the lab's "
                        "parameters testbed start wrote into their copy), derived again "
                        f"from the id (and {SECRET_ENV} when the course has one); a folder "
                        "with other values fails student-variant")
    p.add_argument("--students", metavar="ROSTER",
                   help="a class: a CSV file with the columns student,folder; each folder "
                        "graded against its student's values")


# --- testbed start ----------------------------------------------------------------------

def cmd_start(args) -> int:
    lab = grading.find(args.lab)
    out = Path(args.out)
    if args.student is None and args.students is None:
        raise ConfigError("--student", "give the student's id (--student ID), or a class "
                                       "roster (--students ROSTER); without an id, copy the "
                                       "starter as the lab's guide says")
    if args.student is not None and args.students is not None:
        raise ConfigError("--student", "give one student (--student) or a class roster "
                                       "(--students), not both")
    if args.student is not None:
        students = [check_id(args.student)]
    else:
        students = list(dict.fromkeys(s for s, _ in read_roster(Path(args.students), False)))
    if out.exists() and not out.is_dir():
        raise ConfigError("--out", f"{out} is not a folder")
    secret = course_secret()
    variants = [derive(lab, s, secret) for s in students]
    for v in variants:  # refuse before anything is written
        dest = out / folder_name(lab, v.student)
        if dest.is_symlink() or (dest.exists() and (not dest.is_dir() or any(dest.iterdir()))):
            raise ConfigError("--out", f"{dest} exists and is not empty (a student's copy "
                                       "is made once; move it away to make it again)")
    keyed = " (with the course secret)" if secret else ""
    for v in variants:
        dest = start(lab, v, out)
        print(f"{dest}: {lab.title}, student {v.student}{keyed}: {v.describe()}")
    if len(variants) == 1:
        print(f"grade it: testbed check {lab.number} RESULTS --student {variants[0].student}")
    else:
        print(f"{len(variants)} copies; grade the class: testbed check {lab.number} "
              "FOLDERS... --students ROSTER (columns student,folder)")
    return 0


def add_parsers(sub) -> None:
    p = sub.add_parser(
        "start", help="copy a lab's starter for a student, with the student's own seed "
                      "and parameters",
        description="Copy a lab's starter files into OUT/labNN-ID/ with the values the "
                    "student's id derives (the seed, and the lab's own: lab 2's switches "
                    "and GPUs, lab 9's object popularity, lab 10's fault placement), and "
                    f"{RECORD} beside them. The same id always gets the same values; "
                    f"with {SECRET_ENV} set, only who knows the secret can compute them.",
        epilog="exit status:\n  0  the copies were made\n"
               "  2  bad input, one line naming it: an unknown lab, an id that is not 1 to\n"
               "     40 letters, digits, '.', '_' or '-', a malformed roster, or a copy\n"
               "     that exists already (nothing is written then)")
    p.add_argument("lab", help="lab number (1-10), folder or name (see labs/README.md)")
    p.add_argument("--student", metavar="ID", help="the student's id (a login or a "
                                                   "matriculation number)")
    p.add_argument("--students", metavar="ROSTER", help="a class: a CSV file with a "
                                                        "student column; one copy each")
    p.add_argument("--out", default="my-labs", help="where the copy goes (default: "
                                                    "my-labs)")
    p.set_defaults(func=cmd_start)
