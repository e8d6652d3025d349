"""Where each shipped scenario was checked clean: ``scenarios/checked.json``.

One entry a scenario, written only from measurements (``make bench BENCH=clean`` with
``--record``: every variant once per seed, as shipped, none flagged by the fidelity
monitor): the host's cores and Open vSwitch datapath, its CPU headroom (the lowest
host idle share a variant kept in four seconds of five: the monitor flags a variant
below 10 % in more than one in five), the busiest switch thread (in four seconds of
five, the most of any variant: the monitor flags one over 0.9 of a core), the seeds, the
date and the machine. A scenario without an entry has not been checked yet;
``testbed scenarios`` says so, and ``testbed run --fit`` then has no measured reference.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from testbed import REPO
from testbed.errors import ConfigError

CHECKED_FILE = REPO / "scenarios" / "checked.json"
DATAPATHS = ("userspace", "kernel")
#: an entry's fields: name -> (type, meaning)
FIELDS: dict[str, tuple[type | tuple[type, ...], str]] = {
    "cores": (int, "cores of the host it ran on (the run's CPU affinity)"),
    "datapath": (str, "Open vSwitch's datapath there: userspace or kernel"),
    "cpu_headroom": ((int, float), "the lowest, over its variants, of the host's idle "
                                   "share in four samples of five (20th percentile)"),
    "busiest_thread_cores": ((int, float), "the most, over its variants, a switch "
                                           "thread used in four samples of five (80th "
                                           "percentile), cores"),
    "seeds": (list, "the seeds every variant ran with"),
    "variants": (int, "variants run (each once per seed), none flagged"),
    "date": (str, "when (YYYY-MM-DD)"),
    "machine": (str, "the host in words (CPU, cores, memory, kernel, datapath)"),
}


def load(path: Path = CHECKED_FILE) -> dict[str, dict[str, Any]]:
    """The entries by scenario name (none when the file is missing); ConfigError naming
    the file and the field when an entry is not what :data:`FIELDS` says."""
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise ConfigError(str(path), f"not a checked-scenarios file: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(str(path), "must be a JSON object of scenario -> entry")
    for name, entry in data.items():
        check_entry(entry, f"{Path(path).name}: {name}")
    return data


def check_entry(entry: Any, where: str) -> None:
    if not isinstance(entry, dict):
        raise ConfigError(where, "an entry must be an object")
    for key, value in entry.items():
        if key not in FIELDS:
            raise ConfigError(f"{where}.{key}", f"unknown field (known: {', '.join(FIELDS)})")
        kind = FIELDS[key][0]
        if not isinstance(value, kind) or isinstance(value, bool):
            raise ConfigError(f"{where}.{key}", f"must be {FIELDS[key][1]}, got {value!r}")
    for key in ("cores", "datapath"):
        if key not in entry:
            raise ConfigError(f"{where}.{key}", "missing (the hardware it was checked on)")
    if entry["datapath"] not in DATAPATHS:
        raise ConfigError(f"{where}.datapath", f"userspace or kernel, got {entry['datapath']!r}")
    if entry["cores"] < 1:
        raise ConfigError(f"{where}.cores", f"at least 1, got {entry['cores']}")


def describe(entry: dict[str, Any] | None) -> str:
    """One line for ``testbed scenarios``.

    >>> describe(None)
    'not yet checked'
    >>> print(describe({"cores": 2, "datapath": "userspace", "cpu_headroom": 0.31,
    ...                 "busiest_thread_cores": 0.62, "seeds": [1, 2], "date": "2026-12-07"}
    ...                ).replace(": ", ":\\n"))
    checked clean on 2 cores, userspace datapath (seeds 1,2; 2026-12-07):
    idle 31 %, busiest switch thread 0.62 cores
    """
    if not entry:
        return "not yet checked"
    line = f"checked clean on {entry['cores']} cores, {entry['datapath']} datapath"
    about = []
    if entry.get("seeds"):
        about.append("seeds " + ",".join(str(s) for s in entry["seeds"]))
    if entry.get("date"):
        about.append(entry["date"])
    if about:
        line += f" ({'; '.join(about)})"
    figures = []
    if entry.get("cpu_headroom") is not None:
        figures.append(f"idle {entry['cpu_headroom'] * 100:.0f} %")
    if entry.get("busiest_thread_cores") is not None:
        figures.append(f"busiest switch thread {entry['busiest_thread_cores']:.2f} cores")
    return line + (": " + ", ".join(figures) if figures else "")


def covers(entry: dict[str, Any] | None, cores: float, datapath: str) -> bool:
    """Whether a host of ``cores`` on ``datapath`` is at least the one ``entry`` was
    checked clean on (the kernel datapath counts as at least the userspace one: it
    forwards in the kernel, at a fraction of the CPU).

    >>> e = {"cores": 2, "datapath": "userspace"}
    >>> covers(e, 2, "userspace"), covers(e, 4, "kernel"), covers(e, 1, "userspace")
    (True, True, False)
    >>> covers({"cores": 2, "datapath": "kernel"}, 8, "userspace"), covers(None, 64, "kernel")
    (False, False)
    """
    if not entry:
        return False
    rank = {"userspace": 0, "kernel": 1}
    return cores >= entry["cores"] and rank[datapath] >= rank[entry["datapath"]]


def record(name: str, entry: dict[str, Any] | None, path: Path = CHECKED_FILE) -> None:
    """Write ``name``'s entry (None: remove it), keeping the others."""
    data = load(path)
    if entry is None:
        data.pop(name, None)
    else:
        check_entry(entry, f"{Path(path).name}: {name}")
        data[name] = entry
    Path(path).write_text(json.dumps(dict(sorted(data.items())), indent=1) + "\n")
