"""Where the SAKs go when a protected link is built, with every command stubbed (no root):
to ``ip`` on standard input and to the forwarders through an inherited memory file, never
on a command line (``/proc/PID/cmdline`` is anyone's to read) nor into ``link.json``."""

from __future__ import annotations

import json
import os
import subprocess
from contextlib import ExitStack
from pathlib import Path

import pytest

from testbed.backbone import secure
from testbed.backbone.net import BackboneNet
from testbed.macsec import link as link_mod
from testbed.macsec.config import LinkConfig
from testbed.macsec.kernel import KernelMacsecLink, MixedLink
from testbed.macsec.link import UserspaceLink
from topologies.backbone import small_backbone

#: no process has this pid (pid_max is at most 2^22): stopping a stand-in stops nothing
NO_PID = (1 << 22) + 1


class StandIn:
    """A started process that is not: its argv, and what it was handed in ``pass_fds``."""

    pid = NO_PID
    stdout = None

    def __init__(self, argv, *, stdin=None, pass_fds=(), **_kw) -> None:
        self.argv = [str(a) for a in argv]
        self.fds = {fd: os.pread(fd, os.fstat(fd).st_size, 0) for fd in pass_fds}
        # a helper's start gate: keep its read end open, as the program would
        self._gate = os.dup(stdin) if isinstance(stdin, int) and stdin >= 0 else None

    def poll(self) -> None:
        return None

    def wait(self, timeout: float | None = None) -> int:
        if self._gate is not None:
            os.close(self._gate)
            self._gate = None
        return 0


class Commands:
    """Every command the lab starts, recorded: ``subprocess.run`` (short commands: argv
    and standard input) and ``subprocess.Popen`` (helpers), none run."""

    def __init__(self) -> None:
        self.runs: list[tuple[list[str], str | None]] = []
        self.started: list[StandIn] = []

    def run(self, argv, *, input=None, **_kw) -> subprocess.CompletedProcess:  # noqa: A002
        self.runs.append(([str(a) for a in argv], input))
        return subprocess.CompletedProcess(argv, 0, "", "")

    def popen(self, argv, **kw) -> StandIn:
        proc = StandIn(argv, **kw)
        self.started.append(proc)
        return proc

    def argvs(self) -> list[list[str]]:
        return [argv for argv, _ in self.runs] + [p.argv for p in self.started]


@pytest.fixture
def commands(monkeypatch) -> Commands:
    rec = Commands()
    monkeypatch.setattr(subprocess, "run", rec.run)
    monkeypatch.setattr(subprocess, "Popen", rec.popen)
    # the forwarders "answer" at once
    monkeypatch.setattr(link_mod, "ctl_request", lambda *a, **k: {"ok": True})
    monkeypatch.setattr(secure, "ctl_request", lambda *a, **k: {"ok": True})
    return rec


def saks_of(*configs: LinkConfig) -> set[str]:
    return {k for cfg in configs for s in "ab" for k in cfg.side(s).keys.values()}


def on_a_command_line(commands: Commands, saks: set[str]) -> list[list[str]]:
    return [argv for argv in commands.argvs() if any(k in " ".join(argv) for k in saks)]


def link_config(suite: str) -> LinkConfig:
    # a run id that is no run's (not tb + 4 hex digits): nothing is registered on the host
    return LinkConfig.generate("kz" + suite[-3:], suite=suite)


@pytest.mark.parametrize("suite", ["gcm-aes-128", "gcm-aes-xpn-256"])
def test_kernel_link_gives_ip_its_keys_on_standard_input(commands, tmp_path, suite):
    cfg = link_config(suite)
    link = KernelMacsecLink(cfg, tmp_path)
    link.start()
    rotated = {s: os.urandom(cfg.cipher_suite.key_len).hex() for s in "ab"}
    assert link.rotate(rotated) == 1
    saks = saks_of(cfg) | set(rotated.values())
    assert len(saks) == 4
    assert on_a_command_line(commands, saks) == []
    given = "".join(stdin or "" for _, stdin in commands.runs)
    assert all(k in given for k in saks)  # they reached ip, through ip -batch
    batches = [argv for argv, stdin in commands.runs if stdin]
    assert batches and all(argv[-3:] == ["ip", "-batch", "-"] for argv in batches), batches
    assert all(argv[:3] == ["ip", "netns", "exec"] for argv in batches)


def test_mixed_link_keys_reach_neither_a_command_line_nor_link_json(commands, tmp_path):
    cfg = link_config("gcm-aes-128")
    link = MixedLink(cfg, tmp_path, kernel_side="a")
    link.start()
    saks = saks_of(cfg)
    assert on_a_command_line(commands, saks) == []
    forwarder, = commands.started  # side b's, behind its TAP
    fd = int(forwarder.argv[forwarder.argv.index("--keys-fd") + 1])
    assert json.loads(forwarder.fds[fd]) == {cfg.run_id: cfg.keys_dict()}
    written = (tmp_path / "link.json").read_text()
    assert not [k for k in saks if k in written]
    assert LinkConfig.from_dict(json.loads(written), keys=cfg.keys_dict()) == cfg


def test_userspace_link_forwarders_read_the_keys_from_the_memory_file(commands, tmp_path):
    """Both forwarders get the same memory file and each reads it whole (pread, from the
    start), however many read it before."""
    from testbed.macsec.forwarder import load_config, read_keys

    cfg = link_config("gcm-aes-xpn-128")
    link = UserspaceLink(cfg, tmp_path)
    link.start()
    assert on_a_command_line(commands, saks_of(cfg)) == []
    assert [p.argv[p.argv.index("--side") + 1] for p in commands.started] == ["a", "b"]
    for proc in commands.started:
        fd = int(proc.argv[proc.argv.index("--keys-fd") + 1])
        keys = json.loads(proc.fds[fd])
        assert load_config(tmp_path / "link.json", keys) == cfg
    # the forwarder's own reading, from a descriptor already read to its end by another
    from testbed.macsec.forwarder import key_channel

    fd = key_channel([cfg])
    os.lseek(fd, 0, os.SEEK_END)
    assert read_keys(fd) == {cfg.run_id: cfg.keys_dict()}


def test_backbone_forwarders_get_their_links_keys_alone_and_no_config_holds_one(
        commands, tmp_path):
    settings = {**secure.DEFAULTS, "enabled": True}
    with ExitStack() as stack:
        net = BackboneNet(small_backbone(), "tbkzzz", tmp_path, stack,
                          macsec=settings, macsec_backend="userspace")
        net.secure.start(stack, timeout=5)
        configs = net.secure.configs
        saks = saks_of(*configs.values())
        assert on_a_command_line(commands, saks) == []
        for path in tmp_path.rglob("link.json"):
            assert not [k for k in saks if k in path.read_text()], path
        assert len(commands.started) == len(net.secure.forwarders)
        for proc in commands.started:
            fd = int(proc.argv[proc.argv.index("--keys-fd") + 1])
            keys = json.loads(proc.fds[fd])
            served = {Path(proc.argv[i + 1]).parent.name
                      for i, word in enumerate(proc.argv) if word == "--link"}
            # the SAKs of the router's own links, and only those
            assert keys == {configs[name].run_id: configs[name].keys_dict()
                            for name in served}
