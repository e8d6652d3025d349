"""Fixtures for the agent-chain tests: start generator processes and always reap them.

Every process runs in its own session (process group); teardown sends SIGTERM
(plus SIGCONT, for tests that SIGSTOP a service), waits a bounded time, then
SIGKILLs the group.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def free_port(host: str = "127.0.0.1") -> int:
    """Return a TCP port that was free on ``host`` a moment ago."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def read_jsonl(path: Path) -> list[dict]:
    """Parse a JSON-lines file."""
    return [json.loads(line) for line in path.read_text().splitlines()]


class Procs:
    """Start ``python -m traffic ...`` processes and stop them by process group."""

    free_port = staticmethod(free_port)

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen] = []

    def start(self, args: Sequence[str], prefix: Sequence[str] = ()) -> subprocess.Popen:
        env = dict(os.environ, PYTHONPATH=str(REPO))
        proc = subprocess.Popen(
            [*prefix, sys.executable, "-m", "traffic", *args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env=env, cwd=REPO, start_new_session=True,
        )
        self.procs.append(proc)
        return proc

    def service(self, role: str, listen: Sequence[str], stats: Path | None = None,
                prefix: Sequence[str] = (), timeout: float = 10.0) -> subprocess.Popen:
        """Start an agent-service and wait for its ``ready`` line."""
        args = ["agent-service", "--role", role]
        for address in listen:
            args += ["--listen", address]
        if stats is not None:
            args += ["--stats", str(stats)]
        proc = self.start(args, prefix)
        ready, _, _ = select.select([proc.stdout], [], [], timeout)
        line = proc.stdout.readline() if ready else ""
        if line.strip() != "ready":
            self.stop(proc)
            pytest.fail(f"service {role} not ready: {line!r} {proc.stderr.read()}")
        return proc

    def stop(self, proc: subprocess.Popen, timeout: float = 5.0) -> int:
        """SIGTERM the process group, wait up to ``timeout``, then SIGKILL."""
        if proc.poll() is None:
            for sig in (signal.SIGTERM, signal.SIGCONT):
                try:
                    os.killpg(proc.pid, sig)
                except ProcessLookupError:
                    break
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait(timeout)
        return proc.returncode

    def driver(self, plan: dict, tmp: Path, *extra: str,
                   prefix: Sequence[str] = (), timeout: float = 60.0) -> tuple[dict, list, list]:
        """Run agent-driver to completion; return (summary, hop records, chain records)."""
        plan_path = tmp / "plan.json"
        plan_path.write_text(json.dumps(plan))
        hops, chains = tmp / "hops.jsonl", tmp / "chains.jsonl"
        proc = self.start(["agent-driver", "--plan", str(plan_path), "--hops-out", str(hops),
                            "--chains-out", str(chains), *extra], prefix)
        start = time.monotonic()
        out, err = proc.communicate(timeout=timeout)
        assert proc.returncode == 0, f"driver rc={proc.returncode} after "\
            f"{time.monotonic() - start:.1f}s: {err}"
        lines = out.strip().splitlines()
        assert len(lines) == 1, out
        return json.loads(lines[0]), read_jsonl(hops), read_jsonl(chains)

    def close(self) -> None:
        for proc in self.procs:
            self.stop(proc)
            for stream in (proc.stdout, proc.stderr):
                if stream is not None:
                    stream.close()


@pytest.fixture
def procs() -> Iterator[Procs]:
    p = Procs()
    try:
        yield p
    finally:
        p.close()
