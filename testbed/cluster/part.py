"""Another machine's part of a fabric over several machines, as this machine holds it:
the ``part`` process there (:mod:`testbed.cluster.remote`), one ssh session whose
requests and answers are JSON lines; an answer that is not one ends the part."""

from __future__ import annotations

import json
import queue
import subprocess
import threading
from pathlib import Path
from typing import NoReturn

from testbed.cluster.remote import READ_MAX_BYTES
from testbed.cluster.servers import Connection
from testbed.errors import BringUpError, ServerAnswerError
from testbed.host.procs import dies_with_parent

#: seconds a server's part may take to come up (its capability probe, its bridges; the
#: lab VMs of make cluster-test run under software emulation)
PART_READY_S = 300.0
PART_STOP_S = 120.0
#: characters of one answer line of a part: a ``read`` answer at its bound, base64, with
#: room for its paths (a longer line ends the part)
ANSWER_MAX_CHARS = READ_MAX_BYTES * 4 // 3 + (4 << 20)


#: what the reader of a part's answers queues for a line over :data:`ANSWER_MAX_CHARS`
_TOO_LONG = object()


class Part:
    """Another machine's part of the fabric: the ``part`` process there, held through
    one ssh session; requests and answers are JSON lines."""

    def __init__(self, conn: Connection, machine: int, log: Path):
        self.conn, self.machine, self.log = conn, machine, log
        self.proc: subprocess.Popen | None = None
        self.lines: queue.Queue = queue.Queue()
        self.hosts: dict[str, int] = {}
        self.times: dict = {}
        self.lock = threading.Lock()  # one request at a time, its answer next

    def start(self, request: dict) -> None:
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                self.conn.argv([*self.conn.python(), "-m", "testbed.cluster.remote", "part"]),
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True,
                start_new_session=True, preexec_fn=dies_with_parent)
        threading.Thread(target=self._read, daemon=True).start()
        self._send(request)

    def _read(self) -> None:
        while line := self.proc.stdout.readline(ANSWER_MAX_CHARS):
            if not line.endswith("\n") and len(line) >= ANSWER_MAX_CHARS:
                self.lines.put(_TOO_LONG)
                return
            self.lines.put(line)
        self.lines.put(None)

    def _send(self, message: dict) -> None:
        try:
            self.proc.stdin.write(json.dumps(message) + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, ValueError):
            pass  # the answer (or its absence) says what happened

    def _answer(self, timeout: float, what: str) -> dict:
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            raise BringUpError(f"server {self.conn.server}: no answer to {what} in "
                               f"{timeout:g} s (see {self.log})") from None
        if line is None:
            raise BringUpError(f"server {self.conn.server}: its part ended (see {self.log})")
        if line is _TOO_LONG:
            self.refuse(f"its answer to {what} is over {ANSWER_MAX_CHARS} characters")
        try:
            message = json.loads(line)
        except ValueError:
            message = None
        if not isinstance(message, dict):
            self.refuse(f"its answer to {what} is not a JSON object")
        if "error" in message:
            raise BringUpError(f"server {self.conn.server}: {message['error']} "
                               f"(see {self.log})")
        return message

    def wait_ready(self, timeout: float = PART_READY_S) -> None:
        ready = self._answer(timeout, "its part's bring-up").get("ready")
        if not isinstance(ready, dict) or not isinstance(ready.get("hosts"), dict):
            self.refuse("its bring-up answered no hosts")
        self.hosts, self.times = ready["hosts"], ready.get("times") or {}

    def ask(self, op: str, timeout: float = 60.0, **fields) -> dict:
        with self.lock:
            self._send({"op": op, **fields})
            answer = self._answer(timeout, op)
            if op not in answer:
                self.refuse(f"its answer to {op} is not one")
            return answer[op]

    def refuse(self, why: str) -> NoReturn:
        """End this part (its session: the part there tears itself down when its input
        ends) and raise :class:`ServerAnswerError` naming the server and ``why``."""
        self.end(why)
        raise ServerAnswerError(f"server {self.conn.server}: {why}; its part was ended "
                                f"(see {self.log})")

    def end(self, why: str) -> None:
        """End the part's session at once, ``why`` in its log."""
        try:
            with open(self.log, "a") as log:
                log.write(f"the lab's machine ended this part: {why}\n")
        except OSError:
            pass
        proc = self.proc
        if proc is not None and proc.poll() is None:
            proc.terminate()

    def stop(self) -> None:
        """Ask the part to tear down, and wait for it (then end the session)."""
        if self.proc is None:
            return
        self._send({"op": "stop"})
        try:
            self.proc.stdin.close()
        except (BrokenPipeError, OSError):
            pass
        try:
            self.proc.wait(PART_STOP_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

