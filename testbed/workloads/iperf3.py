"""iperf3, one launcher for every experiment: a server's and a client's command line, and
what a client's JSON record says. The workload kinds (``iperf3``, ``elephants``), the
backbone's replication flows and MACsec's bulk flow all start it from here, so they
measure the same way (``-J``: the client's record, with the server's figures, on stdout).

>>> server("10.0.0.2", 5201)
['iperf3', '-s', '-1', '-B', '10.0.0.2', '-p', '5201']
>>> client("10.0.0.2", 5201, seconds=4, bind="10.0.0.1", udp=True, rate_mbps=12)
... # doctest: +NORMALIZE_WHITESPACE
['iperf3', '-c', '10.0.0.2', '-p', '5201', '-t', '4', '-J', '--connect-timeout', '3000',
 '-B', '10.0.0.1', '-u', '-b', '12M']
>>> goodput_mbps({"end": {"sum_received": {"bits_per_second": 9.5e6}}})
9.5
>>> goodput_mbps({"error": "the server has terminated", "end": {"sum": {}}}) is None
True
"""

from __future__ import annotations

import json
from pathlib import Path

#: the first port of the workloads list's iperf3 entries (entry i listens on BASE_PORT + i)
BASE_PORT = 5201
#: how long a client tries to connect (ms): a server that is not up by then is an error
CONNECT_TIMEOUT_MS = 3000


def server(bind: str, port: int, *, once: bool = True) -> list[str]:
    """A server on ``bind``:``port``; ``once``: it ends after one test (``-1``)."""
    return ["iperf3", "-s", *(["-1"] if once else []), "-B", bind, "-p", str(port)]


def client(server: str, port: int, *, seconds: float, bind: str | None = None,
           udp: bool = False, rate_mbps: float | None = None, parallel: int = 1) -> list[str]:
    """A client to ``server``:``port`` for ``seconds``, its record as JSON on stdout."""
    argv = ["iperf3", "-c", server, "-p", str(port), "-t", f"{seconds:g}", "-J",
            "--connect-timeout", str(CONNECT_TIMEOUT_MS)]
    if bind:
        argv += ["-B", bind]
    if parallel > 1:
        argv += ["-P", str(parallel)]
    if udp:
        argv.append("-u")
    if rate_mbps:
        argv += ["-b", f"{rate_mbps:g}M"]
    return argv


def read(path: Path) -> dict | None:
    """A client's JSON record, or None (no file, or not JSON: the client never ran)."""
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def goodput_mbps(record: dict | None) -> float | None:
    """What the server received, in Mb/s (UDP: ``sum``); None without a record or for a
    test cut short (its ``error``: the server's figures never came back, and the 0 the
    client reports then is not a rate)."""
    if not record or record.get("error") or "end" not in record:
        return None
    end = record["end"]
    summary = end.get("sum_received") or end.get("sum") or {}
    bps = summary.get("bits_per_second")
    return round(bps / 1e6, 3) if bps is not None else None
