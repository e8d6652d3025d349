"""The backbone runs its ``ip``/``tc`` commands as argv lists: a name is one argument
whatever it holds, and key material reaches ``ip`` on standard input only."""

from __future__ import annotations

import subprocess

import pytest

from testbed.errors import HostError
from testbed.host import commands


@pytest.fixture
def calls(monkeypatch):
    seen = []

    def fake_run(argv, stdin=None):
        seen.append((argv, stdin))
        failed = "fail" in argv
        return subprocess.CompletedProcess(argv, 1 if failed else 0, "", "boom" if failed else "")

    monkeypatch.setattr(commands, "run", fake_run)
    return seen


def test_a_hostile_name_stays_one_argument(calls):
    hostile = "p1 link del dev eth0 #"
    commands.run_commands([commands.cmd("tbx" + hostile, "link", "set", hostile, "up")])
    (argv, stdin), = calls
    assert argv == ["ip", "-n", "tbx" + hostile, "link", "set", hostile, "up"]
    assert stdin is None


def test_secret_commands_go_to_stdin_and_refuse_what_ip_would_split(calls):
    key = "00112233445566778899aabbccddeeff"
    commands.run_commands([commands.cmd("tbxp1", "macsec", "add", "tbxl0a", "tx", "sa", "0", "on",
                            "key", "00", key, secret=True)])
    (argv, stdin), = calls
    assert argv == ["ip", "-n", "tbxp1", "-batch", "-"]
    assert key not in " ".join(argv) and stdin.split() == [
        "macsec", "add", "tbxl0a", "tx", "sa", "0", "on", "key", "00", key]
    with pytest.raises(ValueError, match="not one ip -batch word"):
        commands.run_commands([commands.cmd("tbxp1", "link", "set", "a b", "up", secret=True)])


def test_every_command_runs_and_the_failures_are_named(calls):
    cmds = [commands.cmd("tbxp1", "link", "set", "fail", "up"),
            commands.cmd("tbxp1", "link", "set", "x", "up"),
            commands.cmd("tbxp2", "link", "set", "y", "up")]
    with pytest.raises(HostError, match="ip -n tbxp1 link set fail up: boom"):
        commands.run_commands(cmds, tool="ip")
    assert len(calls) == 3
    # one namespace's commands keep their order
    order = [argv[-2] for argv, _ in calls if argv[2] == "tbxp1"]
    assert order == ["fail", "x"]
