"""Matplotlib for the report figures: headless (Agg), and one way to write a figure.

``plt`` is pyplot, loaded on first use: a module that draws can import it at its top
and still cost nothing to a command that never draws (``testbed validate``, ``--help``,
every CLI start the lab's own tools make); pyplot and numpy take about 0.4 s of CPU to
load."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

__all__ = ["plt", "save"]


class _Pyplot:
    """matplotlib.pyplot behind an attribute lookup: imported, with the Agg backend,
    the first time any of its names is asked for."""

    _module: ModuleType | None = None

    def __getattr__(self, name: str):
        if _Pyplot._module is None:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as pyplot

            _Pyplot._module = pyplot
        return getattr(_Pyplot._module, name)


plt = _Pyplot()


def save(fig, path: Path, dpi: int = 110) -> Path:
    """Lay ``fig`` out, write it to ``path`` and free it; returns ``path``."""
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return path
