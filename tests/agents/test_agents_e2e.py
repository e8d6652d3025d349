"""End to end on loopback: real service processes, the driver, its records and summary.

Planes are two loopback addresses (127.0.0.1 and 127.0.0.2) served by one
process per role, as a multi-plane service listens once per plane.
"""

import json
import os
import signal
import socket
import time

import pytest

from traffic.agent_plan import default_plan

ROLES = ["agent", "retriever", "tool", "model"]


@pytest.fixture
def services(procs, tmp_path):
    """Start one service per role on two planes; return (addresses, stats paths)."""
    addresses, stats = {}, {}
    for role in ROLES:
        port = procs.free_port()
        addresses[role] = [("127.0.0.1", port), ("127.0.0.2", port)]
        stats[role] = tmp_path / f"{role}.json"
        listen = [f"{h}:{p}" for h, p in addresses[role]]
        procs.service(role, listen, stats[role])
    return addresses, stats


def test_all_chains_complete(procs, services, tmp_path):
    addresses, stats_paths = services
    plan = default_plan(addresses)
    summary, hops, chains = procs.driver(plan, tmp_path, "--chains", "50", "--concurrency", "8")
    steps = {c["name"]: c["steps"] for c in plan["chains"]}

    assert summary["chains_started"] == summary["chains_completed"] == 50
    assert summary["chains_failed"] == 0 and summary["errors"] == {}
    lat = summary["latency_ms"]
    assert 0 < lat["p50"] <= lat["p95"] <= lat["p99"] <= lat["max"]
    assert 0 < summary["hop_latency_ms"]["p50"] <= summary["hop_latency_ms"]["p99"]

    assert sorted(c["chain"] for c in chains) == list(range(50))
    for c in chains:
        assert c["ok"] and c["error"] is None
        assert c["steps"] == c["hops_done"] == len(steps[c["template"]])
        assert c["latency_ms"] >= c["hop_sum_ms"] - 0.01  # e2e includes every hop
        assert c["end"] >= c["start"]
    assert len(hops) == sum(c["steps"] for c in chains) == summary["hops_ok"]
    for h in hops:
        step = steps[h["template"]][h["hop"]]
        assert h["ok"] and h["service"] == step["service"]
        assert (h["request"], h["reply"]) == (step["request"], step["reply"])
        assert h["plane"] == h["chain"] % 2
        host, port = addresses[h["service"]][h["plane"]]
        assert h["address"] == f"{host}:{port}"
    assert {h["plane"] for h in hops} == {0, 1}
    assert {c["template"] for c in chains} == set(steps)  # weighted draw hits all three

    for proc in procs.procs[: len(ROLES)]:
        assert procs.stop(proc) == 0
    served = {role: json.loads(path.read_text()) for role, path in stats_paths.items()}
    for role, st in served.items():
        mine = [h for h in hops if h["service"] == role]
        assert st["requests"] == len(mine) and st["errors"] == 0
        assert st["bytes_out"] == sum(28 + h["reply"] for h in mine)


def test_seed_makes_template_sequence_repeatable(procs, services, tmp_path):
    addresses, _ = services
    runs = []
    for i in range(2):
        out = tmp_path / str(i)
        out.mkdir()
        _, _, chains = procs.driver(default_plan(addresses), out, "--chains", "20",
                                    "--concurrency", "1", "--seed", "7")
        runs.append([c["template"] for c in sorted(chains, key=lambda c: c["chain"])])
    assert runs[0] == runs[1]


def test_refused_service_fails_chain(procs, services, tmp_path):
    addresses, _ = services
    dead = procs.free_port()
    plan = {
        "services": {"retriever": [list(a) for a in addresses["retriever"]],
                     "tool": [["127.0.0.1", dead]]},
        "chains": [
            {"name": "good", "weight": 1, "steps": [
                {"service": "retriever", "request": 1024, "reply": 4096}]},
            {"name": "bad", "weight": 1, "steps": [
                {"service": "retriever", "request": 1024, "reply": 4096},
                {"service": "tool", "request": 2048, "reply": 8192},
                {"service": "retriever", "request": 1024, "reply": 4096}]},
        ],
    }
    summary, hops, chains = procs.driver(plan, tmp_path, "--chains", "30", "--concurrency", "4")
    bad = [c for c in chains if c["template"] == "bad"]
    assert bad and all(not c["ok"] and c["error"] == "ECONNREFUSED" for c in bad)
    assert all(c["hops_done"] == 1 for c in bad)
    assert all(c["ok"] for c in chains if c["template"] == "good")
    assert summary["chains_failed"] == len(bad)
    assert summary["chains_completed"] == 30 - len(bad)
    assert summary["errors"] == {"ECONNREFUSED": len(bad)}
    assert len(hops) == sum(1 if c["ok"] else 2 for c in chains)  # stops at the failed hop


def test_stopped_service_times_out(procs, tmp_path):
    port = procs.free_port()
    proc = procs.service("model", [f"127.0.0.1:{port}"])
    os.killpg(proc.pid, signal.SIGSTOP)
    plan = {"services": {"model": [["127.0.0.1", port]]},
            "chains": [{"name": "m", "steps": [{"service": "model", "request": 4096,
                                                "reply": 1024}]}]}
    start = time.monotonic()
    summary, hops, chains = procs.driver(plan, tmp_path, "--chains", "4", "--concurrency", "4",
                                         "--timeout-ms", "300")
    assert time.monotonic() - start < 10
    assert summary["chains_failed"] == 4 and summary["errors"] == {"timeout": 4}
    assert all(c["error"] == "timeout" for c in chains)
    assert all(290 <= h["latency_ms"] < 2000 and h["error"] == "timeout" for h in hops)


def test_service_us_adds_compute_time(procs, services, tmp_path):
    addresses, _ = services
    plan = {"services": {"model": [list(a) for a in addresses["model"]]},
            "chains": [{"name": "slow", "steps": [
                {"service": "model", "request": 100, "reply": 100, "service_us": 50_000}]}]}
    _, hops, _ = procs.driver(plan, tmp_path, "--chains", "4", "--concurrency", "2")
    assert all(h["ok"] and h["latency_ms"] >= 50 for h in hops)


def test_malformed_request_closes_and_counts(procs, tmp_path):
    port = procs.free_port()
    stats = tmp_path / "stats.json"
    proc = procs.service("tool", [f"127.0.0.1:{port}"], stats)
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n\0\0")
        assert s.recv(100) == b""
    assert procs.stop(proc) == 0
    st = json.loads(stats.read_text())
    assert st["malformed"] == 1 and st["errors"] == 1 and st["requests"] == 0
    assert st["role"] == "tool"


def test_open_loop_duration(procs, services, tmp_path):
    addresses, _ = services
    start = time.monotonic()
    summary, _, chains = procs.driver(default_plan(addresses), tmp_path, "--duration", "1",
                                      "--rate", "80", "--concurrency", "16")
    assert time.monotonic() - start < 10
    assert 40 <= summary["chains_started"] <= 130
    assert summary["chains_failed"] == 0 and len(chains) == summary["chains_started"]


def test_sigterm_interrupts_in_flight_chains(procs, services, tmp_path):
    addresses, _ = services
    plan = {"services": {"model": [list(a) for a in addresses["model"]]},
            "chains": [{"name": "slow", "steps": [
                {"service": "model", "request": 100, "reply": 100, "service_us": 300_000}] * 3}]}
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    hops, chains = tmp_path / "hops.jsonl", tmp_path / "chains.jsonl"
    proc = procs.start(["agent-driver", "--plan", str(tmp_path / "plan.json"), "--hops-out",
                        str(hops), "--chains-out", str(chains), "--duration", "30",
                        "--concurrency", "4"])
    time.sleep(1.5)
    os.killpg(proc.pid, signal.SIGTERM)
    out, err = proc.communicate(timeout=10)
    assert proc.returncode == 0, err
    summary = json.loads(out)
    assert summary["interrupted"] is True
    assert summary["chains_failed"] == 4 and summary["errors"] == {"interrupted": 4}
    records = [json.loads(line) for line in chains.read_text().splitlines()]
    assert len(records) == summary["chains_started"]
    assert sum(r["error"] == "interrupted" for r in records) == 4


def test_sighup_holds_a_service_then_moves_it_to_another_node(procs, services, tmp_path):
    """A service being replaced: held, its hops wait (and count the wait); released to
    its new address, every later hop goes there and no chain fails."""
    addresses, _ = services
    new_port = procs.free_port()
    moved = [("127.0.0.3", new_port)]
    plan = default_plan(addresses)
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    directory = tmp_path / "directory.json"
    hops, chains = tmp_path / "hops.jsonl", tmp_path / "chains.jsonl"
    proc = procs.start(["agent-driver", "--plan", str(tmp_path / "plan.json"), "--hops-out",
                        str(hops), "--chains-out", str(chains), "--duration", "4",
                        "--concurrency", "4", "--directory", str(directory)])
    deadline = time.monotonic() + 10  # the driver's loop runs (a SIGHUP before is ignored)
    while not (hops.exists() and hops.stat().st_size) and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.3)
    directory.write_text(json.dumps({"services": {}, "held": ["retriever"]}))
    os.kill(proc.pid, signal.SIGHUP)
    held_at = time.time()
    time.sleep(0.5)  # the replacement starting
    procs.service("retriever", [f"{h}:{p}" for h, p in moved])
    directory.write_text(json.dumps({"services": {"retriever": [list(a) for a in moved]},
                                     "held": []}))
    os.kill(proc.pid, signal.SIGHUP)
    released_at = time.time()
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    summary = json.loads(out)
    assert summary["chains_failed"] == 0
    records = [json.loads(line) for line in hops.read_text().splitlines()]
    retrieves = [h for h in records if h["service"] == "retriever"]
    waited = [h for h in retrieves if "held_ms" in h]
    assert waited and all(h["held_ms"] <= h["latency_ms"] for h in waited)
    assert all(h["address"] == f"127.0.0.3:{new_port}" for h in waited)
    assert max(h["held_ms"] for h in waited) >= 400  # held until released, not before
    later = [h for h in retrieves if h["start"] > released_at + 0.05]
    assert later and all(h["address"] == f"127.0.0.3:{new_port}" for h in later)
    before = [h for h in retrieves if h["start"] < held_at - 0.05]
    assert before and all(h["address"].startswith("127.0.0.") and
                          not h["address"].startswith("127.0.0.3") for h in before)
