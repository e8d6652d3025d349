"""``testbed check LAB --rerun SUBMISSION...``: the grader runs each student's scenario again.

A submission is what a student hands in: a folder with the lab's scenario file (filled
in), for a lab whose task is code the student's copy of the lab's plug-in file (lab 3:
``placement.py``), and optionally the filled ``predictions.yaml``; or the scenario file
alone. Each is checked first, running no code (:func:`read_submission`): the scenario is
the lab's (its name, kind and variants), it names no plug-in the lab does not ship and no
``command`` workload. Then a queue runs them one at a time on the grader's machine, each
with the grader's seed and the lab's duration, each run a ``testbed run`` process of its
own, and grades the folder that run wrote (RERUN when the fidelity monitor flagged it).

The queue's folder keeps a state file (``queue.json``): called again with the same
arguments, it reads back the grade of every submission already run (unless the student's
files changed) and runs again, from scratch, one that was interrupted.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from testbed import REPO, experiments
from testbed.core import layout
from testbed.core import scenario as scenarios
from testbed.errors import ConfigError, HostError, Interrupted
from testbed.host.files import write_json, write_text
from testbed.host.procs import sigterm_as_interrupt
from testbed.reports import grading, predictions
from testbed.reports.grading import Grade, Lab, Row
from topologies import plugins
from topologies.params import ParamError, clip

#: the seed a re-run uses unless ``--seed`` says otherwise (the labs' own files use 1,
#: 7 and 11: a student tuned on those, the grader measures on another)
GRADER_SEED = 4099
#: the queue's state file, in the queue's folder
STATE = "queue.json"
#: keys of a submission's head the grader sets (or drops) over the student's
GRADER_KEYS = ("seed", "seeds", "duration_s", "servers", "monitor")
#: files of a lab's starter folder that are not its scenario
NOT_SCENARIOS = (predictions.FILENAME, "answers.yaml")
#: how long a re-run, asked to stop, may take to tear down before it is killed
TEARDOWN_S = 300


@dataclass(frozen=True)
class Submission:
    """One student's hand-in, checked: the scenario document as the grader will run it
    and the plug-in files that run with it (module file name -> the file to run)."""

    name: str
    source: Path
    scenario: dict[str, Any]
    code: dict[str, Path]
    predictions: Path | None
    fingerprint: str


@dataclass(frozen=True)
class Job:
    """What one re-run is handed: the staged scenario (in the staged code folder) and
    the empty results folder to write; its output goes to ``log``."""

    scenario: Path
    out: Path
    log: Path


RunFn = Callable[[Job], int]


def lab_scenario(lab: Lab) -> Path:
    """The lab's scenario file (its starter's); ConfigError for a lab that has no run to
    re-run (lab 2 grades a file of answers)."""
    found = sorted(p for p in (lab.folder / "starter").glob("*.yaml")
                   if p.name not in NOT_SCENARIOS)
    if len(found) != 1:
        raise ConfigError("--rerun", f"lab {lab.number} ({lab.name}) has no scenario to run "
                                     "again (its grade reads a file the student writes)")
    return found[0]


def variant_names(data: dict) -> list[str]:
    """The variants a scenario document names (top level, or in its kind's section)."""
    for holder in [data, *(v for v in data.values() if isinstance(v, dict))]:
        listed = holder.get("variants")
        if isinstance(listed, list):
            return [v.get("name") if isinstance(v, dict) else None for v in listed]
    return []


def _commands(data: Any, where: str = "") -> Iterator[str]:
    """The field of every ``command`` workload (any command, as root) in a document."""
    if isinstance(data, dict):
        for key, value in data.items():
            field = f"{where}.{key}" if where else str(key)
            if key == "workloads" and isinstance(value, list):
                for i, item in enumerate(value):
                    if isinstance(item, dict) and item.get("kind") == "command":
                        yield f"{field}[{i}].kind"
            yield from _commands(value, field)
    elif isinstance(data, list):
        for i, item in enumerate(data):
            yield from _commands(item, f"{where}[{i}]")


def _shipped(lab: Lab, reference: str, field: str, folder: Path) -> tuple[str, Path, str]:
    """A plug-in reference of a submission, when it names one of the lab's starter
    modules, by its package (``labs.lab03_hashing.starter.placement:StridePlacement``)
    or, as the guides have the student's copy beside the scenario, by its file's name
    alone (``placement:StridePlacement``): (the file's name, the file that will run: the
    submission's copy in ``folder``, else the lab's, and the reference by package).
    ConfigError otherwise. Reads source, runs none."""
    package = f"labs.{lab.folder.name}.starter"
    module, _, name = reference.partition(":")
    rest = module.removeprefix(package + ".") if module.startswith(package + ".") \
        else module
    shipped = lab.folder / "starter" / f"{rest}.py"
    if "." in rest or rest.startswith("_") or not shipped.is_file():
        own = sorted(f"{package}.{p.stem}, or {p.stem} beside the scenario"
                     for p in (lab.folder / "starter").glob("*.py")
                     if not p.name.startswith("_"))
        raise ConfigError(field, f"names {clip(reference, 80)}, which lab {lab.number} does "
                                 "not ship: a submission may name only the lab's own modules"
                                 f" ({'; '.join(own) or 'it has none'}); nothing was run")
    own_copy = folder / shipped.name
    if own_copy.is_symlink():
        raise ConfigError(field, f"{own_copy} is a symbolic link (hand in the file itself)")
    path = own_copy if own_copy.is_file() else shipped
    try:
        names = plugins.top_level_names(path, field)
    except ParamError as exc:
        raise ConfigError(exc.field, exc.reason) from None
    if name and name not in names:
        raise ConfigError(field, f"{path} defines no {name!r} at its top level")
    return shipped.name, path, f"{package}.{rest}" + (f":{name}" if name else "")


def _set(data: Any, field: str, value: Any) -> None:
    """Set the value at ``field`` (``variants[3].controller.apps[0]``) of a document."""
    steps: list[str | int] = []
    for part in field.split("."):
        key, _, indices = part.partition("[")
        steps += [key] if key else []
        steps += [int(i) for i in re.findall(r"(\d+)\]", "[" + indices)] if indices else []
    node = data
    for step in steps[:-1]:
        node = node[step]
    node[steps[-1]] = value


def grader_head(lab: Lab, seed: int, duration_s: float | None) -> dict[str, Any]:
    """The head keys the grader sets over a submission's: its seed (as many seeds as the
    lab's file runs, from ``seed`` on) and the lab's duration (or ``duration_s``)."""
    starter = scenarios.read(lab_scenario(lab))
    head: dict[str, Any] = {"seed": seed,
                            "duration_s": duration_s or starter.get("duration_s", 30)}
    if isinstance(starter.get("seeds"), list):
        head["seeds"] = [seed + i for i in range(len(starter["seeds"]))]
    return head


def read_submission(lab: Lab, path: Path, head: dict[str, Any]) -> Submission:
    """``path`` (a folder or a scenario file) checked as a submission of ``lab``, running
    no code; ConfigError naming the field when it is refused."""
    lab_file = lab_scenario(lab)
    mine = f"lab{lab.number:02d}"  # the guides' name in my-labs/
    if path.is_dir():
        folder = path
        found = [f for f in (path / f"{mine}.yaml", path / lab_file.name) if f.is_file()]
        if len(found) != 1:
            raise ConfigError(str(path), f"has {'both' if found else 'neither'} {mine}.yaml "
                                         f"{'and' if found else 'nor'} {lab_file.name} (the "
                                         "lab's scenario file, filled in: one of them)")
        file = found[0]
    elif path.is_file():
        folder, file = path.parent, path
    else:
        raise ConfigError(str(path), "no such submission (a folder or a scenario file)")
    data = scenarios.read(file)
    if not isinstance(data, dict):
        raise ConfigError(str(file), "must be a YAML mapping (a scenario)")
    starter = scenarios.read(lab_file)
    if data.get("name") != starter["name"]:
        raise ConfigError(f"{file}: name", f"is {clip(repr(data.get('name')), 60)}; lab "
                                           f"{lab.number}'s scenario is {starter['name']!r}")
    if "kind" in data and data["kind"] != starter.get("kind",
                                                     experiments.kind_of(starter)):
        raise ConfigError(f"{file}: kind", f"is {clip(repr(data['kind']), 80)}; lab "
                                           f"{lab.number}'s is {experiments.kind_of(starter)}")
    if experiments.kind_of(data) != experiments.kind_of(starter):
        raise ConfigError(f"{file}: kind", f"a {experiments.kind_of(data)} scenario; lab "
                                           f"{lab.number}'s is {experiments.kind_of(starter)}")
    if variant_names(data) != variant_names(starter):
        raise ConfigError(f"{file}: variants", f"are {clip(str(variant_names(data)), 120)}; "
                                               f"lab {lab.number}'s are "
                                               f"{variant_names(starter)}")
    for field in _commands(data):
        raise ConfigError(f"{file}: {field}", "command: a re-run runs no command a "
                                              "submission names (it would run as root and "
                                              "could write the run's records)")
    code: dict[str, Path] = {}
    run = copy.deepcopy({k: v for k, v in data.items() if k not in GRADER_KEYS}) | head
    for field, reference in scenarios.plugin_references(run):
        name, source, by_package = _shipped(lab, reference, f"{file}: {field}", folder)
        code[name] = source
        _set(run, field, by_package)  # the staged package holds the copy that runs
    try:
        scenarios.parse(run)  # pure: sections checked as testbed validate does
    except plugins.NotLoaded:
        pass  # what depends on a plug-in is checked by the run, before it creates anything
    except (ConfigError, ParamError) as exc:
        raise ConfigError(f"{file}: {exc.field}", exc.reason) from None
    given = next((f for f in (folder / f"{mine}-{predictions.FILENAME}",
                              folder / predictions.FILENAME) if f.is_file()), None)
    return Submission(name=row_name(path), source=path, scenario=run, code=code,
                      predictions=given,
                      fingerprint=_fingerprint([file, *code.values(), *([given] if given
                                                                        else [])], head))


def row_name(path: Path) -> str:
    """A submission's name in the queue: its folder's or file's stem in letters, digits,
    ``-`` and ``_`` (no dot: ``NAME.log`` and ``NAME.staged`` are the queue's own).

    >>> row_name(Path("hand-ins/Ada Lovelace.yaml")), row_name(Path("x/ann.staged.yaml"))
    ('Ada_Lovelace', 'ann_staged')
    """
    stem = path.name if path.is_dir() else path.stem
    return re.sub(r"[^A-Za-z0-9_-]", "_", stem) or "submission"


def _fingerprint(files: list[Path], head: dict) -> str:
    h = hashlib.sha256(json.dumps(head, sort_keys=True).encode())
    for path in files:
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def stage(lab: Lab, sub: Submission, where: Path) -> Path:
    """The folder the re-run starts in: the scenario as the grader runs it and, where it
    names plug-ins, the lab's package with the submission's copies of its files in place
    (found first: the run's working folder). Returns the scenario's path."""
    if where.exists():
        shutil.rmtree(where)
    where.mkdir(parents=True)
    if sub.code:
        package = where / "labs" / lab.folder.name / "starter"
        package.mkdir(parents=True)
        shutil.copy2(REPO / "labs" / "__init__.py", where / "labs" / "__init__.py")
        for init in (lab.folder / "__init__.py", lab.folder / "starter" / "__init__.py"):
            if init.is_file():
                shutil.copy2(init, where / init.relative_to(REPO))
        for module in (lab.folder / "starter").glob("*.py"):  # what the plug-in may import
            shutil.copy2(module, package / module.name)
        for name, source in sub.code.items():  # the student's copies over the lab's
            shutil.copyfile(source, package / name)
    path = where / "scenario.yaml"
    write_text(path, f"# {json.dumps(str(sub.source))}, as the grader runs it\n"
                     + yaml.safe_dump(sub.scenario, sort_keys=False))
    return path


def run_env(job: Job) -> dict[str, str]:
    """The re-run's environment: the staged folder (its working folder, so first on the
    import path of every Python process it starts, the controller's included), then this
    checkout."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(job.scenario.parent), str(REPO), env.get("PYTHONPATH", "")) if p)
    return env


def run_subprocess(job: Job) -> int:
    """Run ``job`` as ``testbed run`` in a process of its own, in the staged folder (so
    the submission's plug-in files are the ones imported); asked to stop (Ctrl-C,
    SIGTERM), it is told to stop and waited for while it tears down."""
    env = run_env(job)
    argv = [sys.executable, "-m", "testbed.core.cli", "run", str(job.scenario),
            "--out", str(job.out)]
    with job.log.open("wb") as log:
        proc = subprocess.Popen(argv, cwd=job.scenario.parent, env=env, stdout=log,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
        try:
            return proc.wait()
        except BaseException:
            # SIGTERM: the run tears down as on Ctrl-C (SIGINT may be ignored in it, as
            # in anything started in the background)
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(TEARDOWN_S)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            raise


class Queue:
    """A class's re-runs in one folder: a results folder a submission (``NAME/``), what
    was run (``NAME.staged/``) and its output (``NAME.log``), and ``queue.json``: each
    submission's state (running, done or failed) and the fingerprint of its files."""

    def __init__(self, folder: Path, lab: Lab, head: dict[str, Any]):
        self.folder, self.lab, self.head = folder, lab, head
        self.path = folder / STATE
        self.state: dict[str, Any] = {"lab": lab.folder.name, **head, "submissions": {}}
        if self.path.is_file():
            try:
                found = json.loads(self.path.read_text())
                entries = found["submissions"]
                if not isinstance(entries, dict):
                    raise TypeError("submissions is not an object")
            except (ValueError, KeyError, TypeError) as exc:
                raise ConfigError(str(self.path), f"not a queue's state ({clip(str(exc), 80)})"
                                  ) from None
            asked = {"lab": lab.folder.name, **head}
            was = {k: found.get(k) for k in asked}
            if was != asked:
                raise ConfigError("--out", f"{folder} holds re-runs of {was}, not {asked}: "
                                           "give another --out")
            self.state["submissions"] = entries

    def entry(self, name: str) -> dict[str, Any]:
        found = self.state["submissions"].get(name)
        return found if isinstance(found, dict) else {}

    def save(self, name: str, **entry: Any) -> None:
        self.state["submissions"][name] = entry
        self.folder.mkdir(parents=True, exist_ok=True)
        write_json(self.path, self.state)

    def results(self, sub: Submission) -> Path:
        return self.folder / sub.name

    def done(self, sub: Submission) -> bool:
        """Run before with these files and finished (its folder's digest written, or the
        run refused the scenario): its grade is read back, not run again."""
        entry = self.entry(sub.name)
        return (entry.get("status") == "done" and entry.get("fingerprint") == sub.fingerprint
                and (entry.get("error") is not None
                     or (self.results(sub) / layout.DIGEST).is_file()))

    def run(self, sub: Submission, run_fn: RunFn) -> tuple[int, str | None]:
        """Run ``sub`` from scratch (what an earlier, interrupted try left is removed):
        the run's exit status and, when it failed, its last line of output."""
        out, staged = self.results(sub), self.folder / f"{sub.name}.staged"
        log = self.folder / f"{sub.name}.log"
        for leftover in (out, staged):
            if leftover.exists():
                shutil.rmtree(leftover)
        self.save(sub.name, status="running", source=str(sub.source),
                  fingerprint=sub.fingerprint)
        scenario = stage(self.lab, sub, staged)
        started = time.monotonic()
        status = run_fn(Job(scenario=scenario, out=out, log=log))
        if status == 130:
            raise Interrupted(f"the re-run of {sub.name} was stopped")
        error = None if status == 0 else _last_line(log)
        self.save(sub.name, status="done" if status in (0, 2) else "failed",
                  source=str(sub.source), fingerprint=sub.fingerprint, exit=status,
                  error=error, elapsed_s=round(time.monotonic() - started, 1))
        return status, error


def _last_line(log: Path) -> str:
    lines = [x for x in (log.read_text(errors="replace").splitlines() if log.is_file()
                         else []) if x.strip()]
    return f"the run failed: {clip(lines[-1], 300) if lines else 'no output'} (see {log})"


def grade_run(lab: Lab, sub: Submission, folder: Path) -> Grade:
    """The re-run's folder graded, with the submission's own predictions when it has
    them."""
    graded = grading.assess(lab, folder)
    given = str(sub.predictions) if sub.predictions else None
    try:
        found = predictions.grade_folder(lab, folder, given)
    except ConfigError as exc:
        found = str(exc)
    return Grade(graded.checks, graded.rerun, found)


def _elapsed(seconds: float) -> str:
    m, s = divmod(int(seconds), 60)
    return f"{m}m{s:02d}s" if m else f"{s}s"


def rerun_class(lab: Lab, paths: list[Path], *, queue: Queue, run_fn: RunFn,
                say: Callable[[str], None] = print) -> list[Row]:
    """Check every submission, then run the accepted ones one at a time (those done
    before read back): a class row each, in the order given. A refused submission is
    a row of its own, never run."""
    checked: list[tuple[Path, Submission | None, str | None]] = []
    for path in paths:
        try:
            checked.append((path, read_submission(lab, path, queue.head), None))
        except ConfigError as exc:
            checked.append((path, None, f"refused: {exc}"))
    names = [sub.name for _, sub, _ in checked if sub]
    if len(set(names)) != len(names):
        twice = sorted({n for n in names if names.count(n) > 1})
        raise ConfigError("--rerun", f"two submissions named {', '.join(twice)} (each "
                                     "needs a folder or file name of its own)")
    rows: list[Row] = []
    total = len(checked)
    for k, (path, sub, refused) in enumerate(checked, 1):
        tag = f"[{k}/{total}] {sub.name if sub else path}"
        if refused:
            say(f"{tag}: ERROR {refused}")
            rows.append((path, None, refused))
            continue
        started = time.monotonic()
        if queue.done(sub):
            error = queue.entry(sub.name).get("error")
            how = "done before, read back"
        else:
            say(f"{tag}: running (output: {queue.folder / (sub.name + '.log')})")
            _, error = queue.run(sub, run_fn)
            how = _elapsed(time.monotonic() - started)
        if error:
            say(f"{tag}: ERROR {error} ({how})")
            rows.append((path, None, error))
            continue
        try:
            graded = grade_run(lab, sub, queue.results(sub))
        except ConfigError as exc:
            say(f"{tag}: ERROR {exc} ({how})")
            rows.append((path, None, str(exc)))
            continue
        say(f"{tag}: {graded.verdict} ({how}; {graded.passed}/{len(graded.checks)} checks"
            f"; {queue.results(sub)})")
        rows.append((path, graded, None))
    return rows


def default_out(lab: Lab, seed: int) -> Path:
    """``results/rerun-LAB-seedN``: the same arguments, the same queue (so it resumes)."""
    return Path("results") / f"rerun-{lab.folder.name}-seed{seed}"


def cmd_rerun(args, lab: Lab, run_fn: RunFn | None = None) -> int:
    """``testbed check LAB --rerun SUBMISSION...``: the class's re-runs, graded.
    ``run_fn``: what runs one job (default: :func:`run_subprocess`, as root)."""
    if getattr(args, "predictions", None):
        raise ConfigError("--predictions", "with --rerun each submission's own "
                                           f"{predictions.FILENAME} is graded")
    for flag in ("student", "students"):  # a student's own seed, where --rerun sets its own
        if getattr(args, flag, None):
            raise ConfigError(f"--{flag}", "not with --rerun: a re-run uses the grader's "
                                           "seed, not the student's")
    seed = GRADER_SEED if args.seed is None else args.seed
    head = grader_head(lab, seed, args.duration)
    paths = [Path(p) for p in [*args.results, *(args.rerun or [])]]
    if len(paths) == 1:  # one submission: refused is bad input, nothing run
        read_submission(lab, paths[0], head)
    out = Path(args.out) if args.out else default_out(lab, seed)
    queue = Queue(out, lab, head)
    if run_fn is None and os.geteuid() != 0:
        raise HostError("re-running a submission needs root (namespaces, Open vSwitch): "
                        "run it as root in the lab VM")
    with sigterm_as_interrupt():  # SIGTERM stops the queue as Ctrl-C does
        print(f"{lab.title}: re-running {len(paths)} submission(s) one at a time, seed "
              f"{seed}, {head['duration_s']:g} s a variant; queue in {out}")
        try:
            rows = rerun_class(lab, paths, queue=queue, run_fn=run_fn or run_subprocess)
        except (KeyboardInterrupt, Interrupted):
            print(f"stopped; the same command resumes (queue: {out}): what was done is "
                  "read back, the submission that was running runs again", file=sys.stderr)
            raise
    print(grading.rerun_count(rows))
    if args.csv:
        names = [grading.check_name(c) for c in lab.module().CHECKS]
        grading.write_csv(Path(args.csv), names, rows, predictions.columns(lab))
        print(f"{args.csv}: one row a submission (the re-run's grade), one column a check")
    if len(rows) == 1 and rows[0][1] is not None:
        return rows[0][1].exit_status
    return grading.class_status(rows)


def dispatch(args, lab: Lab) -> int | None:
    """``testbed check``'s re-run: its exit status with ``--rerun``, else None (the
    options that only a re-run takes refused when given without it)."""
    if getattr(args, "rerun", None):
        if getattr(args, "live", None):
            raise ConfigError("--lab", "grades a running lab; --rerun runs submissions again")
        return cmd_rerun(args, lab)
    for flag in ("seed", "duration", "out"):
        if getattr(args, flag, None) is not None:
            raise ConfigError(f"--{flag}", "only with --rerun (it sets how the grader runs "
                                           "a submission again)")
    return None


def add_arguments(p) -> None:
    """``testbed check``'s options for re-runs."""
    from testbed.numbers import flag

    p.add_argument("--rerun", nargs="+", metavar="SUBMISSION",
                   help="students' submissions (each a folder with the lab's scenario "
                        "file and the student's copy of the lab's plug-in, or the scenario "
                        "file): check each, run it again here as root, one at a time, and "
                        "grade that run (docs/teaching/rerun.md)")
    p.add_argument("--seed", type=flag(0, 2**31, integer=True),
                   help=f"with --rerun: the grader's seed (default {GRADER_SEED})")
    p.add_argument("--duration", type=flag(1, 3600),
                   help="with --rerun: seconds of traffic a variant (default: the lab's)")
    p.add_argument("--out", help="with --rerun: the queue's folder (default "
                                 "results/rerun-LAB-seedN); the same folder again resumes")
