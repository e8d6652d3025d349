"""Base of the FRR daemons: render a config from the template beside the module,
check it with ``vtysh --dryrun`` and start the daemon in the router's namespace.

FRR 8.4's daemons accept ``-C`` but exit 0 even on unknown commands; ``vtysh -C -f``
exits 2 with the offending line, so that is the dry run used here.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from string import Template
from typing import ClassVar

from testbed.errors import HostError, TestbedError
from testbed.host.procs import Helper

from .router import Router, RouterPaths

FRR_DIR = Path("/usr/lib/frr")
VTYSH = "vtysh"
FRR_USER = "frr"
FD_LIMIT = 1024  # FRR sizes tables by the fd limit; a high ulimit costs memory per daemon


class FrrConfigError(TestbedError):
    """A rendered FRR config failed the dry run."""


def template(name: str) -> Template:
    """A ``string.Template`` from this package's folder."""
    return Template((Path(__file__).parent / name).read_text())


def vtysh(router: Router, paths: RouterPaths, command: str, timeout: float = 10.0) -> str:
    """Output of one ``vtysh -c`` command against the router's own daemons ("" on error)."""
    argv = ["ip", "netns", "exec", router.netns, VTYSH, "--vty_socket", str(paths.vty_dir),
            "-c", command]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return ""
    return done.stdout if done.returncode == 0 else ""


class FrrDaemon:
    """One FRR daemon of one router; subclasses set the class constants and render()."""

    NAME: ClassVar[str] = ""
    TEMPLATE: ClassVar[str] = ""
    DEPENDS: ClassVar[tuple[type[FrrDaemon], ...]] = ()

    def __init__(self, router: Router, paths: RouterPaths) -> None:
        self.router = router
        self.paths = paths
        self.helper: Helper | None = None

    @property
    def binary(self) -> Path:
        return FRR_DIR / self.NAME

    def render(self) -> str:
        raise NotImplementedError

    def write(self) -> Path:
        path = self.paths.config(self.NAME)
        path.write_text(self.render())
        try:
            shutil.chown(path, FRR_USER, FRR_USER)
        except LookupError:
            raise HostError(f"no user or group {FRR_USER!r}: apt-get install frr") from None
        return path

    def dry_run(self) -> None:
        """Check the written config with ``vtysh -C``; raise :class:`FrrConfigError`."""
        path = self.paths.config(self.NAME)
        try:
            done = subprocess.run([VTYSH, "-C", "-f", str(path)], capture_output=True,
                                  text=True, timeout=30)
        except subprocess.TimeoutExpired:
            raise FrrConfigError(f"{self.router.name} {self.NAME}: the dry run of {path} "
                                 "did not finish in 30 s") from None
        except OSError as exc:
            raise HostError(f"{VTYSH}: {exc}: apt-get install frr") from None
        if done.returncode != 0:
            raise FrrConfigError(f"{self.router.name} {self.NAME}: {path} failed the dry run: "
                                 f"{(done.stdout + done.stderr).strip()}")

    def argv(self) -> list[str]:
        p = self.paths
        return [str(self.binary), "-f", str(p.config(self.NAME)), "-i", str(p.pid(self.NAME)),
                "-z", str(p.zserv), "--vty_socket", str(p.vty_dir), "-P", "0",
                "-u", FRR_USER, "-g", FRR_USER, "--limit-fds", str(FD_LIMIT),
                "--log", f"file:{p.log(self.NAME)}", "--log-level", "notifications"]

    def start(self, helper_dir: Path) -> Helper:
        """Start in the router's namespace, in its own process group."""
        if not self.binary.exists():
            raise HostError(f"{self.binary} missing: apt-get install frr")
        argv = ["ip", "netns", "exec", self.router.netns, *self.argv()]
        self.helper = Helper(f"{self.router.name}-{self.NAME}", argv, pid_dir=helper_dir,
                             log=self.paths.root / f"{self.NAME}.stderr")
        return self.helper

    def ready(self) -> bool:
        """Whether the daemon answers: its vty socket exists and it is alive."""
        return (self.helper is not None and self.helper.alive()
                and self.paths.vty(self.NAME).exists())
