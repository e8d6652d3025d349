"""Commands in namespaces: ``ip``/``tc`` argv lists (never text a shell or ``ip -batch``
would split), many at once side by side per namespace, key material on standard input
only; a command that hangs or is missing is a :class:`HostError`."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

from testbed.errors import HostError
from testbed.host.hosts import NetnsHost, RootHost
from testbed.host.redact import shown, text


def run(argv: list[str], stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """``argv`` in the root namespace (:meth:`testbed.host.hosts.Host.run`)."""
    return RootHost().run(argv, stdin=stdin)


def ip(args: list[str], netns: str | None = None, check: bool = True) -> str:
    argv = ["ip"] + (["-n", netns] if netns else []) + args
    done = run(argv)
    if check and done.returncode:
        raise HostError(f"{shown(argv)}: {text(done.stderr.strip())}")
    return done.stdout


class Cmd(NamedTuple):
    """One ``ip`` or ``tc`` command in a namespace (``None``: the root one), as an argv.

    A name is one argument whatever it holds: no command is ever text that a shell or
    ``ip -batch`` would split. ``secret`` commands carry key material, which must not
    show in ``/proc/PID/cmdline``: they go to ``ip -batch`` on standard input, each
    argument checked to be the one word ``ip`` reads back (:func:`batch_word`).
    """

    ns: str | None
    argv: tuple[str, ...]
    secret: bool = False


def batch_word(arg: str) -> str:
    """``arg`` as one word of an ``ip -batch`` line, or ValueError: ``ip`` splits lines at
    blanks and reads quotes, backslashes and ``#`` specially, so only plain words pass.

    >>> batch_word("tb1a2bl0a")
    'tb1a2bl0a'
    >>> batch_word("p1 link del dev eth0 #")
    Traceback (most recent call last):
    ...
    ValueError: not one ip -batch word: 'p1 link del dev eth0 #'
    """
    if not _BATCH_WORD.fullmatch(arg):
        raise ValueError(f"not one ip -batch word: {arg[:40]!r}")
    return arg


_BATCH_WORD = re.compile(r"[A-Za-z0-9_.:/+-]+")


def _one(tool: str, cmd: Cmd) -> str | None:
    """Run ``cmd``; its error text, or None when it succeeded."""
    head = [tool] + (["-n", cmd.ns] if cmd.ns else [])
    if cmd.secret:
        done = run([*head, "-batch", "-"],
                    stdin=" ".join(batch_word(a) for a in cmd.argv) + "\n")
    else:
        done = run([*head, *cmd.argv])
    return f"{shown([*head, *cmd.argv])}: {text(done.stderr.strip())}" if done.returncode \
        else None


def run_commands(cmds: Iterable[Cmd], tool: str = "ip") -> None:
    """Run every command, each namespace's in order and the namespaces side by side (so
    the ends of a link change state together); all of them even when one fails, then
    one :class:`HostError` naming the failures."""
    per_ns: dict[str | None, list[Cmd]] = {}
    for cmd in cmds:
        per_ns.setdefault(cmd.ns, []).append(cmd)
    if not per_ns:
        return

    def run_all(seq: list[Cmd]) -> list[str]:
        return [err for cmd in seq if (err := _one(tool, cmd))]

    with ThreadPoolExecutor(max_workers=min(16, len(per_ns))) as pool:
        errors = [err for errs in pool.map(run_all, per_ns.values()) for err in errs]
    if errors:
        raise HostError(f"{tool}: {'; '.join(errors[:5])}"
                        + (f" (and {len(errors) - 5} more)" if len(errors) > 5 else ""))


def cmd(ns: str | None, *argv: str, secret: bool = False) -> Cmd:
    return Cmd(ns, argv, secret)


def in_netns(netns: str, argv: list[str], check: bool = True,
           stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    done = NetnsHost(netns).run(argv, stdin=stdin)
    if check and done.returncode:
        raise HostError(f"{netns}: {shown(argv)}: {text(done.stderr.strip())}")
    return done
