"""Record files of a run: JSON lines read past a torn last line, files written whole or
not at all (key files readable by their owner alone), and a unix socket's address in a
folder of any depth."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

#: the longest path an AF_UNIX address holds (sun_path: 108 bytes, its NUL included)
UNIX_PATH_MAX = 107


@contextmanager
def unix_address(path: Path) -> Iterator[str]:
    """``path`` as an AF_UNIX address to bind or send to, however deep its folder: a path
    longer than :data:`UNIX_PATH_MAX` is reached through a descriptor of its folder
    (``/proc/self/fd/N/NAME``, which the kernel resolves as the folder itself), open
    while the block runs. (A results folder given as ``--out`` can be any depth.)"""
    text = str(path)
    if len(os.fsencode(text)) <= UNIX_PATH_MAX:
        yield text
        return
    fd = os.open(path.parent, os.O_PATH | os.O_DIRECTORY)
    try:
        yield f"/proc/self/fd/{fd}/{path.name}"
    finally:
        os.close(fd)


def read_jsonl(path: Path) -> Iterator[dict]:
    """Records of a JSON-lines file; a torn last line (a killed writer) is skipped."""
    if not path.exists():
        return
    with open(path) as f:
        for line in f:
            try:
                yield json.loads(line)
            except json.JSONDecodeError:
                continue


def write_text(path: Path, text: str, *, secret: bool = False) -> None:
    """Write ``path`` whole or not at all (a temporary file beside it, renamed over it);
    ``secret``: readable by its owner alone (mode 0600: key files)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if secret else 0o644)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        tmp.replace(path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_json(path: Path, data: dict, *, secret: bool = False) -> None:
    write_text(path, json.dumps(data, indent=2) + "\n", secret=secret)
