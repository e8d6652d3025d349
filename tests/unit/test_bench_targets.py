"""Each benchmark judges its target with a pure function and exits 1 on a miss."""

from __future__ import annotations

import subprocess
from types import SimpleNamespace

import pytest

from bench import fabric_bench, macsec_bench, replay_bench


def test_verdicts():
    assert replay_bench.verdict([1.2, 0.9, 1.0]) and not replay_bench.verdict([0.9, 0.99, 2.0])
    assert fabric_bench.verdict({"a": 0.3, "b": 1.0}) and not fabric_bench.verdict({"a": 1.01})
    rows = [{"mtu": 1500, "ratio": 0.006}, {"mtu": 9000, "ratio": 0.04}]
    assert macsec_bench.verdict(rows) and not macsec_bench.verdict(rows, target=0.01)
    assert not (replay_bench.verdict([]) or fabric_bench.verdict({})
                or macsec_bench.verdict([]))


@pytest.mark.parametrize(("ours_pps", "code"), [(2000.0, 0), (500.0, 1)])
def test_replay_bench_exit_status(monkeypatch, ours_pps, code):
    monkeypatch.setattr(replay_bench.subprocess, "run",
                        lambda *a, **k: subprocess.CompletedProcess(a, 0, "", ""))
    monkeypatch.setattr(replay_bench, "register", lambda *a: None)
    monkeypatch.setattr(replay_bench, "forget", lambda *a: None)
    monkeypatch.setattr(replay_bench, "make_frames", lambda n: [bytes(60)] * n)
    monkeypatch.setattr(replay_bench, "run_tcpreplay", lambda *a: 1000.0)
    monkeypatch.setattr(replay_bench, "run_ours", lambda *a: ours_pps)
    assert replay_bench.main(["--frames", "3", "--rounds", "3"]) == code


@pytest.mark.parametrize(("ours_s", "code"), [(1.0, 0), (3.0, 1)])
def test_fabric_bench_exit_status(monkeypatch, ours_s, code):
    monkeypatch.setattr(fabric_bench, "probe", lambda rid: SimpleNamespace(ovs_datapath="user"))
    monkeypatch.setattr(fabric_bench, "ours", lambda spec, caps, rid: (ours_s, 1.0))
    monkeypatch.setattr(fabric_bench, "plain_mininet", lambda spec, caps, prefix: (2.0, 1.0))
    assert fabric_bench.main(["--rounds", "1"]) == code


@pytest.mark.parametrize(("protected", "code"), [(100.0, 0), (10.0, 1)])
def test_macsec_bench_exit_status(monkeypatch, protected, code):
    def bench_mtu(mtu, args, work):
        return {"mtu": mtu, "plain_median_mbps": 10000.0, "protected_median_mbps": protected,
                "ratio": protected / 10000.0}

    monkeypatch.setattr(macsec_bench, "aesgcm_us", lambda: 4.0)
    monkeypatch.setattr(macsec_bench, "bench_mtu", bench_mtu)
    assert macsec_bench.main(["--mtu", "1500"]) == code


def test_afxdp_verdict_keeps_af_packet_only_for_a_reason():
    from bench.afxdp_bench import Result, verdict
    rows = lambda pps: [dict(delivered=1.0, delivered_pps=pps,  # noqa: E731
                             forwardings_per_cpu_s=pps)]
    packet = Result("system", rows=rows(9e4), shaped_mbps=19.6)
    bypass = Result("afxdp-nonpmd", rows=rows(2e5), shaped_mbps=58.0)
    assert verdict(packet, bypass)[0]  # faster, but the links' qdiscs would be lost
    shaping_faster = Result("afxdp-nonpmd", rows=rows(2e5), shaped_mbps=20.3)
    assert not verdict(packet, shaping_faster)[0]  # the lab should switch: a miss
    shaping_slower = Result("afxdp-nonpmd", rows=rows(5e4), shaped_mbps=20.3)
    assert verdict(packet, shaping_slower)[0]
    assert not verdict(Result("system", error="no frames delivered"), bypass)[0]
    assert not Result("x", shaped_mbps=0.0).keeps_qdisc  # nothing delivered proves nothing


@pytest.mark.parametrize(("whole_s", "code"), [(95.0, 0), (121.0, 1), (None, 1)])
def test_scale_bench_exit_status(monkeypatch, capsys, whole_s, code):
    """The largest fabric's whole run against the issue's 120 s; a failed run is a miss."""
    from bench import scale_bench

    def lab(size, duration_s, work, switches="host", shards="auto"):
        if whole_s is None:
            return {"rc": 2, "whole_s": 3.0, "peak_bytes": 0, "phases": {}, "error": "boom"}
        return {"rc": 0, "whole_s": whole_s, "peak_bytes": 4e8, "max_process_bytes": 1e8,
                "start_s": 10.0,
                "stop_s": 2.0, "chains": 90, "chains_started": 90, "fidelity_ok": True,
                "telemetry_bytes": 1e6, "phases": {"bring_up_s": 12.0}}

    monkeypatch.setattr(scale_bench, "lab_run", lab)
    monkeypatch.setattr(scale_bench, "plain_run", lambda key, d: {
        "rc": 0, "whole_s": 60.0, "peak_bytes": 2e8, "max_process_bytes": 1e8, "start_s": 20.0,
        "stop_s": 8.0})
    assert scale_bench.main(["--sizes", "16,128"]) == code
    out = capsys.readouterr().out
    assert "ratio lab/plain  start 0.50  stop 0.25" in out or whole_s is None
    assert ("PASS" if code == 0 else "MISS") in out or whole_s is None
    # a selection without the largest size is not judged, and not failed for it
    if whole_s is not None:
        assert scale_bench.main(["--sizes", "16"]) == 0


def test_dctcp_targets_and_the_missing_kernel():
    from bench import dctcp

    good = [{"variant": "dctcp", "queue_median": 22, "link_mbps": 29.6},
            {"variant": "reno", "queue_median": 340, "link_mbps": 29.9}]
    assert dctcp.verdict(good, 30, 20) == []
    # DCTCP's queue past 2 K, a FIFO that never fills, a link left idle: each a miss
    assert dctcp.verdict([{**good[0], "queue_median": 41}], 30, 20)[0].startswith("dctcp")
    assert dctcp.verdict([{**good[1], "queue_median": 199}], 30, 20)[0].startswith("reno")
    assert "link 26.9 Mb/s" in dctcp.verdict([{**good[1], "link_mbps": 26.9}], 30, 20)[0]


def test_dctcp_bench_measures_nothing_without_the_kernel_features(monkeypatch, capsys):
    from bench import dctcp

    monkeypatch.setattr(dctcp, "missing_features", lambda: ["tcp_dctcp"])
    assert dctcp.main([]) == 0
    assert "not measured: this kernel lacks tcp_dctcp" in capsys.readouterr().out
