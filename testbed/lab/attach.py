"""Mininet's CLI of a fabric lab, from this terminal: the session is served by the lab's
supervisor (:mod:`testbed.lab.mncli`) over its Unix socket, and relayed here with
readline (Tab completes commands and node names) or, without a terminal, line by line.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import sys

from testbed.errors import HostError


def attach_cli(record: dict, command: str | None = None) -> int:
    """Relay this terminal to the supervisor's Mininet CLI; without a terminal (a pipe, or
    ``command``) run the lines one after the other, each once the prompt is back (a line
    typed ahead would otherwise reach the running command as its input, as in ``mn``)."""
    prompt = f"mininet:{record['name']}> "
    interactive = command is None and sys.stdin.isatty()
    banner = (f"Mininet CLI of lab {record['name']} (nodes also answer to short names: "
              f"{', '.join(list(record['hosts'])[:4])}, ...); 'help', 'exit' or Ctrl-D "
              "to leave (the lab stays up)\n")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(record["socket"])
    except OSError as exc:
        raise HostError(f"lab {record['name']}: its supervisor does not answer "
                        f"({exc.strerror})") from None
    sock.sendall((json.dumps({"op": "cli", "banner": banner if interactive else ""}) + "\n")
                 .encode())
    try:
        if interactive:
            return _relay(sock, prompt, completions(record))
        lines = [command] if command is not None else sys.stdin.read().splitlines()
        return _script(sock, [ln for ln in lines if ln.strip()] + ["exit"], prompt)
    finally:
        sock.close()


def completions(record: dict) -> list[str]:
    """What Tab completes at the CLI's prompt: Mininet's commands and the lab's nodes by
    their short names."""
    from mininet.cli import CLI

    commands = [name[3:] for name in dir(CLI) if name.startswith("do_")]
    return sorted(set(commands) | set(record.get("hosts", {})) | set(record.get("switches", [])))


def completer(words: list[str]):
    """A readline completer over ``words`` (state-indexed, as readline asks)."""
    def complete(text: str, index: int) -> str | None:
        matches = [w + " " for w in words if w.startswith(text)]
        return matches[index] if index < len(matches) else None
    return complete


def _relay(sock: socket.socket, prompt: str, words: list[str]) -> int:
    """An interactive session: lines are read here with readline (Tab completes commands
    and node names, arrows recall earlier lines), output is relayed until the prompt is
    back; while a command runs, typed keys reach it and Ctrl-C interrupts it."""
    import readline

    readline.set_completer(completer(words))
    readline.set_completer_delims(" \t")
    readline.parse_and_bind("tab: complete")
    if not _output_until_prompt(sock, prompt):
        return 0
    while True:
        try:
            line = input(prompt)
        except KeyboardInterrupt:  # at the prompt: a fresh line, as in mn
            sys.stdout.write("\n")
            continue
        except EOFError:
            sys.stdout.write("\n")
            line = "exit"
        _send(sock, (line + "\n").encode())
        if not _output_until_prompt(sock, prompt):
            return 0


def _output_until_prompt(sock: socket.socket, prompt: str, keys: bool = True) -> bool:
    """Write what the session prints until its prompt (not printed: ``input`` does that);
    False when the session has ended. A running command gets Ctrl-C and, with ``keys``,
    what is typed."""
    held, sources = "", [sock] + ([sys.stdin] if keys else [])
    old = signal.signal(signal.SIGINT, lambda *_: _send(sock, b"\x03"))
    try:
        while True:
            ready, _, _ = select.select(sources, [], [])
            if sys.stdin in ready:
                data = os.read(sys.stdin.fileno(), 4096)
                if data:
                    _send(sock, data)
                else:
                    sources.remove(sys.stdin)
            if sock not in ready:
                continue
            data = sock.recv(65536)
            if not data:
                sys.stdout.write(held)
                sys.stdout.flush()
                return False
            held += data.decode(errors="replace")
            if held.endswith(prompt):
                sys.stdout.write(held[:-len(prompt)])
                sys.stdout.flush()
                return True
            keep = next((k for k in range(min(len(prompt), len(held)), 0, -1)
                         if held.endswith(prompt[:k])), 0)  # maybe the prompt's beginning
            sys.stdout.write(held[:len(held) - keep])
            sys.stdout.flush()
            held = held[len(held) - keep:]
    finally:
        signal.signal(signal.SIGINT, old)


def _script(sock: socket.socket, lines: list[str], prompt: str) -> int:
    if not _output_until_prompt(sock, prompt, keys=False):
        return 1
    for line in lines:
        _send(sock, (line + "\n").encode())
        if not _output_until_prompt(sock, prompt, keys=False):
            break
    return 0


def _send(sock: socket.socket, data: bytes) -> None:
    try:
        sock.sendall(data)
    except OSError:
        pass
