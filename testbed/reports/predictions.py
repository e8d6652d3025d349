"""Predictions graded: the guide's "predict" questions answered before the run, each
graded against what the run measured (``testbed check LAB RESULTS --predictions FILE``).

A lab's ``check.py`` lists how its questions are graded in ``PREDICTIONS``: a
:class:`Number` (a figure with its unit, right within the tolerance the guide states), a
:class:`Choice` (one of the listed words, right when it is the one the run shows) or a
:class:`Diagnosis` (a fault the student was not told the kind of: the layer that repairs
it, and a figure of the run that shows it). Each takes the run's measurement from a
:class:`~testbed.reports.grading.Results`. The student's file
(``labs/labNN_*/starter/predictions.yaml``, copied and filled) holds each question's id,
words, kind and answer; an answer left empty is graded UNANSWERED, never PASS.

>>> n = Number("2", lambda r: 3.73, unit="x", within=0.25)
>>> n.grade(3, None).status, n.grade(10, None).status, n.grade(None, None).status
('PASS', 'FAIL', 'UNANSWERED')
>>> Choice("1", lambda r: "stays", ("down", "stays", "up")).grade("up", None).reason
'predicted up, the run shows stays'
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from testbed.core import scenario
from testbed.errors import ConfigError
from testbed.reports.grading import Lab, Missing, Results

#: the file a results folder holds its student's predictions in (a class's folders each
#: have their own), when ``--predictions`` is not given
FILENAME = "predictions.yaml"
STATUSES = ("PASS", "FAIL", "UNANSWERED")


@dataclass(frozen=True)
class Graded:
    """One prediction's verdict: PASS, FAIL or UNANSWERED, and why (with the figures)."""

    id: str
    status: str
    reason: str

    @property
    def name(self) -> str:
        return f"predict-{self.id}"


def _fmt(value: float) -> str:
    return f"{value:,.3g}" if abs(value) < 1000 else f"{value:,.0f}"


def _right(tolerance: str) -> str:
    return tolerance if tolerance == "exactly" else f"within {tolerance}"


@dataclass(frozen=True)
class Number:
    """A figure with its unit: right when within ``within`` (a share of the measured
    value, 0.25 = 25 %) or ``within_abs`` (in the unit) of the run's measurement."""

    id: str
    measure: Callable[[Results], float]
    unit: str = ""
    within: float | None = None
    within_abs: float | None = None
    kind: str = field(default="number", init=False)

    def tolerance(self) -> str:
        parts = []
        if self.within is not None:
            parts.append(f"{self.within:.0%}")
        if self.within_abs:
            parts.append(f"{_fmt(self.within_abs)} {self.unit}".strip())
        return " or ".join(parts) or "exactly"

    def check_answer(self, answer: Any, where: str) -> None:
        if answer is None:
            return
        if isinstance(answer, bool) or not isinstance(answer, (int, float)) \
                or not math.isfinite(answer):
            raise ConfigError(where, f"must be a number ({self.unit or 'no unit'}) or left "
                                     f"empty, got {answer!r}")

    def grade(self, answer: Any, r: Results | None) -> Graded:
        if answer is None:
            return Graded(self.id, "UNANSWERED", "no answer given")
        measured = float(self.measure(r))
        gap = abs(answer - measured)
        ok = (self.within is not None and gap <= self.within * abs(measured)) or \
             (self.within_abs is not None and gap <= self.within_abs) or gap == 0
        unit = f" {self.unit}" if self.unit else ""
        return Graded(self.id, "PASS" if ok else "FAIL",
                      f"predicted {_fmt(answer)}{unit}, the run measured {_fmt(measured)}"
                      f"{unit} (right {_right(self.tolerance())})")


@dataclass(frozen=True)
class Choice:
    """One of the listed words: right when it is the one the run's measurement shows
    (``measure`` returns that word, computed from the run)."""

    id: str
    measure: Callable[[Results], str]
    choices: tuple[str, ...]
    kind: str = field(default="choice", init=False)

    def check_answer(self, answer: Any, where: str) -> None:
        if answer is not None and answer not in self.choices:
            raise ConfigError(where, f"must be one of {', '.join(self.choices)} or left "
                                     f"empty, got {answer!r}")

    def grade(self, answer: Any, r: Results | None) -> Graded:
        if answer is None:
            return Graded(self.id, "UNANSWERED", "no answer given")
        shown = self.measure(r)
        return Graded(self.id, "PASS" if answer == shown else "FAIL",
                      f"predicted {answer}, the run shows {shown}")


@dataclass(frozen=True)
class Diagnosis:
    """A fault whose kind the student was not told, in variant ``variant``: the layer
    that repairs it (one of ``layers``) and the figure of the run that shows it (a field
    of the fault's record in summary.json and its value, as the run measured it).

    ``fault`` gives the run's record of the fault (a dict, its ``fault`` the kind);
    ``layer_of`` maps a kind to the layers that repair it; ``evidence`` maps a kind to the
    record's fields that tell it apart. The cited value must match the run's within
    ``within`` (numbers) or exactly (words)."""

    id: str
    variant: str
    fault: Callable[[Results, str], dict]
    layers: tuple[str, ...]
    layer_of: dict[str, tuple[str, ...]]
    evidence: dict[str, tuple[str, ...]]
    within: float = 0.05
    kind: str = field(default="diagnosis", init=False)

    def check_answer(self, answer: Any, where: str) -> None:
        if answer is None:
            return
        if not isinstance(answer, dict):
            raise ConfigError(where, "must be a mapping with layer, field and value, got "
                                     f"{type(answer).__name__}")
        for key in answer:
            if key not in ("layer", "field", "value"):
                raise ConfigError(f"{where}.{key}", "unknown key (known: layer, field, "
                                                    "value)")
        layer = answer.get("layer")
        if layer is not None and layer not in self.layers:
            raise ConfigError(f"{where}.layer", f"must be one of {', '.join(self.layers)}, "
                                                f"got {layer!r}")
        cited = answer.get("field")
        if cited is not None and not isinstance(cited, str):
            raise ConfigError(f"{where}.field", f"must be a field name of the fault's record, "
                                                f"got {cited!r}")
        value = answer.get("value")
        if value is not None and (isinstance(value, (bool, dict, list))
                                  or (isinstance(value, float) and not math.isfinite(value))):
            raise ConfigError(f"{where}.value", f"must be a number or a word, got {value!r}")

    def grade(self, answer: Any, r: Results | None) -> Graded:
        answer = answer or {}
        if answer.get("layer") is None:
            return Graded(self.id, "UNANSWERED", "no layer chosen")
        record = self.fault(r, self.variant)
        kind = record.get("fault")
        right = self.layer_of.get(kind, ())
        problems = []
        if answer["layer"] not in right:
            problems.append(f"layer {answer['layer']} does not repair this fault")
        cited, value = answer.get("field"), answer.get("value")
        telling = self.evidence.get(kind, ())
        if cited is None or value is None:
            problems.append("no measured figure cited (field and value)")
        elif cited not in record:
            problems.append(f"the fault's record has no field {cited!r}")
        elif cited not in telling:
            problems.append(f"{cited} does not tell this fault apart "
                            f"(its record's telling fields: {', '.join(telling)})")
        elif not _matches(value, record[cited], self.within):
            problems.append(f"{cited} cited as {value!r}, the run measured "
                            f"{record[cited]!r}")
        if problems:
            return Graded(self.id, "FAIL", f"variant {self.variant}: " + "; ".join(problems))
        shown = "none" if record[cited] is None else record[cited]
        return Graded(self.id, "PASS", f"variant {self.variant}: {answer['layer']}, shown by "
                                       f"{cited} = {shown} in the run")


def _matches(cited: Any, measured: Any, within: float) -> bool:
    """A cited figure against the run's: numbers within ``within`` (or 1 for counts
    near zero), words exactly, an empty record field as ``none``/``never``."""
    if measured is None:
        return cited in (None, "none", "never", "null")
    if isinstance(measured, (int, float)) and not isinstance(measured, bool):
        if isinstance(cited, bool) or not isinstance(cited, (int, float)):
            return False
        return abs(cited - measured) <= max(within * abs(measured), 1.0 if
                                             isinstance(measured, int) else 0.0)
    if isinstance(measured, list):
        return str(cited) in [str(m) for m in measured] or str(cited) == ", ".join(
            str(m) for m in measured)
    return str(cited) == str(measured)


Question = Number | Choice | Diagnosis


def questions(lab: Lab) -> list[Question]:
    """The lab's graded predictions (its check.py's ``PREDICTIONS``; none: an empty list)."""
    return list(getattr(lab.module(), "PREDICTIONS", ()))


def read(lab: Lab, path: Path) -> dict[str, Any]:
    """A predictions file's answers by id, checked against the lab's questions: every
    problem one :class:`ConfigError` naming the field (read with the scenarios' bounded
    YAML reader)."""
    known = {q.id: q for q in questions(lab)}
    if not known:
        raise ConfigError("--predictions", f"lab {lab.number} grades no predictions")
    if not path.is_file():
        raise ConfigError("--predictions", f"{path}: no such file")
    data = scenario.read(path)
    where = path.name
    if not isinstance(data, dict):
        raise ConfigError(where, "must be a mapping with a predictions: list")
    for key in data:
        if key not in ("lab", "predictions"):
            raise ConfigError(f"{where}: {key}", "unknown key (known: lab, predictions)")
    if data.get("lab") is not None and data["lab"] != lab.number:
        raise ConfigError(f"{where}: lab", f"this file is for lab {data['lab']!r}, graded "
                                           f"against lab {lab.number}")
    entries = data.get("predictions")
    if not isinstance(entries, list):
        raise ConfigError(f"{where}: predictions", "must be a list of questions (id, "
                                                   "question, kind, answer)")
    answers: dict[str, Any] = {}
    for i, entry in enumerate(entries):
        at = f"{where}: predictions[{i}]"
        if not isinstance(entry, dict):
            raise ConfigError(at, "must be a mapping (id, question, kind, answer)")
        qid = entry.get("id")
        qid = str(qid) if isinstance(qid, (int, str)) and not isinstance(qid, bool) else qid
        if qid not in known:
            raise ConfigError(f"{at}.id", f"no question {qid!r} in lab {lab.number} "
                                          f"(known: {', '.join(known)})")
        if qid in answers:
            raise ConfigError(f"{at}.id", f"question {qid} answered twice")
        q = known[qid]
        if entry.get("kind") not in (None, q.kind):
            raise ConfigError(f"{at}.kind", f"question {qid} is a {q.kind}, not "
                                            f"{entry.get('kind')!r}")
        for key in entry:
            if key not in ("id", "question", "kind", "unit", "choices", "answer", "why"):
                raise ConfigError(f"{at}.{key}", "unknown key (known: id, question, kind, "
                                                 "unit, choices, answer, why)")
        answer = entry.get("answer")
        if isinstance(answer, str) and not answer.strip():
            answer = None
        q.check_answer(answer, f"{at}.answer")
        answers[qid] = answer
    return answers


def grade(lab: Lab, results: Results, path: Path) -> list[Graded]:
    """Every question of the lab graded from ``path``'s answers against ``results``, in
    the lab's order; a question the file leaves out or empty is UNANSWERED."""
    answers = read(lab, path)
    out = []
    for q in questions(lab):
        try:
            out.append(q.grade(answers.get(q.id), results))
        except Missing as exc:
            out.append(Graded(q.id, "FAIL", f"the run cannot grade it: {exc}"))
        except (KeyError, TypeError, ZeroDivisionError) as exc:
            out.append(Graded(q.id, "FAIL", f"the results lack a field this prediction "
                                            f"reads ({exc!r})"))
    return out


def find_file(given: str | None, folder: Path) -> Path | None:
    """The predictions file for ``folder``: the one given, else ``folder``'s own
    predictions.yaml if it has one, else None (nothing to grade)."""
    if given:
        return Path(given)
    own = folder / FILENAME
    return own if own.is_file() else None


def report(graded: list[Graded]) -> str:
    """The lines ``testbed check`` prints under the checks: one a prediction, a count."""
    lines = [f"{g.status} {g.name}: {g.reason}" for g in graded]
    right = sum(g.status == "PASS" for g in graded)
    empty = sum(g.status == "UNANSWERED" for g in graded)
    return "\n".join([*lines, f"Predictions: {right}/{len(graded)} right, {empty} "
                              "unanswered"]) + "\n"


def grade_folder(lab: Lab, folder: Path, given: str | None = None) -> list[Graded] | None:
    """The predictions of one results folder graded (:func:`find_file`), or None when it
    has none; :class:`ConfigError` for a bad file."""
    from testbed.reports.grading import load

    path = find_file(given, folder)
    if path is None:
        return None
    return grade(lab, load(lab, folder)[1], path)


def columns(lab: Lab) -> list[str]:
    """The class table's columns for the lab's predictions (``predict-ID``)."""
    return [f"predict-{q.id}" for q in questions(lab)]


def marks(graded: list[Graded] | str | None) -> str:
    """A class line's tail: the folder's predictions, each PASS, FAIL or UNANSWERED."""
    if graded is None:
        return ""
    if isinstance(graded, str):
        return f"  predictions ERROR {graded}"
    right = sum(g.status == "PASS" for g in graded)
    return f"  predictions {right}/{len(graded)} " + " ".join(g.status for g in graded)


def table_cells(names: list[str], graded: list[Graded] | str | None) -> tuple[list[str], str]:
    """A class row's prediction cells (a ``predict-ID`` column each: PASS, FAIL,
    UNANSWERED, or empty when the folder has no predictions file, then the count right)
    and its notes (what was wrong, or why the file is bad)."""
    if isinstance(graded, list):
        notes = "; ".join(f"{g.name}: {g.reason}" for g in graded if g.status != "PASS")
        return [g.status for g in graded] + [str(sum(g.status == "PASS" for g in graded))], notes
    return [""] * (len(names) + 1), f"predictions: {graded}" if isinstance(graded, str) else ""
