"""percentiles() must agree with numpy.percentile's default linear method."""

import numpy as np
import pytest

from traffic.stats import percentiles, summary

QS = [0, 1, 5, 25, 50, 90, 95, 99, 99.9, 100]


@pytest.mark.parametrize("n", [1, 2, 3, 10, 101, 1000])
def test_matches_numpy(n):
    rng = np.random.default_rng(n)
    values = rng.lognormal(0, 1, n).tolist()
    assert percentiles(values, QS) == pytest.approx(np.percentile(values, QS).tolist())


def test_unsorted_and_ints():
    assert percentiles([5, 1, 3], [50]) == [3.0]
    assert percentiles([10, 20], [25]) == pytest.approx([12.5])


def test_errors():
    with pytest.raises(ValueError):
        percentiles([], [50])
    with pytest.raises(ValueError):
        percentiles([1.0], [101])
    with pytest.raises(ValueError):
        percentiles([1.0], [-1])


def test_summary():
    assert summary([]) is None
    s = summary([1.0, 2.0, 3.0, 4.0])
    assert s == {"p50": 2.5, "p95": 3.85, "p99": 3.97, "max": 4.0}


def test_median_iteration_is_the_median_of_an_even_count():
    from traffic.ring import totals

    keys = ("bytes_sent", "bytes_received", "packets_sent", "packets_received", "packets_lost",
            "timeouts", "icrc_errors", "reordered_packets", "ce_received", "cnps_sent",
            "cnps_received")
    records = [{"iteration_ms": ms, "complete": True, "comm_ms": ms, **dict.fromkeys(keys, 0)}
               for ms in (400.0, 100.0, 300.0, 200.0)]
    out = totals(records, rank=0, ranks=2, channels=1, expected_bytes_per_iteration=1,
                 enobufs=0)
    assert out["median_iteration_ms"] == 250.0  # not the upper middle (300)
    assert out["mean_iteration_ms"] == 250.0 and out["max_iteration_ms"] == 400.0
