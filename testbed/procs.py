"""Helper processes in their own process groups, stopped by group.

Each process gets a pid file in the run folder, with its start time, so that ``testbed
clean`` can find it even after the runner itself was killed, and can tell it from a
later process that got the same pid.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from testbed.errors import Interrupted
from testbed.naming import pid_record


class Helper:
    """A long-running process (controller, generator) in its own process group."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        *,
        pid_dir: Path,
        log: Path | None = None,
        env: dict[str, str] | None = None,
        stdout_pipe: bool = False,
        stdout_file: Path | None = None,
    ):
        self.name = name
        self.argv = list(argv)
        self.pid_file = pid_dir / f"{name}.pid"
        self._log = open(log, "ab") if log else subprocess.DEVNULL  # noqa: SIM115
        self._out = open(stdout_file, "wb") if stdout_file else None  # noqa: SIM115
        if stdout_pipe:
            stdout = subprocess.PIPE
        else:
            stdout = self._out or self._log
        self.proc = subprocess.Popen(
            self.argv,
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=self._log,
            env=env,
            start_new_session=True,
        )
        pid_dir.mkdir(parents=True, exist_ok=True)
        self.pid_file.write_text(pid_record(self.proc.pid))

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def wait(self, timeout: float) -> int | None:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def stop(self, grace: float = 3.0) -> int | None:
        """SIGTERM to the group, a bounded wait, then SIGKILL; returns the exit code."""
        stop_group(self.proc.pid, grace, lambda: self.proc.poll() is not None)
        try:
            code = self.proc.wait(1.0)
        except subprocess.TimeoutExpired:
            code = None
        if self.proc.stdout:
            self.proc.stdout.close()
        for f in (self._log, self._out):
            if hasattr(f, "close"):
                f.close()
        self.pid_file.unlink(missing_ok=True)
        return code


def stop_group(pgid: int, grace: float, gone: Callable[[], bool] | None = None) -> None:
    """Stop process group ``pgid``: SIGTERM, wait up to ``grace`` s, then SIGKILL."""

    def group_gone() -> bool:
        if gone:
            gone()  # reaps the leader, whose zombie would keep the group alive
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        return False

    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 1.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        if wait_for(group_gone, wait, interval=0.02):
            return


def wait_for(condition: Callable[[], bool], timeout: float, interval: float = 0.05) -> bool:
    """Poll ``condition`` until true or ``timeout`` seconds pass; return its last value."""
    deadline = time.monotonic() + timeout
    while True:
        if condition():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Turn SIGTERM into :class:`Interrupted`, so ExitStacks unwind as on Ctrl-C.

    Does nothing off the main thread or when a caller already installed a handler.
    """
    if (threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL):
        yield
        return

    def handler(signum: int, frame: object) -> None:
        raise Interrupted(f"stopped by signal {signum}")

    signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
