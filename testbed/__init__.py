"""The testbed: a network lab for AI datacenter fabrics (see docs/architecture.md)."""

from pathlib import Path

#: the checkout the testbed runs from (scenarios/, labs/, and the packages child
#: processes import)
REPO = Path(__file__).resolve().parent.parent
