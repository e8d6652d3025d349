"""Names of what a run creates: the ``tb`` prefix plus the run's short id.

Everything on the host carries ``PREFIX + run_id`` so that ``testbed clean`` can find
exactly what the testbed made, and nothing else.
"""

from __future__ import annotations

import os
import re
import secrets
from pathlib import Path

PREFIX = "tb"
RUN_ROOT = Path("/run/testbed")
OVS_EXTERNAL_ID = "testbed_run"
OWNER = "owner"  # file in a run folder: the pid of the process that runs it
#: names the testbed gives to interfaces, namespaces and bridges: tb + 4 hex digits
OWNED_NAME = re.compile(rf"^{PREFIX}[0-9a-f]{{4}}")


def new_run_id() -> str:
    """A short random id, unique among the runs alive on one host."""
    while True:
        run_id = secrets.token_hex(2)
        if not (RUN_ROOT / run_id).exists():
            return run_id


def run_prefix(run_id: str) -> str:
    """``tb`` + run id: the start of every name the run creates.

    >>> run_prefix("1a2b")
    'tb1a2b'
    """
    return PREFIX + run_id


def run_dir(run_id: str) -> Path:
    """Folder for the run's pid files and sockets (removed at teardown)."""
    return RUN_ROOT / run_id


def is_owned(name: str) -> bool:
    """Whether an interface, namespace or bridge name is one the testbed makes.

    >>> is_owned("tb1a2bp0l1e3"), is_owned("tbx"), is_owned("eth0")
    (True, False, False)
    """
    return OWNED_NAME.match(name) is not None


def claim(run_id: str) -> Path:
    """Create the run's folder and record this process as its owner (for ``clean``)."""
    folder = run_dir(run_id)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / OWNER).write_text(str(os.getpid()))
    return folder


def live_runs() -> dict[str, int]:
    """Run ids whose owner process is still alive, with the owner's pid."""
    live = {}
    for owner in RUN_ROOT.glob(f"*/{OWNER}"):
        try:
            pid = int(owner.read_text().strip())
        except (OSError, ValueError):
            continue
        if Path(f"/proc/{pid}").exists():
            live[owner.parent.name] = pid
    return live


def run_id_of(name: str) -> str | None:
    """The run id inside an owned name.

    >>> run_id_of("tb1a2bp0l1e3"), run_id_of("eth0")
    ('1a2b', None)
    """
    return name[len(PREFIX):len(PREFIX) + 4] if is_owned(name) else None
