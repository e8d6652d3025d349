"""What an error message or a log line shows of a command: its words, key material hidden.

Every place that puts an argv, ``ip -batch`` text or a command's output into an error or
a log goes through :func:`shown` or :func:`text`, so a SAK given to ``ip macsec ... key
ID KEY`` (on standard input: see :mod:`testbed.host.commands`) is never printed, whatever
failed.

>>> shown(["ip", "macsec", "add", "tb1a2bta", "tx", "sa", "0", "pn", "1", "on", "key",
...        "00", "0123456789abcdef0123456789abcdef"])
'ip macsec add tb1a2bta tx sa 0 pn 1 on key 00 <redacted>'
>>> text("Error: bad line: macsec add m0 rx sci 1 sa 1 on key 01 " + "ab" * 32 + "\\n")
'Error: bad line: macsec add m0 rx sci 1 sa 1 on key 01 <redacted>\\n'
>>> shown(["ping", "-c1", "10.0.0.1"])
'ping -c1 10.0.0.1'
"""

from __future__ import annotations

import re
from collections.abc import Sequence

#: what replaces a key
HIDDEN = "<redacted>"
#: ``key KEYID KEY`` (``ip macsec``) in text: the hex word two after ``key`` is the key
_KEY_ARG = re.compile(r"(\bkey\s+[0-9A-Fa-f]+\s+)[0-9A-Fa-f]+\b")
#: 128 bits or more written in hex, anywhere (a SAK in a JSON text, a stray argument);
#: SCIs (16 digits), XPN salts (24) and fingerprints (16) are shorter
_LONG_HEX = re.compile(r"(?<![0-9A-Fa-f])[0-9A-Fa-f]{32,}(?![0-9A-Fa-f])")


def words(argv: Sequence[str]) -> list[str]:
    """``argv`` with every key replaced by :data:`HIDDEN`."""
    out = [str(a) for a in argv]
    for i, word in enumerate(out):
        if word == "key" and i + 2 < len(out):
            out[i + 2] = HIDDEN
    return [_LONG_HEX.sub(HIDDEN, w) for w in out]


def shown(argv: Sequence[str]) -> str:
    """``argv`` as one line for an error message, keys hidden."""
    return " ".join(words(argv))


def text(value: str) -> str:
    """Command text (``ip -batch`` lines, a command's stderr) with keys hidden."""
    return _LONG_HEX.sub(HIDDEN, _KEY_ARG.sub(lambda m: m.group(1) + HIDDEN, value))
