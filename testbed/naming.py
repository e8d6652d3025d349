"""Names of what a run creates: the ``tb`` prefix plus the run's short id.

Everything on the host carries ``PREFIX + run_id`` so that ``testbed clean`` can find
exactly what the testbed made, and nothing else.
"""

from __future__ import annotations

import re
import secrets
from pathlib import Path

PREFIX = "tb"
RUN_ROOT = Path("/run/testbed")
OVS_EXTERNAL_ID = "testbed_run"
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
