"""Stand-ins for the netlink dumps the live monitor reads (shared by the monitor's web
tests): the counters and queues a test sets."""

from __future__ import annotations


class Links:
    """Stands for the netlink link dump: the counters the test set."""

    def __init__(self, links: dict | None = None) -> None:
        self.links = {} if links is None else links

    def read(self) -> dict:
        return self.links


class Queues:
    """Stands for the qdisc dump: no queues."""

    def read(self) -> dict:
        return {}

    def read_leaves(self) -> dict:
        return {}
