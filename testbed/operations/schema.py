"""The ``replacement:`` section of a fabric scenario as data (what it does:
:mod:`testbed.operations.replace`). Validation reads only this: it loads no packet
library."""

from __future__ import annotations

from pydantic import Field

from topologies.params import Section


class Replacement(Section):
    """Node health during the run; a degraded node's services and training ranks move
    to spares (:mod:`testbed.operations.replace`)."""

    enabled: bool = Field(False, description="watch the nodes' health during the run and "
                                             "replace a degraded one")
    spares: list[int] = Field(default_factory=list, description="node indices that take "
                                                                "over a degraded node's "
                                                                "roles, in order")
