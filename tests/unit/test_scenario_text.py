"""Comments in scenario files describe what the code does."""

from __future__ import annotations

from pathlib import Path

import pytest

SCENARIOS = sorted((Path(__file__).resolve().parents[2] / "scenarios").glob("*.yaml"))


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.stem)
def test_ecmp_is_not_described_as_select_groups(path: Path) -> None:
    """ECMP hashes with Open vSwitch's bundle action (controllers/ecmp.py), not select groups."""
    assert "select group" not in path.read_text().lower()
