"""The results folder's digest (``digest.json``): the SHA-256 of every file the run wrote.

The run writes it last (:func:`write`), once every record is final; ``testbed check``
recomputes it (:func:`verify`) and refuses a folder whose files changed since, naming
the first. It stops a casual edit of a number, not a determined student: anyone can
recompute it (running the lab again on the grader's machine is the answer to that).

>>> import tempfile
>>> root = Path(tempfile.mkdtemp())
>>> _ = (root / "summary.json").write_text('{"runs": []}')
>>> write(root)["files"]
{'summary.json': '3d2d9419f6676434cb2f67d4944dc98b578ceec70214325370fb9c1e2423c365'}
>>> sorted(verify(root))  # unchanged: the list, each file checked
['summary.json']
>>> _ = (root / "summary.json").write_text('{"runs": [1]}')
>>> verify(root)  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
testbed.errors.ConfigError: RESULTS: ...: summary.json changed since the run wrote digest.json ...
>>> import shutil; shutil.rmtree(root)
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path, PurePosixPath

from testbed.core import layout
from testbed.errors import ConfigError

ALGORITHM = "sha256"
#: digest.json larger than this is not one the run wrote (a run has some thousand files)
MAX_BYTES = 8 << 20
_CHUNK = 1 << 20


def file_hash(path: Path) -> str:
    """The SHA-256 of a regular file's bytes (hex)."""
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def files(root: Path) -> dict[str, str]:
    """Every regular file under ``root`` but digest.json: relative POSIX path -> SHA-256.
    Links are not followed (a run writes none)."""
    out = {}
    for folder, dirs, names in os.walk(root):
        dirs.sort()
        for name in sorted(names):
            path = Path(folder) / name
            rel = path.relative_to(root).as_posix()
            if rel == layout.DIGEST or not stat.S_ISREG(path.lstat().st_mode):
                continue
            out[rel] = file_hash(path)
    return out


def over(entries: dict[str, str]) -> str:
    """The digest over the list: SHA-256 of its lines ``HASH  PATH``, sorted by path."""
    text = "".join(f"{h}  {p}\n" for p, h in sorted(entries.items()))
    return hashlib.sha256(text.encode()).hexdigest()


def write(root: Path) -> dict:
    """Write ``root/digest.json`` over the folder's files as they are now; returns it."""
    entries = files(root)
    doc = {"algorithm": ALGORITHM, "files": entries, "digest": over(entries)}
    (root / layout.DIGEST).write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    return doc


def _refuse(root: Path, why: str) -> ConfigError:
    return ConfigError("RESULTS", f"{root}: {why}")


def read(root: Path) -> dict[str, str]:
    """The file list of ``root/digest.json``, checked for shape; ConfigError (one line)
    when it is missing, malformed, or names a path outside the folder."""
    path = root / layout.DIGEST
    try:
        st = path.lstat()
    except FileNotFoundError:
        raise _refuse(root, f"no {layout.DIGEST} (the run writes it last: a folder without "
                            "it is from an older testbed or an unfinished run; run the lab "
                            "again)") from None
    if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_BYTES:
        raise _refuse(root, f"{layout.DIGEST} is not a regular file of at most "
                            f"{MAX_BYTES >> 20} MB")
    try:
        doc = json.loads(path.read_bytes())
    except (ValueError, RecursionError) as exc:
        raise _refuse(root, f"{layout.DIGEST} is not JSON ({str(exc)[:80]})") from None
    entries = doc.get("files") if isinstance(doc, dict) else None
    if (doc.get("algorithm") if isinstance(doc, dict) else None) != ALGORITHM or \
            not isinstance(entries, dict) or \
            not all(isinstance(k, str) and isinstance(v, str) for k, v in entries.items()):
        raise _refuse(root, f"{layout.DIGEST} is not a digest of this testbed "
                            f"(algorithm {ALGORITHM}, files: path -> hash)")
    for rel in entries:
        parts = PurePosixPath(rel).parts
        if not parts or rel.startswith("/") or ".." in parts or "\\" in rel or "\0" in rel:
            raise _refuse(root, f"{layout.DIGEST} names {rel[:80]!r}, a path outside the "
                                "results folder")
    if doc.get("digest") != over(entries):
        raise _refuse(root, f"{layout.DIGEST} does not match its own file list (edited)")
    return entries


def check(root: Path, entries: dict[str, str], rel: str) -> None:
    """ConfigError (one line) unless ``rel`` is listed in ``entries`` and the file is still
    a regular file of the folder with the listed hash."""
    want = entries.get(rel)
    if want is None:
        raise _refuse(root, f"{rel} is not in {layout.DIGEST} (not written by the run)")
    path = root / rel
    try:
        st = path.lstat()
    except OSError:
        raise _refuse(root, f"{rel} is listed in {layout.DIGEST} but missing") from None
    if not stat.S_ISREG(st.st_mode) or not path.resolve().is_relative_to(root.resolve()):
        raise _refuse(root, f"{rel} is not a regular file of the folder (a link or a "
                            f"device), as {layout.DIGEST} says it was")
    try:
        got = file_hash(path)
    except OSError as exc:
        raise _refuse(root, f"{rel} cannot be read ({exc.strerror})") from None
    if got != want:
        raise _refuse(root, f"{rel} changed since the run wrote {layout.DIGEST} "
                            "(results are graded as the run wrote them)")


def verify(root: Path, rels: tuple[str, ...] | None = None) -> dict[str, str]:
    """Recompute the hashes of ``rels`` (every listed file when None); ConfigError naming
    the first that is not listed, missing, not a regular file, or changed. Returns the
    list, so that files read later can be checked against it (:func:`check`)."""
    entries = read(root)
    for rel in sorted(entries) if rels is None else rels:
        check(root, entries, rel)
    return entries
