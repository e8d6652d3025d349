"""What the lab commands share, as clients of a running lab: the root check, a request
to the lab's supervisor over its socket, the lab class of a lab's record and the column
of its node names. Used by :mod:`.commands`, :mod:`.up`, :mod:`.live` and the live checks.
"""

from __future__ import annotations

import json
import os
import socket

from testbed import experiments
from testbed.errors import ConfigError, HostError

#: the longest a lab's supervisor may take to stop (``testbed down``, a failed ``up``)
DOWN_TIMEOUT_S = 120


def need_root(what: str) -> None:
    if os.geteuid() != 0:
        raise ConfigError("user", f"{what} needs root (namespaces, Open vSwitch)")


def request(record: dict, message: dict, timeout: float | None = 120) -> dict:
    """One request to the lab's supervisor, its one-line JSON reply."""
    from testbed.lab.supervisor import read_line

    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        try:
            sock.connect(record["socket"])
        except OSError as exc:
            raise HostError(f"lab {record['name']}: its supervisor does not answer "
                            f"({exc.strerror})") from None
        sock.sendall((json.dumps(message) + "\n").encode())
        line = read_line(sock)
    if not line:
        raise HostError(f"lab {record['name']}: no reply from its supervisor")
    return json.loads(line)


def lab_class(record: dict) -> type:
    """The lab class of the record's kind (:meth:`Experiment.lab_class`): what differs
    between kinds in these commands (what its nodes are called, what ``inspect`` adds,
    what ``cli`` runs, where ``capture`` listens) is the lab's to say."""
    return experiments.get(record["kind"]).lab_class()


def name_width(record: dict, least: int) -> int:
    """The column of the lab's node names: the longest name (a region's can be long)."""
    return max([least, *map(len, record["hosts"])]) + 2

