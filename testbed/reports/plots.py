"""Matplotlib for the report figures: headless (Agg), and one way to write a figure."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

__all__ = ["plt", "save"]


def save(fig, path: Path, dpi: int = 110) -> Path:
    """Lay ``fig`` out, write it to ``path`` and free it; returns ``path``."""
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return path
