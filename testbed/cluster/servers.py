"""The other machines of a lab over several: who they are, the one ssh connection the lab
keeps to each, and the checks each passes before anything is made on it.

A server is written as ``[user@]host[:port]`` (the scenario's ``servers:`` or
``--servers``); the machine that runs ``testbed`` is always the first machine and is not
listed. Each server is reached over ssh without a password (``BatchMode``: a key, never
a prompt) and runs the lab as root, or through ``sudo -n``. Every command goes through
one master connection per server (``ControlMaster``; its socket in the run's folder), the
way Mininet's cluster edition shares its connections, and that connection also carries
the controller: an ssh reverse forward from a port on the server's loopback to the
controller's on this machine's loopback, so that nothing listens on an address another
machine could reach.

>>> parse("lab@gpu2:2222", "servers[0]")
Server(user='lab', host='gpu2', port=2222)
>>> str(parse("10.0.0.2", "servers[1]")), parse("10.0.0.2", "x").dest
('10.0.0.2', '10.0.0.2')
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
import shlex
import socket
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from testbed import REPO
from testbed.errors import ConfigError, HostError
from testbed.host.procs import dies_with_parent
from testbed.host.redact import shown

#: every ssh the lab starts: never a prompt, a dead peer noticed within 20 s
SSH_OPTIONS = ("-o", "BatchMode=yes", "-o", "ConnectTimeout=10",
               "-o", "ServerAliveInterval=5", "-o", "ServerAliveCountMax=4")
#: the packages whose code must be the same on every machine of a lab
PACKAGES = ("testbed", "controllers", "topologies", "traffic")
#: the checkout this process runs from: a server runs the lab from the same path
ROOT = REPO
#: a host name or IPv4 address, and a user name, each matched whole (``fullmatch``: a
#: ``$`` would also match before a final newline, which would reach ssh's arguments)
_HOST = re.compile(r"[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?")
_USER = re.compile(r"[a-z_][a-z0-9_.-]*")


@dataclass(frozen=True)
class Server:
    """One machine of the lab besides this one."""

    user: str | None
    host: str
    port: int | None

    @property
    def dest(self) -> str:
        return f"{self.user}@{self.host}" if self.user else self.host

    def __str__(self) -> str:
        return self.dest + (f":{self.port}" if self.port else "")

    def address(self) -> str:
        """The server's IPv4 address (GRE tunnels are between addresses)."""
        try:
            return socket.getaddrinfo(self.host, None, socket.AF_INET)[0][4][0]
        except (socket.gaierror, IndexError):
            raise HostError(f"server {self}: {self.host} has no IPv4 address here") from None


def parse(text: str, field: str) -> Server:
    """``[user@]host[:port]``, or ConfigError naming ``field``."""
    if not isinstance(text, str) or not text.strip():
        raise ConfigError(field, f"a server is written [user@]host[:port], got {text!r}")
    user, _, rest = text.strip().rpartition("@")
    host, _, port = rest.partition(":")
    if user and not _USER.fullmatch(user):
        raise ConfigError(field, f"{user!r} is not a user name")
    if not _HOST.fullmatch(host):
        raise ConfigError(field, f"{host!r} is not a host name or IPv4 address")
    if port and not (port.isascii() and port.isdigit() and 0 < int(port) < 65536):
        raise ConfigError(field, f"port {port!r} is not 1-65535")
    if host in ("localhost",) or host.startswith("127."):
        raise ConfigError(field, f"{host} is this machine, which is always the first; "
                                 "list the other machines")
    return Server(user or None, host, int(port) if port else None)


def parse_all(values: Sequence[str] | str | None, field: str = "servers") -> list[Server]:
    """A list (or a comma-separated string) of servers, each once."""
    if values is None:
        return []
    if isinstance(values, str):
        values = [v for v in values.split(",") if v.strip()]
    servers = [parse(v, f"{field}[{i}]") for i, v in enumerate(values)]
    for i, server in enumerate(servers):
        if server.host in [s.host for s in servers[:i]]:
            raise ConfigError(f"{field}[{i}]", f"{server.host} is listed twice")
    return servers


@functools.cache
def code_digest(root: Path = ROOT) -> str:
    """A digest of the lab's Python code: two machines with the same digest run the same
    lab (a version number does not change with an edit in a checkout). Read once a
    process."""
    digest = hashlib.sha256()
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def source_address(address: str) -> str:
    """This machine's address on the route to ``address`` (the local end of its
    tunnels)."""
    done = subprocess.run(["ip", "-j", "route", "get", address], capture_output=True,
                          text=True)
    try:
        return json.loads(done.stdout)[0]["prefsrc"]
    except (ValueError, IndexError, KeyError):
        raise HostError(f"no route from here to {address}: "
                        f"{done.stderr.strip() or 'no source address'}") from None


class Connection:
    """The lab's ssh master connection to one server, and the commands through it."""

    #: a part of the fabric on the lab's own machine (a test's), sharing its run folder
    local = False

    def __init__(self, server: Server, control: Path):
        self.server = server
        self.control = control  # the master's socket (a file: nothing listens on a port)
        self.master: subprocess.Popen | None = None
        self.sudo: list[str] = []
        self._log = control.with_suffix(".log")

    def _ssh(self) -> list[str]:
        port = ["-p", str(self.server.port)] if self.server.port else []
        return ["ssh", *SSH_OPTIONS, *port, "-o", f"ControlPath={self.control}"]

    def open(self, timeout_s: float = 20.0) -> None:
        """Start the master connection; HostError naming the server when it fails."""
        with open(self._log, "wb") as log:
            self.master = subprocess.Popen(
                [*self._ssh(), "-o", "ControlMaster=yes", "-o", "ControlPersist=no", "-N",
                 self.server.dest], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=log, start_new_session=True, preexec_fn=dies_with_parent)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.master.poll() is not None:
                raise HostError(f"server {self.server}: ssh: {self._last_words()}")
            check = subprocess.run([*self._ssh(), "-O", "check", self.server.dest],
                                   capture_output=True)
            if check.returncode == 0:
                break
            time.sleep(0.1)
        else:
            self.close()
            raise HostError(f"server {self.server}: ssh did not connect in {timeout_s:g} s")
        uid = self.run(["id", "-u"], root=False)
        if uid.returncode or not uid.stdout.strip().isdigit():
            raise HostError(f"server {self.server}: ssh: id -u: {uid.stderr.strip()[-200:]}")
        if int(uid.stdout) != 0:
            self.sudo = ["sudo", "-n"]
            done = self.run(["true"])
            if done.returncode:
                raise HostError(f"server {self.server}: sudo -n asks for a password (the lab "
                                "needs passwordless sudo there): "
                                f"{done.stderr.strip()[-160:]}")

    def _last_words(self) -> str:
        try:
            lines = self._log.read_text(errors="replace").strip().splitlines()
        except OSError:
            lines = []
        return lines[-1] if lines else "the connection ended"

    def argv(self, remote: Sequence[str], *, root: bool = True) -> list[str]:
        """The local command that runs ``remote`` on the server (as root)."""
        words = [*self.sudo, *remote] if root else list(remote)
        return [*self._ssh(), "-o", "ControlMaster=no", self.server.dest, "--",
                shlex.join(words)]

    def run(self, remote: Sequence[str], *, root: bool = True, timeout: float = 60.0,
            stdin: str | None = None) -> subprocess.CompletedProcess:
        try:
            return subprocess.run(self.argv(remote, root=root), capture_output=True,
                                  text=True, input=stdin, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise HostError(f"server {self.server}: {shown(remote)[:120]}: no answer "
                            f"in {timeout:g} s") from None

    def forward(self, port: int) -> int:
        """A port on the server's loopback that reaches ``port`` on this machine's
        loopback, through the master connection (ssh -R)."""
        done = subprocess.run([*self._ssh(), "-O", "forward", "-R",
                               f"127.0.0.1:0:127.0.0.1:{port}", self.server.dest],
                              capture_output=True, text=True)
        words = done.stdout.split()
        if done.returncode or not words or not words[0].isdigit():
            raise HostError(f"server {self.server}: ssh could not forward the controller: "
                            f"{done.stderr.strip()[-200:]}")
        return int(words[0])

    def python(self) -> list[str]:
        """The lab's Python on the server (the venv of the same checkout path)."""
        return [str(ROOT / ".venv" / "bin" / "python")]

    def close(self) -> None:
        """End the master connection (every session through it ends with it)."""
        if self.master is None:
            return
        subprocess.run([*self._ssh(), "-O", "exit", self.server.dest], capture_output=True)
        try:
            self.master.wait(5)
        except subprocess.TimeoutExpired:
            self.master.kill()
            self.master.wait()
        self.master = None


#: in a run's folder: the servers its fabric was spread over (``testbed clean`` asks
#: each to remove what the run left there)
SERVERS_FILE = "servers.json"


def record(folder: Path, conns: Sequence[Connection]) -> None:
    (folder / SERVERS_FILE).write_text(json.dumps(
        [{"server": str(c.server), "sudo": bool(c.sudo)} for c in conns]))


def clean_servers(folder: Path, run_id: str, dry_run: bool) -> list[str]:
    """``testbed clean --run RUN_ID --force`` on every server a dead run was spread over
    (its own ssh, the run's master connection having died with the run); what each
    removed, or why it could not be asked."""
    try:
        entries = json.loads((folder / SERVERS_FILE).read_text())
    except (OSError, ValueError):
        return []
    lines = []
    for m, entry in enumerate(entries, start=1):
        # the run's master socket is gone with it: ssh then makes a connection of its own
        conn = Connection(parse(entry["server"], "server"), folder / f"ssh-{m}")
        conn.sudo = ["sudo", "-n"] if entry.get("sudo") else []
        server = conn.server
        try:
            done = conn.run([*conn.python(), "-m", "testbed.core.cli", "clean", "--run",
                             run_id, "--force", *(["--dry-run"] if dry_run else [])],
                            timeout=120)
        except HostError:
            lines.append(f"server {server}: no answer in 120 s: what the run left there stays")
            continue
        if done.returncode:
            lines.append(f"server {server}: not cleaned ({done.stderr.strip()[-160:]})")
            continue
        lines += [f"server {server}: {line}" for line in done.stdout.splitlines()
                  if line.startswith(("removed", "would remove"))]
    return lines


def check(conn: Connection, *, run_id: str, peers: Sequence[str]) -> dict:
    """The server runs the same lab, as root, with Mininet, Open vSwitch, a tunnel kind
    and a route to every ``peers`` address; HostError naming the server and the first
    problem otherwise. Returns what it found (:func:`testbed.cluster.remote.check`)."""
    remote = [*conn.python(), "-m", "testbed.cluster.remote", "check", "--run-id", run_id,
              *[w for p in peers for w in ("--peer", p)]]
    done = conn.run(remote, timeout=90)
    where = f"server {conn.server}"
    if done.returncode == 127 or "No such file" in done.stderr:
        raise HostError(f"{where}: no lab at {ROOT} (check it out there at the same path "
                        "and run make setup)")
    try:
        found = json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise HostError(f"{where}: its lab's check failed: "
                        f"{(done.stderr or done.stdout).strip()[-200:]}") from None
    if found["digest"] != code_digest():
        raise HostError(f"{where}: its lab's code differs from this machine's (digest "
                        f"{found['digest']}, here {code_digest()}): the same commit on both")
    if found["problems"]:
        raise HostError(f"{where}: {found['problems'][0]}")
    return found
