"""Fit a fabric scenario to a host smaller than the one it was made for (``--fit``).

Before anything is brought up: the host's cores (those this process may run on: its CPU
affinity and its cgroup's CPU quota) and its Open vSwitch datapath; then

* a host at least the one the scenario was checked clean on (``scenarios/checked.json``,
  :mod:`testbed.core.checked`) runs it as shipped (factor 1.0: a measurement beats the
  model);
* otherwise the sizing model (:mod:`testbed.cluster.sizing`, what ``testbed calc
  --scenario`` prints) predicts every variant on one machine of these cores, its needs
  raised by the model's error (:data:`testbed.cluster.sizing.ERROR`) as a margin, and
  the factor is the largest of 1.0, 0.95, ... (steps of :data:`STEP`, down to
  :data:`testbed.experiments.fabric.rates.MIN_FACTOR`) at which every variant is
  predicted clean; every rate is then multiplied by it
  (:mod:`testbed.experiments.fabric.rates`).

Not predicted, so refused with one line (exit status 2): scenarios of other kinds, and
variants that run workloads the model leaves out (iperf3, elephants, replays, commands,
plug-ins). Where the model approximates (a training pattern other than the ring) the
record says so.
"""

from __future__ import annotations

import math
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from testbed.cluster import sizing
from testbed.core import checked
from testbed.core.fidelity_verdict import THRESHOLDS
from testbed.errors import ConfigError, HostError

#: the factor's steps: it is rounded down to a multiple of this
STEP = 0.05
CGROUP_ROOT = Path("/sys/fs/cgroup")


def host_datapath() -> str:
    """``kernel`` where the openvswitch module is loaded, else ``userspace`` (what a
    fabric will use here; the same test as the capability probe's)."""
    return "kernel" if Path("/sys/module/openvswitch").exists() else "userspace"


def _quota(proc_cgroup: str, root: Path) -> float | None:
    """The CPU quota (cores) of this process's cgroups and their parents, the smallest;
    None without one. Reads cgroup v2's ``cpu.max`` and v1's ``cpu.cfs_quota_us`` /
    ``cpu.cfs_period_us``."""
    found: list[float] = []
    for line in proc_cgroup.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, rel = parts
        rel_path = Path(rel.lstrip("/"))
        chain = [rel_path, *rel_path.parents]
        if controllers == "":  # v2: at the root (pure v2) or under unified/ (hybrid)
            for base in (root, root / "unified"):
                for sub in chain:
                    try:
                        text = (base / sub / "cpu.max").read_text().split()
                    except OSError:
                        continue
                    if text and text[0] != "max":
                        found.append(int(text[0]) / int(text[1]))
        elif "cpu" in controllers.split(","):
            for sub in chain:
                base = root / controllers
                try:
                    quota = int((base / sub / "cpu.cfs_quota_us").read_text())
                    period = int((base / sub / "cpu.cfs_period_us").read_text())
                except (OSError, ValueError):
                    continue
                if quota > 0 and period > 0:
                    found.append(quota / period)
    return min(found) if found else None


def usable_cores(root: Path = CGROUP_ROOT) -> float:
    """The cores this process may use: its CPU affinity (``taskset``, a cpuset), capped
    by its cgroup's CPU quota (rounded to a tenth)."""
    cores = float(len(os.sched_getaffinity(0)))
    try:
        quota = _quota(Path("/proc/self/cgroup").read_text(), root)
    except OSError:
        quota = None
    if quota is not None:
        cores = min(cores, math.floor(quota * 10) / 10)
    return max(cores, 0.1)


def _cores_text(cores: float) -> str:
    return f"{cores:g} core{'' if cores == 1 else 's'}"


@dataclass(frozen=True)
class Prediction:
    """One variant on one machine: its predicted cores and busiest switch thread, and
    how close to the monitor's limits they come with the margin (1.0: at a limit)."""

    variant: str
    cores: float
    thread_cores: float
    load: float
    why: str = ""


def predict(variant, costs: sizing.Costs, cores: float, margin: float,
            calibration: tuple[float, float] = (1.0, 1.0)) -> Prediction:
    """``variant`` on one machine of ``cores``: the model's cores and busiest switch
    thread, times ``calibration`` (measured over predicted on the host the scenario was
    checked on: cores, thread), then raised by ``margin`` against the monitor's limits."""
    from testbed.host.naming import SPEC_PREFIX

    est = sizing.estimate(variant.fabric(SPEC_PREFIX), variant, costs, machines=1,
                          cores=max(1, math.ceil(cores)))
    share = est.shares[0]
    need, thread = share.cores * calibration[0], share.busiest_thread_cores * calibration[1]
    room = cores * (1 - THRESHOLDS.host_idle_min)
    raised = 1 + margin
    load = max(need * raised / room, thread * raised / THRESHOLDS.ovs_cores_max)
    why = ""
    if need * raised > room:
        why = (f"needs {need * raised:.2f} of {room:.2f} cores (10 % kept idle, "
               f"{margin * 100:g} % margin)")
    elif thread * raised > THRESHOLDS.ovs_cores_max:
        why = (f"a switch thread needs {thread * raised:.2f} cores (more than "
               f"{THRESHOLDS.ovs_cores_max}, {margin * 100:g} % margin)")
    return Prediction(variant.name, round(need, 3), round(thread, 3), round(load, 4), why)


def calibrate(variants, costs: sizing.Costs, entry: dict[str, Any] | None
              ) -> tuple[float, float] | None:
    """Measured over predicted on the host ``entry`` was checked clean on (its busy cores
    at the recorded headroom, its busiest switch thread), against the model's busiest
    variant there; None without those figures."""
    if not entry or entry.get("cpu_headroom") is None \
            or entry.get("busiest_thread_cores") is None:
        return None
    at_ref = [predict(v, costs, entry["cores"], 0.0) for v in variants]
    cores = max(p.cores for p in at_ref)
    thread = max(p.thread_cores for p in at_ref)
    measured = entry["cores"] * (1 - entry["cpu_headroom"])
    return (round(measured / cores, 4) if cores else 1.0,
            round(entry["busiest_thread_cores"] / thread, 4) if thread else 1.0)


@dataclass(frozen=True)
class Fit:
    """What ``--fit`` decided for a scenario on this host."""

    factor: float
    host_cores: float
    datapath: str
    #: "checked": at least the host it was checked clean on; "model": the sizing model
    #: alone (not yet checked); "checked+model": the model calibrated on that host
    basis: str
    margin: float
    #: the variant nearest the limits at the factor, and its predicted figures
    variant: str | None = None
    predicted_cores: float | None = None
    predicted_thread_cores: float | None = None
    #: the same at factor 1.0 (what the scenario as shipped would need here)
    predicted_cores_at_1: float | None = None
    reference: dict[str, Any] | None = None
    approximated: tuple[str, ...] = ()
    costs_measured_on: str = ""
    notes: tuple[str, ...] = field(default=())
    #: measured over predicted on the checked host (cores, switch thread), if any
    calibration: tuple[float, float] | None = None

    @property
    def scaled(self) -> bool:
        return self.factor < 1.0

    def line(self) -> str:
        """The one line a run prints before it brings anything up.

        >>> for part in Fit(0.6, 1, "userspace", "model", 0.25, "b", 0.71, 0.5,
        ...                 1.44).line().split("; "):
        ...     print(part)
        fit: 1 core, userspace datapath: predicted 1.44 cores at x1.0 (variant b
        not yet checked, the model alone, 25 % margin)
        rates x0.6 (predicted 0.71 cores)
        >>> for part in Fit(1.0, 4, "userspace", "checked", 0.25, reference={
        ...         "cores": 2, "datapath": "userspace"}).line().split("; "):
        ...     print(part)
        fit: 4 cores, userspace datapath: at least the host it was checked clean on (2 cores, \
userspace datapath)
        rates unchanged (x1.0)
        """
        head = f"fit: {_cores_text(self.host_cores)}, {self.datapath} datapath: "
        if self.basis == "checked":
            ref = self.reference or {}
            return (head + "at least the host it was checked clean on "
                    f"({_cores_text(ref.get('cores', 0))}, {ref.get('datapath')} datapath); "
                    "rates unchanged (x1.0)")
        how = ("calibrated on the host it was checked on, " if self.calibration else
               "not yet checked, the model alone, ")
        at1 = (f"predicted {self.predicted_cores_at_1:.2f} cores at x1.0 (variant "
               f"{self.variant}; {how}{self.margin * 100:g} % margin)")
        if not self.scaled:
            return head + at1 + "; fits: rates unchanged (x1.0)"
        return (head + at1 + f"; rates x{self.factor:g} (predicted "
                f"{self.predicted_cores:.2f} cores)")

    def to_dict(self) -> dict[str, Any]:
        return {"factor": self.factor, "scaled": self.scaled,
                "host_cores": self.host_cores, "datapath": self.datapath,
                "basis": self.basis, "margin": self.margin, "variant": self.variant,
                "predicted_cores": self.predicted_cores,
                "predicted_thread_cores": self.predicted_thread_cores,
                "predicted_cores_at_1": self.predicted_cores_at_1,
                "reference": self.reference, "approximated": list(self.approximated),
                "calibration": list(self.calibration) if self.calibration else None,
                "notes": list(self.notes), "costs_measured_on": self.costs_measured_on,
                "line": self.line()}


def _not_predicted(sc) -> None:
    """ConfigError when the model cannot predict the scenario (its kind, a workload)."""
    if sc.kind != "fabric":
        raise ConfigError("--fit", f"a {sc.kind} scenario: the sizing model predicts fabric "
                                   "scenarios only")
    for v in sc.variants:
        kinds = sorted({str(e.get("kind")) for e in v.workloads})
        if kinds:
            raise ConfigError("--fit", f"variant {v.name} runs {', '.join(kinds)} "
                                       "workloads, which the sizing model does not predict "
                                       f"(testbed calc --scenario {sc.name} --variant "
                                       f"{v.name} lists what it leaves out)")


def factors() -> list[float]:
    """1.0, 0.95, ... down to the smallest factor a scenario's rates may be scaled by."""
    from testbed.experiments.fabric.rates import MIN_FACTOR

    steps = round(1 / STEP)
    return [round(k * STEP, 4) for k in range(steps, 0, -1) if k * STEP >= MIN_FACTOR - 1e-9]


def compute(data: dict, *, cores: float, datapath: str, costs: sizing.Costs | None = None,
            entry: dict[str, Any] | None = None, margin: float = sizing.ERROR) -> Fit:
    """The fit of the scenario document ``data`` on a host of ``cores`` and ``datapath``;
    ``entry``: where the scenario was checked clean (None: not yet). ConfigError when the
    model cannot predict it; HostError when no factor is predicted clean."""
    from testbed.core import scenario

    sc = scenario.parse(data)
    if checked.covers(entry, cores, datapath):
        return Fit(1.0, cores, datapath, "checked", margin, reference=dict(entry))
    _not_predicted(sc)
    costs = costs or sizing.Costs.load()
    approximated = tuple(sorted({n for v in sc.variants for n in sizing.offered(
        v.fabric(_prefix()), v, costs, 0).not_modelled}))
    notes = ()
    if datapath != costs.datapath:
        notes = (f"costs measured on the {costs.datapath} datapath: an upper bound on the "
                 f"{datapath} one",)
    calibration = calibrate(sc.variants, costs, entry)
    basis = "checked+model" if calibration else "model"
    first = None
    for factor in factors():
        try:
            scaled = scenario.parse(data, rate_factor=factor)
        except ConfigError as exc:  # a rate below what its field allows
            last = f"at x{factor:g} the scenario no longer validates ({exc})"
            break
        worst = max((predict(v, costs, cores, margin, calibration or (1.0, 1.0))
                     for v in scaled.variants), key=lambda p: p.load)
        first = first or worst
        if worst.load <= 1.0:
            return Fit(factor, cores, datapath, basis, margin, worst.variant,
                       worst.cores, worst.thread_cores, first.cores, dict(entry) if entry
                       else None, approximated, costs.measured_on, notes, calibration)
        last = f"at x{factor:g} variant {worst.variant} {worst.why}"
    raise HostError(f"fit: no rate factor is predicted clean on {_cores_text(cores)} "
                    f"({datapath} datapath, {margin * 100:g} % margin): {last}"
                    + ("; agent chains are a closed loop: the model's chain load does not "
                       "fall with the rates" if any(v.agents.get("enabled")
                                                    for v in sc.variants) else ""))


def _prefix() -> str:
    from testbed.host.naming import SPEC_PREFIX

    return SPEC_PREFIX


def for_file(path: Path, *, cores: float | None = None, datapath: str | None = None,
             costs: sizing.Costs | None = None) -> Fit:
    """The fit of the scenario file ``path`` on this host (or the given one)."""
    from testbed.core import scenario

    data = scenario.read(path)
    if not isinstance(data, dict):
        raise ConfigError("scenario", "must be a YAML mapping")
    name = data.get("name")
    entry = checked.load().get(name) if isinstance(name, str) else None
    return compute(data, cores=usable_cores() if cores is None else cores,
                   datapath=datapath or host_datapath(), costs=costs, entry=entry)


def for_run(path: Path, servers: list | tuple = ()) -> Fit:
    """``testbed run --fit`` and ``testbed up --fit``: the fit on this host, said in one
    line on stderr before anything is brought up; ConfigError with ``servers`` (a run
    over several machines is sized by ``testbed calc --scenario``)."""
    if servers:
        raise ConfigError("--fit", "fits a run to this one host; a run spread over "
                                   "servers is sized with testbed calc --scenario")
    fitted = for_file(path)
    print(f"testbed: {fitted.line()}", file=sys.stderr, flush=True)
    return fitted
