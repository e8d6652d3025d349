"""Live checks: ``testbed check LAB --lab NAME`` grades a running lab (``testbed up``).

A lab's ``check.py`` may declare ``LIVE``, a list of functions that each take a
:class:`testbed.lab.live.LiveLab` and return a :class:`~testbed.reports.grading.Verdict`,
and ``SCENARIO``, the name of the scenario its starter and solution build: a lab built
from another scenario is refused (one line, exit status 2), as is a name that is no
running lab. A check that does not apply to the running variant (the placement check
on the ECMP variant) raises :class:`NotApplicable`: it is shown as ``SKIP`` with why, and
not counted. Every probe a check makes is bounded by a timeout, and a check that applies
a fault undoes it before it returns, so a live check never hangs and leaves the lab as
it found it. The output and exit status are a results folder's: a ``PASS`` or ``FAIL``
line a check, then the count; 0 when every check passed, 1 when one failed.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from testbed.core import fidelity, layout
from testbed.errors import ConfigError, HostError
from testbed.reports.grading import (
    RERUN_CHANGE,
    Grade,
    Lab,
    Verdict,
    all_labs,
    check_name,
    failed,
    verdict,
)

LiveCheck = Callable[..., Verdict]


class NotApplicable(Exception):  # noqa: N818 -- a check's outcome, not a failure
    """The check does not apply to the running variant (shown as SKIP, not counted)."""


def live_checks(lab: Lab) -> list[LiveCheck]:
    """``lab``'s live checks; ConfigError naming the labs that have some when it has none."""
    checks = list(getattr(lab.module(), "LIVE", None) or [])
    if not checks:
        have = [str(x.number) for x in all_labs() if getattr(x.module(), "LIVE", None)]
        raise ConfigError("--lab", f"lab {lab.number} ({lab.name}) has no live checks "
                                   f"(labs with live checks: {', '.join(have) or 'none'}); "
                                   f"grade its results folder instead")
    return checks


def check_scenario(lab: Lab, live) -> None:
    """ConfigError when the running lab was not built from ``lab``'s scenario."""
    want = getattr(lab.module(), "SCENARIO", None)
    if want and live.scenario != want:
        raise ConfigError("--lab", f"lab {live.name} runs scenario {live.scenario!r}, not "
                                   f"lab {lab.number}'s {want!r} (testbed up "
                                   f"{lab.folder.relative_to(lab.folder.parent.parent)}"
                                   "/starter/... or solution/...)")


def run_checks(checks: list[LiveCheck], live) -> tuple[list[tuple[str, Verdict]],
                                                       list[tuple[str, str]]]:
    """Each check's verdict on the running lab, and the checks that do not apply (with
    why). A probe that gets no answer in time or a command that fails is the check's
    failure, named; the lab's other checks still run."""
    graded, skipped = [], []
    for check in checks:
        name = check_name(check)
        try:
            graded.append((name, check(live)))
        except NotApplicable as exc:
            skipped.append((name, str(exc)))
        except (HostError, ConfigError, OSError, ValueError, KeyError, TypeError) as exc:
            graded.append((name, failed(f"the live lab did not answer as a running lab "
                                        f"does ({type(exc).__name__}: {str(exc)[:200]})")))
    return graded, skipped


def report(lab: Lab, live, graded: Grade, skipped: list[tuple[str, str]]) -> str:
    """What ``testbed check LAB --lab NAME`` prints: RERUN's reason first when a check
    failed while the host did not keep up, a line a check (SKIP for one that does not
    apply to the running variant), then the count."""
    lines = [f"{'PASS' if v.ok else 'FAIL'} {name}: {v.reason}" for name, v in graded.checks]
    lines += [f"SKIP {name}: {why}" for name, why in skipped]
    tail = f", {len(skipped)} not applicable to this variant" if skipped else ""
    what = f"{lab.title}: live lab {live.name} ({live.scenario}/{live.variant_name})"
    count = f"{graded.passed}/{len(graded.checks)} checks passed{tail}"
    if graded.rerun:
        return "\n".join([f"RERUN: {graded.rerun}", *(f"  (not graded) {ln}" for ln in lines),
                          f"{what}: RERUN (not graded; {count})"]) + "\n"
    return "\n".join([*lines, f"{what}: {count}"]) + "\n"


def rerun_reason(graded: list[tuple[str, Verdict]], fidelity: dict | None) -> str | None:
    """Why the live checks must be repeated: a check failed while the fidelity monitor
    found the host not keeping up (a probe's timeout, a routing session's flap, an
    acceptance measurement can fail for the host's sake; none passes for it, so a pass
    stands). None when nothing failed or the host kept up."""
    if fidelity is None or fidelity.get("ok", True) or all(v.ok for _, v in graded):
        return None
    why = "; ".join(str(x)[:300] for x in (fidelity.get("reasons") or [])[:3])
    return (f"the fidelity monitor flagged the host while the live checks ran "
            f"({why or 'no reason recorded'}): a check that failed may have failed for "
            f"the host's sake. {RERUN_CHANGE}")


def add_arguments(parser) -> None:
    """``--lab NAME`` of ``testbed check``."""
    parser.add_argument("--lab", dest="live", metavar="NAME",
                        help="grade a running lab (testbed up ... --name NAME) with the "
                             "lab's live checks (labs 3, 5, 7, 10) instead of a results "
                             "folder: probes across it, its switches' flows, its routers' "
                             "routes and sessions, its MACsec counters; exit 2 (one line) "
                             "when NAME is no running lab or runs another lab's scenario, "
                             "3 when a check failed while the host did not keep up")
    parser.add_argument("--checks", dest="live_checks", metavar="NAMES", default=None,
                        help="with --lab: only these live checks, comma-separated, in the "
                             "lab's order (a check's name as the report prints it)")


def wanted(args) -> bool:
    """Whether ``testbed check`` grades a running lab (``--lab``); ConfigError when the
    command line mixes that with a results folder, or names neither."""
    live = getattr(args, "live", None)
    if live is None:
        if getattr(args, "live_checks", None) is not None:
            raise ConfigError("--checks", "chooses among a running lab's live checks: it "
                                          "goes with --lab NAME")
        if not args.results:
            raise ConfigError("RESULTS", "name a results folder, or a running lab with "
                                         "--lab NAME")
        return False
    others = [("a results folder", args.results), ("--csv", args.csv),
              *((f"--{o}", getattr(args, o, None)) for o in ("predictions", "student",
                                                                "students"))]
    given = next((name for name, value in others if value), None)
    if given:
        raise ConfigError("--lab", f"grades a running lab; {given} goes with a results "
                                   "folder, not with --lab")
    return True


def chosen(checks: list[LiveCheck], names: str | None) -> list[LiveCheck]:
    """The checks ``--checks`` names (comma-separated), in the lab's order; all for None;
    ConfigError naming an unknown one and the lab's checks."""
    if names is None:
        return checks
    wanted_names = [n.strip() for n in names.split(",") if n.strip()]
    have = [check_name(c) for c in checks]
    unknown = [n for n in wanted_names if n not in have]
    if unknown or not wanted_names:
        said = f"unknown check {unknown[0]!r}" if unknown else "names no check"
        raise ConfigError("--checks", f"{said} (this lab's live checks: {', '.join(have)})")
    return [c for c in checks if check_name(c) in wanted_names]


def cmd_check_live(lab: Lab, name: str, names: str | None = None) -> int:
    """``testbed check LAB --lab NAME [--checks NAMES]``: the live checks of ``lab`` (those
    named) on the running lab."""
    from testbed.lab.client import need_root
    from testbed.lab.live import LiveLab

    # before the lab is looked up: bad input touches nothing
    checks = chosen(live_checks(lab), names)
    live = LiveLab.find(name)
    check_scenario(lab, live)
    need_root("testbed check --lab")
    monitor = fidelity.Monitor(Path(live.record["out"]) / layout.LIVE_CHECK_FIDELITY,
                               owner=live.record["owner"]["pid"])
    with monitor.watching(), monitor:  # the window open before the first sample: all judged
        graded, skipped = run_checks(checks, live)
    if not graded:
        raise ConfigError("--lab", f"no live check of lab {lab.number} applies to variant "
                                   f"{live.variant_name}: "
                                   + "; ".join(f"{n}: {why}" for n, why in skipped))
    grade = Grade(graded, rerun_reason(graded, monitor.result))
    print(report(lab, live, grade, skipped), end="")
    return grade.exit_status


# -- checks several labs share -------------------------------------------------------
def hosts_reach_across_leaves(live) -> Verdict:
    """Every host reaches every host of its plane behind another leaf (3 probes a pair
    from inside the source's namespace, one answer enough)."""
    bad, probed = live.unreachable_across_leaves()
    if not probed:
        raise NotApplicable(f"variant {live.variant_name} has one leaf: no pair crosses "
                            "the fabric")
    shown = ", ".join(bad[:8]) + (f" and {len(bad) - 8} more" if len(bad) > 8 else "")
    return verdict(not bad, f"{probed - len(bad)} of {probed} host pairs across leaves "
                            "answered" + (f"; no answer: {shown}" if bad else ""))
