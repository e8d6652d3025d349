"""A tail drop in one class of a switch port, on real frames through a lab ovs-vswitchd:
the switch discards the rest of its batch for that port, frames of a class with room
included, no queue counts them, and the lab's ``switch_unsent`` does."""

from __future__ import annotations

import pytest

from bench.batch_drop import measure

pytestmark = [pytest.mark.ovs]


def test_a_tail_drop_loses_frames_of_another_class_and_the_lab_counts_them():
    lossy = measure("overflow", 1500)
    missing = lossy["roce_sent"] - lossy["roce_received"]
    assert lossy["roce_class_drops"] == 0
    assert missing > 0, lossy  # frames the RoCE class would have taken: gone
    assert lossy["unsent"] >= missing, lossy  # and counted
    roomy = measure("room", 1500)
    assert roomy["roce_received"] == roomy["roce_sent"], roomy
    assert roomy["unsent"] == 0, roomy
