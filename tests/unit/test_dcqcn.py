"""The DCQCN reaction point's rate law, fed with synthetic CNP sequences and clocks."""

from __future__ import annotations

import pytest

from traffic.dcqcn import CnpPacer, DcqcnParams, ReactionPoint

P = DcqcnParams(enabled=True, g=1 / 16, rai_mbps=0.5, rhai_mbps=2.0, timer_us=1000,
                alpha_timer_us=1000, byte_counter_kb=1000, f=5, min_rate_mbps=0.5)


def test_first_cnp_halves_and_raises_alpha() -> None:
    rp = ReactionPoint(P, 20.0, now=0.0)
    rp.on_cnp(0.0)
    assert rp.rate_mbps == pytest.approx(10.0)
    assert rp.rt == pytest.approx(20.0)
    assert rp.alpha == pytest.approx(1.0)  # (1-g)*1 + g


def test_cut_follows_alpha() -> None:
    rp = ReactionPoint(P, 20.0, now=0.0)
    rp.alpha = 0.5
    rp.on_cnp(0.0)
    assert rp.rate_mbps == pytest.approx(20.0 * 0.75)
    assert rp.alpha == pytest.approx((1 - P.g) * 0.5 + P.g)


def test_back_to_back_cnps_drive_rate_to_min() -> None:
    rp = ReactionPoint(P, 20.0, now=0.0)
    for i in range(40):
        rp.on_cnp(i * 1e-5)
    assert rp.rate_mbps == pytest.approx(P.min_rate_mbps)


def test_alpha_decays_without_cnps() -> None:
    rp = ReactionPoint(P, 20.0, now=0.0)
    rp.on_cnp(0.0)
    rp.advance(0.0105)  # ten alpha periods
    assert rp.alpha == pytest.approx((1 - P.g) ** 10)


def test_fast_recovery_halves_the_gap_each_timer() -> None:
    rp = ReactionPoint(P, 20.0, now=0.0)
    rp.on_cnp(0.0)  # rc 10, rt 20
    expected = 10.0
    for stage in range(1, P.f):
        rp.advance(stage * 1e-3 + 1e-7)
        expected = (20.0 + expected) / 2
        assert rp.rate_mbps == pytest.approx(expected)
        assert rp.rt == pytest.approx(20.0)  # target unchanged in fast recovery
    assert rp.stage() == "fast_recovery"
    rp.advance(P.f * 1e-3 + 1e-7)  # stage F: additive increase raises the target
    assert rp.stage() == "additive_increase"
    assert rp.rt == pytest.approx(20.0)  # clamped at the line rate


def test_additive_then_hyper_increase() -> None:
    # no byte events: BC stays 0, so past F only additive increase happens
    rp = ReactionPoint(P, 100.0, now=0.0)
    rp.on_cnp(0.0)
    rp.rt = rp.rc = 10.0  # start low to watch the target climb
    rp.advance(P.f * 1e-3 + 1e-7)  # F timer events: stages 1..F
    assert rp.timer_stage == P.f
    # stage F event was additive (max >= F, min = 0 <= F)
    assert rp.rt == pytest.approx(10.0 + P.rai_mbps)
    # byte stages push min(T, BC) past F: hyper increase, i = min(T, BC) - F
    rp.timer_stage = P.f + 2
    rp.byte_stage = P.f + 1
    rt = rp.rt
    rp.on_sent(int(P.byte_counter_kb * 1000), now=P.f * 1e-3 + 2e-7)  # BC -> F+2
    assert rp.rt == pytest.approx(rt + 2 * P.rhai_mbps)
    assert rp.stage() == "hyper_increase"


def test_byte_counter_events_count_stages() -> None:
    rp = ReactionPoint(P, 20.0, now=0.0)
    rp.on_cnp(0.0)
    rp.on_sent(3 * int(P.byte_counter_kb * 1000) + 10, now=1e-6)
    assert rp.byte_stage == 3 and rp.timer_stage == 0
    assert rp.rate_mbps == pytest.approx(20.0 - 10.0 / 8)


def test_recovers_to_line_rate_and_never_exceeds_it() -> None:
    rp = ReactionPoint(P, 20.0, now=0.0)
    rp.on_cnp(0.0)
    rp.on_cnp(0.0001)
    rp.advance(1.0)
    assert rp.rate_mbps == pytest.approx(20.0, rel=1e-3)
    assert rp.rate_mbps <= 20.0 and rp.rt <= 20.0


def test_cnp_restarts_stages() -> None:
    rp = ReactionPoint(P, 20.0, now=0.0)
    rp.on_cnp(0.0)
    rp.advance(0.0035)
    assert rp.timer_stage == 3
    rp.on_cnp(0.0036)
    assert rp.timer_stage == 0 and rp.byte_stage == 0


def test_long_idle_does_not_spin() -> None:
    rp = ReactionPoint(P, 20.0, now=0.0)
    rp.on_cnp(0.0)
    rp.advance(3600.0)
    assert rp.next_increase >= 3600.0 and rp.rate_mbps == pytest.approx(20.0)


def test_params_from_dict_ignores_unknown_and_keeps_defaults() -> None:
    p = DcqcnParams.from_dict({"enabled": True, "rai_mbps": 1.0, "other": 3})
    assert p.enabled and p.rai_mbps == 1.0 and p.f == DcqcnParams().f


def test_cnp_pacer_per_flow() -> None:
    pacer = CnpPacer(50)
    assert pacer.allow(0, 0.0) and pacer.allow(1, 0.0)
    assert not pacer.allow(0, 49e-6)
    assert pacer.allow(0, 50e-6)
