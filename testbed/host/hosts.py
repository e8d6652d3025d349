"""Commands inside a host: one abstraction over Mininet hosts and plain namespaces.

A fabric host is a Mininet node (a shell holding a network namespace, entered with
``mnexec -a PID``); a MACsec end or a backbone router is a named namespace (entered with
``ip netns exec NAME``). Experiment code asks a :class:`Host` to run a short command or
to spawn a long-running helper, and does not care which.

>>> NetnsHost("tb1a2bnyc").argv(["ping", "-c1", "10.0.0.1"])
['ip', 'netns', 'exec', 'tb1a2bnyc', 'ping', '-c1', '10.0.0.1']
>>> MininetHost("tb1a2bn0", pid=4242).argv(["true"])
['mnexec', '-a', '4242', 'true']
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from testbed.errors import HostError
from testbed.host.procs import Helper
from testbed.host.redact import shown, text


class Host:
    """Something with a network namespace that runs commands."""

    name: str

    def argv(self, argv: Sequence[str]) -> list[str]:
        """``argv`` prefixed so that it runs inside this host's namespace."""
        raise NotImplementedError

    def run(self, argv: Sequence[str], timeout: float = 30.0,
            stdin: str | None = None) -> subprocess.CompletedProcess:
        """Run a short command inside the host and wait for it (text output); one that
        does not finish in ``timeout`` or cannot start is a :class:`HostError`. The one
        way the lab runs a short command: every other wrapper calls this."""
        full = self.argv(argv)
        try:
            return subprocess.run(full, capture_output=True, text=True, input=stdin,
                                  timeout=timeout)
        except subprocess.TimeoutExpired:
            raise HostError(f"{shown(full)}: no answer in {timeout:g} s") from None
        except OSError as exc:  # the program is missing
            raise HostError(f"{shown(full)}: {text(str(exc))}") from None

    def check(self, argv: Sequence[str], timeout: float = 30.0,
              stdin: str | None = None) -> str:
        """:meth:`run`, raising :class:`HostError` with the command's stderr on failure."""
        done = self.run(argv, timeout=timeout, stdin=stdin)
        if done.returncode:
            raise HostError(f"{self.name}: {shown(argv)}: "
                            f"{text((done.stderr or done.stdout).strip()[-300:])}")
        return done.stdout

    def spawn(self, name: str, argv: Sequence[str], *, pid_dir: Path, log: Path | None = None,
              env: dict[str, str] | None = None, stdout_pipe: bool = False,
              stdout_file: Path | None = None) -> Helper:
        """Start a long-running helper inside the host, in its own process group."""
        return Helper(name, self.argv(argv), pid_dir=pid_dir, log=log, env=env,
                      stdout_pipe=stdout_pipe, stdout_file=stdout_file)

    def ping(self, ip: str, count: int = 1, wait_s: float = 1.0,
             interval_s: float = 1.0) -> bool:
        """``count`` echo requests ``interval_s`` apart, each answered within ``wait_s``."""
        done = self.run(["ping", "-n", "-q", "-c", str(count), "-i", f"{interval_s:g}",
                         "-W", f"{wait_s:g}", ip],
                        timeout=count * max(wait_s, interval_s) + 5)
        return done.returncode == 0


@dataclass(frozen=True)
class MininetHost(Host):
    """A Mininet node: its shell's pid holds the namespace."""

    name: str
    pid: int

    def argv(self, argv: Sequence[str]) -> list[str]:
        return ["mnexec", "-a", str(self.pid), *argv]


@dataclass(frozen=True)
class NetnsHost(Host):
    """A named network namespace (``ip netns``)."""

    name: str

    def argv(self, argv: Sequence[str]) -> list[str]:
        return ["ip", "netns", "exec", self.name, *argv]


@dataclass(frozen=True)
class RootHost(Host):
    """The host's own namespace (switch ports live there)."""

    name: str = "root"

    def argv(self, argv: Sequence[str]) -> list[str]:
        return list(argv)
