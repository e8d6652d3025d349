"""Entry point for the generators: ``python -m traffic SUBCOMMAND ...``.

Each subcommand lives in its own module with a ``main(argv) -> int``.
"""

import importlib
import sys

SUBCOMMANDS = {
    "replay": "traffic.replay",
    "training": "traffic.training",
    "agent-service": "traffic.agents",
    "agent-driver": "traffic.agents",
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in SUBCOMMANDS:
        names = ", ".join(sorted(SUBCOMMANDS))
        print(f"usage: python -m traffic {{{names}}} ...", file=sys.stderr)
        return 2
    module = importlib.import_module(SUBCOMMANDS[argv[0]])
    if argv[0].startswith("agent-"):
        return module.main(argv)
    return module.main(argv[1:])


if __name__ == "__main__":
    sys.exit(main())
