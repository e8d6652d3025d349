"""Out-of-order placement of one RC message by packet sequence number (PSN).

A sprayed message (its packets spread over several paths by rotating the UDP source
port) arrives out of order.  A NIC that does out-of-order placement writes each packet
where its PSN says and completes the message once every PSN is there, so reordering
is not loss.  :class:`MessageAssembly` does that bookkeeping: the message's first PSN
comes from its FIRST/ONLY packet or, if that is late, from its LAST packet and the
expected packet count; a packet behind the highest PSN seen is counted as reordered,
a PSN seen twice as a duplicate.
"""

from __future__ import annotations

PSN_MODULO = 1 << 24
PSN_HALF = 1 << 23


def psn_diff(a: int, b: int) -> int:
    """``a - b`` in 24-bit serial arithmetic, in -2**23 .. 2**23-1.

    >>> psn_diff(2, 0xFFFFFF)
    3
    """
    d = (a - b) % PSN_MODULO
    return d - PSN_MODULO if d >= PSN_HALF else d


class MessageAssembly:
    """Reception state of one message (one step's chunk on one channel).

    >>> m = MessageAssembly(expected=3)
    >>> [m.add(psn, first=psn == 10, last=psn == 12) for psn in (12, 10, 11)]
    ['placed', 'reordered', 'reordered']
    >>> m.complete, m.reordered, m.missing
    (True, 2, 0)
    """

    __slots__ = ("expected", "first_psn", "seen", "max_psn", "reordered", "duplicates",
                 "bytes", "last_seen")

    def __init__(self, expected: int) -> None:
        self.expected = expected
        self.first_psn: int | None = None
        self.seen: set[int] = set()
        self.max_psn: int | None = None
        self.reordered = 0
        self.duplicates = 0
        self.bytes = 0
        self.last_seen = False

    def add(self, psn: int, *, first: bool = False, last: bool = False, nbytes: int = 0) -> str:
        """Place one packet; returns ``placed``, ``reordered`` or ``duplicate``."""
        if psn in self.seen:
            self.duplicates += 1
            return "duplicate"
        self.seen.add(psn)
        self.bytes += nbytes
        if first:
            self.first_psn = psn
        if last:
            self.last_seen = True
            if self.first_psn is None:
                self.first_psn = (psn - self.expected + 1) % PSN_MODULO
        if self.max_psn is None or psn_diff(psn, self.max_psn) > 0:
            self.max_psn = psn
            return "placed"
        self.reordered += 1
        return "reordered"

    @property
    def packets(self) -> int:
        return len(self.seen)

    @property
    def complete(self) -> bool:
        """Every PSN of the message has been placed."""
        if self.expected == 0:
            return True
        if len(self.seen) < self.expected or self.first_psn is None:
            return False
        base = self.first_psn
        return all((base + i) % PSN_MODULO in self.seen for i in range(self.expected))

    @property
    def missing(self) -> int:
        """Packets of the message not placed (lost, if the message is given up)."""
        return max(0, self.expected - len(self.seen))
