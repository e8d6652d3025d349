"""JSON lines read as another process appends them: each call returns the records
completed since the last one (a half-written last line waits for its end)."""

from __future__ import annotations

import json
from pathlib import Path


class Tail:
    """New complete JSON records of one file; a file not there yet is empty.

    >>> import tempfile
    >>> path = Path(tempfile.mkdtemp()) / "x.jsonl"
    >>> t = Tail(path)
    >>> t.read()
    []
    >>> _ = path.write_text('{"a": 1}\\n{"a": 2')
    >>> t.read()
    [{'a': 1}]
    >>> with path.open("a") as f:
    ...     _ = f.write('}\\nnot json\\n')
    >>> t.read()
    [{'a': 2}]
    >>> import shutil; shutil.rmtree(path.parent)
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.partial = b""

    def read(self) -> list[dict]:
        try:
            with self.path.open("rb") as f:
                f.seek(self.offset)
                data = f.read()
        except FileNotFoundError:
            return []
        self.offset += len(data)
        data = self.partial + data
        lines = data.split(b"\n")
        self.partial = lines.pop()
        out = []
        for line in lines:
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict):
                out.append(record)
        return out


class Tails:
    """The tails of every file matching ``pattern`` in ``folder``, found as they appear
    (one training rank a file)."""

    def __init__(self, folder: Path, pattern: str) -> None:
        self.folder, self.pattern = folder, pattern
        self.tails: dict[Path, Tail] = {}

    def read(self) -> list[dict]:
        for path in sorted(self.folder.glob(self.pattern)):
            self.tails.setdefault(path, Tail(path))
        return [r for t in self.tails.values() for r in t.read()]
