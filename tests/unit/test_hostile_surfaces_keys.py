"""Hostile surfaces, crafted: faults that outlast the run, NUL and newline bytes in the
strings that reach a command line, and key material in the error paths of the commands
that carry it.

A scenario case is refused by ``testbed validate`` with exit 2 and one short line naming
the field; a key case makes a command fail (or hang, or go missing) the worst way, its
tool echoing what it was given, and the error must still not hold the key.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from testbed import errors
from testbed.core.cli import main

REPO = Path(__file__).resolve().parents[2]
BASE = "name: h\nagents: {enabled: false}\nduration_s: 10\n"
LINK = "target: p0l0-p0s0"


def backbone(**change) -> str:
    doc = yaml.safe_load((REPO / "scenarios" / "cross-region-writes.yaml").read_text())
    for key, value in change.items():
        section, index, field = key.split("__")
        doc["backbone"][section][int(index)][field] = value
    return yaml.safe_dump(doc)


SCENARIOS = {
    # faults that outlast the run (a link_flap's last link_up is at
    # at_s + (count - 1/2) * period_s)
    "flap past the end": (BASE + f"faults: [{{at_s: 8, action: link_flap, {LINK}, "
                                 "period_s: 2, count: 3}]\n", "faults[0].count",
                          "at most 1 fit"),
    "flap whose first link_up is past the end": (
        BASE + f"faults: [{{at_s: 9.5, action: link_flap, {LINK}, period_s: 2, count: 1}}]\n",
        "faults[0].period_s", "past the run's 10 s"),
    "flap whose last link_up is the end": (
        BASE + f"faults: [{{at_s: 7, action: link_flap, {LINK}, period_s: 2, count: 2}}]\n",
        "faults[0].count", "link_up at 10 s"),
    "flap of the default period and count past the end": (
        BASE + f"faults: [{{at_s: 8, action: link_flap, {LINK}}}]\n", "faults[0].count",
        "at most 2 fit"),
    "flap of a variant past the end": (
        BASE + f"variants: [{{name: a, faults: [{{at_s: 1, action: link_flap, {LINK}, "
               "period_s: 1, count: 10}]}]\n", "variants[0].faults[0].count", "at most 9"),
    "flap past a shortened run": (
        "name: h\nagents: {enabled: false}\nduration_s: 3\n"
        f"faults: [{{at_s: 2, action: link_flap, {LINK}, period_s: 0.8, count: 2}}]\n",
        "faults[0].count", "past the run's 3 s"),
    # NUL bytes: no argv, file name or interface name can carry one
    "NUL in a command's program": (
        BASE + 'workloads: [{kind: command, host: n0, argv: ["pi\\0ng", "-c1", "{n1}"]}]\n',
        "workloads[0].argv[0]", "NUL byte"),
    "NUL in a command's argument": (
        BASE + 'workloads: [{kind: command, host: n0, argv: [ping, "-c\\x001", "{n1}"]}]\n',
        "workloads[0].argv[1]", "NUL byte"),
    "NUL after an address placeholder": (
        BASE + 'workloads: [{kind: command, host: 0, argv: [ping, "{n1}\\0"]}]\n',
        "workloads[0].argv[1]", "NUL byte"),
    "NUL in a variant's command": (
        BASE + 'variants: [{name: a, workloads: [{kind: command, host: n1, '
               'argv: [sh, -c, "true\\0; reboot"]}]}]\n',
        "variants[0].workloads[0].argv[2]", "NUL byte"),
    "NUL in a replayed capture's path": (
        BASE + 'workloads: [{kind: replay, host: n0, pcap: "x.pcap\\0"}]\n',
        "workloads[0].pcap", "NUL byte"),
    "NUL in a fault target": (
        BASE + 'faults: [{at_s: 1, action: link_down, target: "p0l0-p0s0\\0"}]\n',
        "faults[0].target", "NUL byte"),
    "NUL in a server": (BASE + 'servers: ["lab\\0@host"]\n', "servers[0]", "NUL byte"),
    "NUL in a key": (BASE + '"topology\\0": {nodes: 4}\n', "key holds a NUL", "NUL byte"),
    "NUL in a MACsec backend": ('name: h\nmacsec: {backend: "userspace\\0"}\n',
                                "macsec.backend", "NUL byte"),
    "NUL in a PoP name": (backbone(pops__0__name="ny\0c"), "backbone.pops[0].name",
                          "NUL byte"),
    # newlines where a name or an address reaches a command line
    "newline in a command's host": (
        BASE + 'workloads: [{kind: command, host: "n0\\n", argv: [ping, "{n1}"]}]\n',
        "workloads[0].host", "no host"),
    "newline in an iperf3 server": (
        BASE + 'workloads: [{kind: iperf3, client: n0, server: "n1\\nn2"}]\n',
        "workloads[0].server", "no host"),
    "newline in a replayed capture's path": (
        BASE + 'workloads: [{kind: replay, host: n0, pcap: "x\\n.pcap"}]\n',
        "workloads[0].pcap", "no such file"),
    "newline in a captured port": (BASE + 'capture: ["n0p0r0\\n"]\n', "capture[0]",
                                   "no port"),
    "newline in a fault target": (
        BASE + 'faults: [{at_s: 1, action: link_down, target: "p0l0-p0s0\\nx"}]\n',
        "faults[0].target", "no link"),
    "newline in a server": (BASE + 'servers: ["host\\n-oProxyCommand=x"]\n', "servers[0]",
                            "not a host name"),
    "newline in a PoP name": (backbone(pops__0__name="nyc\nx"), "backbone.pops[0].name",
                              "must be"),
}


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_hostile_scenario_is_one_line_naming_the_field_and_exit_2(name, tmp_path, capsys):
    text, field, words = SCENARIOS[name]
    path = tmp_path / "s.yaml"
    path.write_text(text)
    assert main(["validate", str(path)]) == 2
    out = capsys.readouterr()
    lines = out.err.strip().splitlines()
    assert out.out == "" and len(lines) == 1, out
    assert field in lines[0] and words in lines[0] and len(lines[0]) < 400, lines[0]


def test_a_newline_in_a_commands_argument_is_one_argument(tmp_path, capsys):
    """Not hostile: an argv goes to execve word by word (``sh -c`` with a script of two
    lines), never through a shell's or ip -batch's splitting, so a newline stays in its
    argument."""
    from testbed.core.scenario import load

    path = tmp_path / "s.yaml"
    path.write_text(BASE + 'workloads: [{kind: command, host: n0, '
                           'argv: [sh, -c, "echo a\\necho b"]}]\n')
    assert main(["validate", str(path)]) == 0
    variant, = load(path).variants
    assert variant.workloads[0]["argv"] == ["sh", "-c", "echo a\necho b"]


# -- key material in error paths ----------------------------------------------------------
KEY = "3c" * 16  # a 128-bit SAK
LONG_KEY = "a7" * 32  # a 256-bit SAK
ARGV = ["ip", "macsec", "add", "tbkz1ta", "tx", "sa", "0", "pn", "1", "on", "key", "00", KEY]


class Failing:
    """``subprocess.run`` as a command that fails the worst way: it echoes its argv and
    standard input to stderr (or hangs, or is missing)."""

    def __init__(self, how: str = "echo") -> None:
        self.how = how

    def __call__(self, argv, *, input=None, timeout=None, **_kw):  # noqa: A002
        if self.how == "hang":
            raise subprocess.TimeoutExpired(argv, timeout or 1)
        if self.how == "missing":
            raise FileNotFoundError(2, f"No such file or directory: {argv[0]!r} {argv}")
        lines = (input or "").splitlines()
        err = f"Error: bad command {' '.join(argv)}\n" + "".join(
            f"Error: {line}\nCommand failed -:{i + 1}\n" for i, line in enumerate(lines))
        return subprocess.CompletedProcess(argv, 2, "", err)


def _netns_run() -> None:
    from testbed.macsec.netns import run

    run(ARGV, netns="tbkz1a")


def _netns_run_batch() -> None:
    from testbed.macsec.netns import run_batch

    run_batch([["ip", "link", "set", "tbkz1va", "up"], ARGV], netns="tbkz1a")


def _batch_word_refused() -> None:
    from testbed.macsec.netns import run_batch

    run_batch([[*ARGV[:3], "tbkz1 ta", *ARGV[4:]]], netns="tbkz1a")


def _host_run() -> None:
    from testbed.host.hosts import NetnsHost

    NetnsHost("tbkz1a").run(ARGV)


def _host_check() -> None:
    from testbed.host.hosts import NetnsHost

    NetnsHost("tbkz1a").check(ARGV)


def _secret_commands() -> None:
    from testbed.host.commands import Cmd, run_commands

    run_commands([Cmd("tbkz1a", tuple(ARGV[1:]), secret=True),
                  Cmd("tbkz1b", tuple(ARGV[1:-1]) + (LONG_KEY,), secret=True)])


def _plain_commands() -> None:  # a key in a command someone forgot to mark secret
    from testbed.host.commands import Cmd, run_commands

    run_commands([Cmd("tbkz1a", tuple(ARGV[1:]))])


def _ip() -> None:
    from testbed.host.commands import ip

    ip(ARGV[1:], netns="tbkz1a")


def _in_netns() -> None:
    from testbed.host.commands import in_netns

    in_netns("tbkz1a", ARGV)


def _kernel_link_start() -> None:
    from testbed.macsec.config import LinkConfig
    from testbed.macsec.kernel import KernelMacsecLink

    cfg = LinkConfig.generate("kz1")
    cfg = LinkConfig.from_dict(cfg.public_dict(), keys={"a": {"0": KEY}, "b": {"0": KEY}})
    KernelMacsecLink(cfg, Path("/nonexistent")).start()


def _kernel_link_rotate() -> None:
    from testbed.macsec.config import LinkConfig
    from testbed.macsec.kernel import KernelMacsecLink

    KernelMacsecLink(LinkConfig.generate("kz1"), Path("/nonexistent")).rotate(
        {"a": KEY, "b": KEY})


KEY_PATHS: dict[str, tuple[Callable[[], None], str]] = {
    "ip fails with a key on its command line": (_netns_run, "echo"),
    "ip -batch fails on a key line": (_netns_run_batch, "echo"),
    "ip -batch refuses a word of a key line": (_batch_word_refused, "echo"),
    "a key command hangs": (_host_run, "hang"),
    "a key command's program is missing": (_host_run, "missing"),
    "a host's check of a key command fails": (_host_check, "echo"),
    "secret commands fail side by side": (_secret_commands, "echo"),
    "a key in a command not marked secret": (_plain_commands, "echo"),
    "ip in a namespace fails on a key": (_ip, "echo"),
    "a key command in a namespace fails": (_in_netns, "echo"),
    "a kernel link's set-up fails": (_kernel_link_start, "echo"),
    "a kernel link's rotation fails": (_kernel_link_rotate, "echo"),
    "a kernel link's set-up hangs": (_kernel_link_start, "hang"),
}


@pytest.mark.parametrize("name", sorted(KEY_PATHS))
def test_an_error_never_holds_a_key(name, monkeypatch):
    call, how = KEY_PATHS[name]
    monkeypatch.setattr(subprocess, "run", Failing(how))
    with pytest.raises(errors.TestbedError) as err:
        call()
    message = str(err.value)
    assert KEY not in message and LONG_KEY not in message, message
    assert KEY.upper() not in message and message.strip(), message


def test_redaction_keeps_what_names_the_command():
    from testbed.host.redact import shown, text

    assert shown(ARGV) == " ".join(ARGV[:-1]) + " <redacted>"
    assert text(f"Error: {' '.join(ARGV[1:])}\n") == (
        f"Error: {' '.join(ARGV[1:-1])} <redacted>\n")
    assert shown(["ip", "link", "set", "tbkz1ta", "address", "02:74:62:00:01:01"]) == \
        "ip link set tbkz1ta address 02:74:62:00:01:01"
    sci = "0274620001010001"  # 16 hex digits: an SCI stays
    assert text(f"rx sci {sci} on") == f"rx sci {sci} on"
    assert os.urandom(16).hex() not in text(f"x {os.urandom(16).hex()} y")
