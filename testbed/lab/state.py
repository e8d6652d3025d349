"""A lab's record on the host: ``/run/testbed/RUNID/lab.json``, and how labs are found.

The supervisor writes the record once the lab is up; every other command reads it. A
lab is *live* while its supervisor (the record's owner, also the run folder's
``owner``) runs; a record whose owner is gone belongs to a dead lab, whose leftovers
``testbed clean`` (or ``testbed down``) removes.

>>> check_name("ls-demo")
'ls-demo'
>>> check_name("Bad name")
Traceback (most recent call last):
...
testbed.errors.ConfigError: --name: 'Bad name' must be 1-24 of a-z, 0-9, '-' or '_'
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

from testbed.core.layout import LAB_FAULTS
from testbed.errors import ConfigError
from testbed.host.hosts import Host, MininetHost, NetnsHost
from testbed.host.naming import RUN_ROOT, run_dir

LAB_FILE = "lab.json"
SOCKET = "lab.sock"
SUPERVISOR_PID = "supervisor.pid"
NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,23}$")


def check_name(name: str) -> str:
    if not NAME.fullmatch(name):
        raise ConfigError("--name", f"{name!r} must be 1-24 of a-z, 0-9, '-' or '_'")
    return name


def lab_file(run_id: str) -> Path:
    return run_dir(run_id) / LAB_FILE


def socket_path(run_id: str) -> Path:
    return run_dir(run_id) / SOCKET


def write(record: dict) -> None:
    """Write ``record`` atomically (readers never see half a file)."""
    path = lab_file(record["run_id"])
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record, indent=1))
    os.replace(tmp, path)


def record_fault(out: Path, kind: str, target: str | None, text: str) -> None:
    """Append a fault applied by hand to the lab's record of them (``lab-faults.jsonl``
    in its results folder), which the lab's monitor marks on its timeline."""
    with (out / LAB_FAULTS).open("a") as f:
        f.write(json.dumps({"t": time.time(), "kind": kind, "target": target,
                            "text": text}) + "\n")


def alive(record: dict) -> bool:
    """Whether the lab's supervisor still runs (its pid, running the supervisor)."""
    pid = record.get("owner", {}).get("pid")
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, TypeError):
        return False
    return b"testbed.lab.supervisor" in cmdline


def all_labs() -> list[dict]:
    """Every lab record on the host, each with ``alive``; oldest first."""
    labs = []
    for path in RUN_ROOT.glob(f"*/{LAB_FILE}"):
        try:
            record = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        record["alive"] = alive(record)
        labs.append(record)
    return sorted(labs, key=lambda r: r.get("created", 0))


def find(name: str, *, live: bool = True) -> dict:
    """The lab called ``name`` (its name or run id); ConfigError if there is none (or,
    with ``live``, if its supervisor is gone)."""
    labs = all_labs()
    for record in labs:
        if name in (record.get("name"), record.get("run_id")):
            if live and not record["alive"]:
                raise ConfigError("LAB", f"lab {name!r} is dead (its supervisor is gone); "
                                         "'testbed down' or 'testbed clean' removes it")
            return record
    known = ", ".join(r["name"] for r in labs if r["alive"]) or "none"
    raise ConfigError("LAB", f"no lab named {name!r} (live labs: {known})")


def host(record: dict, name: str) -> Host:
    """A host or router of the lab by its short name (``n0``, ``nyc``)."""
    hosts = record.get("hosts", {})
    entry = hosts.get(name)
    if entry is None:
        prefix = record.get("prefix", "")
        entry = hosts.get(name[len(prefix):]) if prefix and name.startswith(prefix) else None
    if entry is None:
        names = list(hosts)
        shown = ", ".join(names[:12]) + (", ..." if len(names) > 12 else "")
        raise ConfigError("HOST", f"no host {name!r} in lab {record['name']!r} ({shown})")
    if entry.get("server"):  # on another machine, through the lab's ssh connection
        from testbed.cluster.runtime import RemoteHost
        from testbed.cluster.servers import Connection, parse

        conn = Connection(parse(entry["server"], "server"), Path(entry["control"]))
        conn.sudo = ["sudo", "-n"] if entry.get("sudo") else []
        return RemoteHost(entry["name"], entry["pid"], conn, str(Path(entry["control"]).parent))
    if entry.get("pid"):
        return MininetHost(entry["name"], entry["pid"])
    return NetnsHost(entry["netns"])


def age(record: dict, now: float | None = None) -> str:
    """How long the lab has been up, e.g. ``3m12s``.

    >>> age({"created": 100.0}, now=100.0 + 3 * 3600 + 125)
    '3h02m'
    >>> age({"created": 100.0}, now=172.0)
    '1m12s'
    """
    seconds = int((now if now is not None else time.time()) - record.get("created", 0))
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    if seconds >= 60:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds}s"


def size(record: dict) -> str:
    """``8 sw / 4 hosts / 12 links`` or ``6 routers / 12 links``."""
    s = record.get("size", {})
    if record.get("kind") == "backbone":
        return f"{s.get('routers', 0)} routers / {s.get('links', 0)} links"
    return f"{s.get('switches', 0)} sw / {s.get('hosts', 0)} hosts / {s.get('links', 0)} links"
