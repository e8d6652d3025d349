"""Every error the CLI can meet is one of its typed errors: one line, not a traceback."""

from __future__ import annotations

import subprocess

import pytest

from testbed import errors
from testbed.core import cli
from testbed.macsec import errors as macsec_errors


@pytest.mark.parametrize("name", ["MacsecError", "ConfigError", "FrameError", "TransmitError",
                                  "BackendError"])
def test_macsec_errors_are_testbed_errors(name):
    assert issubclass(getattr(macsec_errors, name), errors.TestbedError)


def test_a_backend_failure_ends_in_one_line(monkeypatch, capsys):
    def doctor(args):
        raise macsec_errors.BackendError("ip netns add tb1a2ba failed (1): File exists")

    monkeypatch.setattr(cli, "cmd_doctor", doctor)
    assert cli.main(["doctor"]) == 1
    err = capsys.readouterr().err
    assert err == "testbed: ip netns add tb1a2ba failed (1): File exists\n"


def test_macsec_commands_that_hang_or_are_missing_are_backend_errors(monkeypatch):
    from testbed.macsec import netns

    with pytest.raises(macsec_errors.BackendError, match="no-such-program"):
        netns.run(["/nonexistent/no-such-program"])

    def hang(*args, **kwargs):
        raise subprocess.TimeoutExpired(args[0], kwargs.get("timeout"))

    monkeypatch.setattr(netns.subprocess, "run", hang)
    with pytest.raises(macsec_errors.BackendError, match="no answer in"):
        netns.run(["ip", "link"])


def test_backbone_commands_that_hang_are_host_errors(monkeypatch):
    from testbed.host import commands

    def hang(*args, **kwargs):
        raise subprocess.TimeoutExpired(args[0], kwargs.get("timeout"))

    monkeypatch.setattr(commands.subprocess, "run", hang)
    with pytest.raises(errors.HostError, match="no answer"):
        commands.ip(["link"])
    with pytest.raises(errors.HostError, match="no answer"):
        commands.in_netns("tb1a2bnyc", ["true"])
