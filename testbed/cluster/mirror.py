"""The files that helpers in a server's hosts name, kept the same on this machine and
on that server while they run, through the server's part (:class:`Mirror`); what a
server answers is checked whole before one byte of it is written here."""

from __future__ import annotations

import base64
import binascii
import os
import stat
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from testbed.cluster.part import Part
from testbed.cluster.remote import READ_MAX_BYTES
from testbed.errors import BringUpError, ServerAnswerError


class Mirror:
    """The files that helpers on a server name on their command lines, kept the same on
    this machine and there while they run (every machine has the run's results folder
    and run folder at the same paths; only files under ``roots`` are mirrored).

    A file goes from the machine that has it first to the other: what exists here when
    a helper starts (its configuration, the chain plan) is written there before it
    starts, and again when it changes here (a start signal written later); what a
    helper writes there (its records, a readiness file) comes back every
    :data:`INTERVAL_S`, by what was appended (or whole, when the file was written
    anew), and once more when the helper stops. Every workload that runs in a fabric
    host reads and writes its files this way, unchanged.

    The lab runs as root, so an answer is written here only when every file in it is one
    this machine asked for, still under the roots once resolved (no ``..``, no link on
    the way: each folder and the file itself are opened without following links), at
    an offset this machine already holds (or 0: the file written anew), with at most
    :data:`~testbed.cluster.remote.READ_MAX_BYTES` of strict base64 in all. Anything
    else writes nothing, ends the server's part and raises :class:`ServerAnswerError`
    naming the server.
    """

    INTERVAL_S = 0.2
    #: ``read`` answers one sync takes at most while they come full (the next sync, or
    #: the helper's stop, takes the rest)
    MAX_ROUNDS = 64

    def __init__(self, part: Part, roots: Sequence[str]):
        self.part, self.roots = part, tuple(r.rstrip("/") + "/" for r in roots)
        self.owner: dict[str, str | None] = {}  # "here", "there", or None: not yet made
        self.pushed: dict[str, tuple[int, int]] = {}  # size and mtime last written there
        self.pulled: dict[str, int] = {}  # bytes of it here
        self.refused: ServerAnswerError | None = None  # the answer that ended the part
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.thread: threading.Thread | None = None

    def _mirrored(self, arg: object) -> bool:
        """``arg`` names a file under the roots, written plainly (no ``..``, ``.`` or
        empty part: a path the mirror would resolve elsewhere is not mirrored)."""
        if not isinstance(arg, str) or "\0" in arg:
            return False
        root = next((r for r in self.roots if arg.startswith(r)), None)
        return root is not None and all(
            part not in ("", ".", "..") for part in arg[len(root):].split("/"))

    def watch(self, argv: Sequence[str]) -> list[str]:
        """Mirror the files ``argv`` names under the roots; returns them."""
        files = [a for a in argv if self._mirrored(a)]
        with self.lock:
            new = [f for f in files if f not in self.owner]
            if new:
                self.part.ask("prepare", dirs=sorted({str(Path(f).parent) for f in new}))
            for f in new:
                self.owner[f] = "here" if Path(f).exists() else None
        self.sync(files)
        if self.thread is None:
            self.thread = threading.Thread(target=self._run, daemon=True)
            self.thread.start()
        return files

    def _run(self) -> None:
        while not self.stopping.wait(self.INTERVAL_S):
            try:
                self.sync()
            except BringUpError:  # the part ended (a refused answer: kept in .refused)
                return

    def sync(self, files: Sequence[str] | None = None) -> None:
        with self.lock:
            if self.refused is not None:
                raise ServerAnswerError(str(self.refused))
            chosen = list(self.owner) if files is None else [f for f in files
                                                              if f in self.owner]
            for f in chosen:
                if self.owner[f] in ("here", None):
                    self._push(f)
            for _ in range(self.MAX_ROUNDS):
                there = {f: self.pulled.get(f) for f in chosen
                         if self.owner[f] in ("there", None)}
                if not there:
                    return
                answer = self.part.ask("read", paths=there)
                try:
                    files_in = self._accept(answer, there)
                    for f, start, data in files_in:
                        self._write(f, start, data)
                except ServerAnswerError as exc:
                    self.refused = exc
                    raise
                if sum(len(data) for _, _, data in files_in) < READ_MAX_BYTES:
                    return  # nothing held back there

    def _refuse(self, why: str) -> NoReturn:
        """End the server's part; its :class:`ServerAnswerError`."""
        self.part.refuse(f"its mirror's read answer {why}; nothing of it was written")

    def _accept(self, answer: object, asked: dict[str, int | None]) -> list[
            tuple[str, int, bytes]]:
        """The files of a ``read`` answer, checked whole before one byte is written:
        ``(path, start, bytes)`` each."""
        if not isinstance(answer, dict):
            self._refuse("is not a mapping of files")
        out, total = [], 0
        for f, entry in answer.items():
            shown = repr(f)[:120]
            if f not in asked:
                self._refuse(f"names {shown}, which this machine did not ask for")
            if not (isinstance(entry, list) and len(entry) == 3
                    and all(type(v) is int for v in entry[:2])
                    and isinstance(entry[2], str)):
                self._refuse(f"for {shown} is not [size, start, base64 text]")
            size, start, text = entry
            held = asked[f] or 0
            if start not in (0, held):
                self._refuse(f"for {shown} starts at byte {start}; this machine holds "
                             f"{held} (it writes at {held}, or from 0 when the file was "
                             "written anew)")
            if len(text) > 4 * -(-READ_MAX_BYTES // 3):  # before decoding it
                self._refuse(f"carries over {READ_MAX_BYTES} bytes")
            try:
                data = base64.b64decode(text.encode("ascii"), validate=True)
            except (UnicodeEncodeError, binascii.Error):
                self._refuse(f"for {shown} is not base64")
            total += len(data)
            if total > READ_MAX_BYTES:
                self._refuse(f"carries over {READ_MAX_BYTES} bytes")
            if size != start + len(data):
                self._refuse(f"for {shown} says {size} bytes, not its start and data's "
                             f"{start + len(data)}")
            self._under_roots(f)
            out.append((f, start, data))
        return out

    def _under_roots(self, f: str) -> tuple[str, list[str]]:
        """The root ``f`` is under (resolved) and the names below it; refused when ``f``
        resolves (a link in it) out of that root."""
        root = next((r for r in self.roots if f.startswith(r)), None)
        if root is None or not self._mirrored(f):
            self._refuse(f"names {f!r:.120}, not a file under the run's folders")
        real_root = os.path.realpath(root)
        if os.path.commonpath([real_root, os.path.realpath(f)]) != real_root:
            self._refuse(f"names {f!r:.120}, which resolves out of the run's folders (a "
                         "link on its way)")
        return real_root, f[len(root):].split("/")

    def _write(self, f: str, start: int, data: bytes) -> None:
        """``data`` at ``start`` of ``f`` (cut there), every folder below its root made
        and entered without following a link, the file opened with O_NOFOLLOW."""
        real_root, names = self._under_roots(f)
        nofollow = os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            os.makedirs(real_root, exist_ok=True)
            folder = os.open(real_root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            try:
                for name in names[:-1]:
                    try:
                        os.mkdir(name, 0o755, dir_fd=folder)
                    except FileExistsError:
                        pass
                    inner = os.open(name, os.O_RDONLY | os.O_DIRECTORY | nofollow,
                                    dir_fd=folder)
                    os.close(folder)
                    folder = inner
                out = os.open(names[-1], os.O_WRONLY | os.O_CREAT | os.O_NONBLOCK | nofollow
                              | (os.O_TRUNC if start == 0 else 0), 0o644, dir_fd=folder)
            finally:
                os.close(folder)
        except OSError as exc:
            self._refuse(f"names {f!r:.120}, which this machine cannot open as a plain "
                         f"file under the run's folders ({exc.strerror})")
        try:
            if not stat.S_ISREG(os.fstat(out).st_mode):
                self._refuse(f"names {f!r:.120}, which is not a plain file here")
            os.lseek(out, start, os.SEEK_SET)
            view = memoryview(data)
            while view:
                view = view[os.write(out, view):]
            os.ftruncate(out, start + len(data))
        finally:
            os.close(out)
        self.owner[f] = "there"
        self.pulled[f] = start + len(data)

    def _push(self, f: str) -> None:
        """``f`` written there when it is a plain file here that changed (a link, a FIFO
        or a device is not read, nor sent)."""
        try:
            with open(f, "rb", opener=lambda path, flags: os.open(
                    path, flags | os.O_NOFOLLOW | os.O_NONBLOCK)) as src:
                st = os.fstat(src.fileno())
                if not stat.S_ISREG(st.st_mode) or \
                        self.pushed.get(f) == (st.st_size, st.st_mtime_ns):
                    return
                data = src.read()
        except OSError:  # not there (yet), or a link
            return
        self.owner[f] = "here"
        self.part.ask("write", path=f, data=base64.b64encode(data).decode())
        self.pushed[f] = (st.st_size, st.st_mtime_ns)

    def stop(self) -> None:
        self.stopping.set()
        if self.thread is not None:
            self.thread.join(5)

