"""Whole runs through the CLI: results, teardown on success, Ctrl-C, a dead controller.

The two runs that check a results folder (the default scenario's, the macsec kind's)
assert what the run wrote and that its own prefix left nothing, not how fast: they share
the host (``shares_host``). The others look for anything of any run (after Ctrl-C, a
dead controller) or clean every dead run, and run alone."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from testbed.host.procs import wait_for

from .conftest import leftovers, sigint_default

pytestmark = pytest.mark.ovs
REPO = Path(__file__).resolve().parents[2]


def cli(*args: str, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "testbed.core.cli", *args], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=sigint_default, **kw)


def own_leftovers(summary: dict) -> list[str]:
    """What the runs of a summary left on the host, found by each one's prefix."""
    return [x for run in summary["runs"] for x in leftovers(f"tb{run['run_id']}")]


def no_testbed_leftovers() -> list[str]:
    """Anything on the host that a testbed run (tb + 4 hex digits) created."""
    from testbed.host.naming import is_owned

    return [x for x in leftovers("tb")
            if "mininet:tb" in x or is_owned(x.rsplit(":", 1)[-1].split("/")[-1])]


@pytest.mark.vm  # and in the lab VM: the default scenario on the kernel datapath
@pytest.mark.shares_host
def test_short_default_scenario_writes_valid_results(tmp_path):
    out = tmp_path / "out"
    proc = cli("run", "agents-vs-training", "--duration", "3", "--out", str(out))
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, stderr[-2000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["scenario"] == "agents-vs-training"
    assert isinstance(summary["seed"], int) and isinstance(summary["capabilities"], dict)
    assert [r["name"] for r in summary["runs"]] == ["agents-only", "training-1to1",
                                                    "training-4to1"]
    for run in summary["runs"]:
        assert set(run["fabric"]) >= {"switches", "hosts", "links", "start_s", "stop_s"}
        assert run["fabric"]["start_s"] > 0 and run["fabric"]["stop_s"] > 0
        agents = run["agents"]
        assert agents["chains_completed"] > 0
        assert agents["chains_started"] == agents["chains_completed"] + agents["chains_failed"]
        assert set(agents["latency_ms"]) == {"p50", "p95", "p99", "max"}
        assert agents["latency_ms"]["p50"] <= agents["latency_ms"]["p99"]
        training = run["training"]
        assert set(training) >= {"bytes", "goodput_mbps", "iterations", "iteration_ms"}
    assert summary["runs"][0]["training"]["iterations"] == 0
    for run in summary["runs"][1:]:
        assert run["training"]["iterations"] > 0 and run["training"]["bytes"] > 0
    for name in ("report.md", "chain_latency.png", "manifest.json"):
        assert (out / name).stat().st_size > 0
    report = (out / "report.md").read_text()
    assert "training-4to1" in report
    # the report says which backend each feature used, as the capability probe chose
    backends = summary["capabilities"]["backends"]
    if summary["capabilities"]["ovs_kernel_datapath"]:  # the lab VM
        assert backends["switch datapath"] == "Open vSwitch kernel datapath"
    for feature, backend in backends.items():
        assert f"- {feature}: {backend}" in report, feature
    assert "p99 ms" in stdout and str(out) in stdout
    assert own_leftovers(summary) == []
    # every file and field of the folder is in the results reference (docs/reference)
    from testbed.core.record_checks import check_folder

    assert check_folder(out) == []
    # and the folder loads into DataFrames, from which the example draws its figure
    analysed_by_the_loader_and_the_example(out, summary, tmp_path)


def analysed_by_the_loader_and_the_example(out: Path, summary: dict, tmp_path: Path) -> None:
    pytest.importorskip("pandas", reason="pandas is in the dev extra (pip install .[dev])")
    from testbed import results

    loaded = results.load(out)
    assert list(loaded.runs.variant) == [r["name"] for r in summary["runs"]]
    for run in summary["runs"]:
        chains = loaded.chains[loaded.chains.variant == run["name"]]
        assert len(chains) == run["agents"]["chains_started"]
        assert (loaded.hops.variant == run["name"]).sum() >= run["agents"]["chains_completed"]
        ranks = loaded.iterations[loaded.iterations.variant == run["name"]]
        assert ranks.groupby("iteration")["rank"].count().eq(4).sum() == \
            run["training"]["iterations"]
    assert not loaded.queues.empty and not loaded.fidelity.empty
    figure = tmp_path / "chains.png"
    done = subprocess.run([sys.executable, str(REPO / "examples" / "chain_latency.py"),
                           str(out), "-o", str(figure)], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr[-2000:]
    assert figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def write_scenario(tmp_path: Path, **overrides) -> Path:
    data = yaml.safe_load((REPO / "scenarios" / "agents-vs-training.yaml").read_text())
    data["variants"] = [{"name": "only"}]
    data.update(overrides)
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupted_run_removes_everything(tmp_path, sig):
    out = tmp_path / "out"
    proc = cli("run", str(write_scenario(tmp_path)), "--duration", "60", "--out", str(out))
    try:
        # wait until traffic runs: the driver has written its first chain
        assert wait_for(lambda: (out / "variants/only/chains.jsonl").exists(), 60)
        proc.send_signal(sig)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, stderr[-2000:]
    assert "interrupted" in stderr
    assert no_testbed_leftovers() == []


def test_run_survives_a_killed_controller_and_cleans_up(tmp_path):
    out = tmp_path / "out"
    proc = cli("run", str(write_scenario(tmp_path)), "--duration", "8", "--out", str(out))
    try:
        chains = out / "variants/only/chains.jsonl"
        assert wait_for(lambda: chains.exists(), 60)
        pid_files = list(Path("/run/testbed").glob("*/controller.pid"))
        assert pid_files
        for f in pid_files:  # only this run is alive while the test suite runs
            os.killpg(int(f.read_text().split()[0]), signal.SIGKILL)  # "PID START_TIME"
        killed_at = time.time()
        _, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, stderr[-2000:]
    after = [json.loads(x) for x in chains.read_text().splitlines()]
    late = [c for c in after if c["start"] > killed_at + 0.5]
    assert late and all(c["ok"] for c in late)  # chains keep completing without controller
    assert no_testbed_leftovers() == []


def test_clean_removes_only_what_the_testbed_made(tmp_path):
    from testbed.host.naming import REGISTRAR, new_run_id, pid_record, register, run_dir, run_prefix

    rid = new_run_id()
    prefix = run_prefix(rid)
    procs: list[subprocess.Popen] = []
    try:
        subprocess.run(["ip", "link", "add", f"{prefix}x0", "type", "veth", "peer", "name",
                        f"{prefix}x1"], check=True)
        register(rid, "link", f"{prefix}x0")
        subprocess.run(["ip", "link", "add", "keepme7x", "type", "veth", "peer", "name",
                        "keepme7y"], check=True)
        # named like the testbed's (tb + 4 hex digits) but made by somebody else
        subprocess.run(["ip", "link", "add", "tbface0", "type", "veth", "peer", "name",
                        "tbface1"], check=True)
        subprocess.run(["ip", "netns", "add", f"{prefix}ns"], check=True)
        register(rid, "netns", f"{prefix}ns")
        subprocess.run(["ovs-vsctl", "add-br", f"{prefix}br", "--", "set", "bridge",
                        f"{prefix}br", "datapath_type=netdev"], check=True)
        register(rid, "bridge", f"{prefix}br")
        helper = subprocess.Popen([sys.executable, "-m", "traffic", "agent-service", "--listen",
                                   "127.0.0.1:0", "--role", "tool"], cwd=REPO,
                                  stdout=subprocess.DEVNULL, start_new_session=True)
        procs.append(helper)
        nested = run_dir(rid) / "backbone" / "fast" / "pids"  # experiments nest pid files
        nested.mkdir(parents=True)
        (nested / "svc.pid").write_text(pid_record(helper.pid))
        # stale pid files whose pids now belong to somebody else's processes: a plain one,
        # and one whose command line holds the words of the testbed's helpers
        stranger = subprocess.Popen(["sleep", "300"], start_new_session=True)
        lookalike = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)",
                                      "testbed", "traffic"], start_new_session=True)
        procs += [stranger, lookalike]
        for name, proc in (("stale", stranger), ("lookalike", lookalike)):
            pid, started = pid_record(proc.pid).split()
            (run_dir(rid) / f"{name}.pid").write_text(f"{pid} {int(started) - 1}")
        # the names were registered by this (live) test process: make the run a dead one
        (run_dir(rid) / REGISTRAR).unlink()

        done = subprocess.run([sys.executable, "-m", "testbed.core.cli", "clean"], cwd=REPO,
                              capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        assert wait_for(lambda: helper.poll() is not None, 5)
        assert leftovers(prefix) == []
        links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
        assert "keepme7x" in links and "tbface0" in links
        assert stranger.poll() is None and lookalike.poll() is None
    finally:
        for name in ("keepme7x", "tbface0", f"{prefix}x0"):
            subprocess.run(["ip", "link", "del", name], capture_output=True)
        subprocess.run(["ip", "netns", "del", f"{prefix}ns"], capture_output=True)
        subprocess.run(["ovs-vsctl", "--if-exists", "del-br", f"{prefix}br"], capture_output=True)
        subprocess.run(["rm", "-rf", str(run_dir(rid))])
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()


@pytest.mark.shares_host
def test_macsec_scenario_through_the_cli(tmp_path):
    out = tmp_path / "out"
    proc = cli("run", "macsec", "--duration", "10", "--out", str(out))
    _, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, stderr[-2000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["kind"] == "macsec"
    assert [r["name"] for r in summary["runs"]] == ["unprotected", "protected"]
    assert all(r["agents"]["chains_completed"] > 0 for r in summary["runs"])
    macsec = summary["macsec"]
    assert macsec["attack"]["delivered_to_tap"] == 0
    assert macsec["throughput_mbps"]["protected"] > 0
    assert (out / "wire.pcap").stat().st_size > 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["macsec"]["keys"] == macsec["keys"]  # which keys: named, not held
    assert macsec["keys"]["file"] == "macsec-keys.json"
    assert "## MACsec" in (out / "report.md").read_text()
    assert own_leftovers(summary) == []


def test_clean_leaves_a_live_run_alone_unless_forced():
    from testbed.host.naming import claim, new_run_id, register, run_dir, run_prefix

    rid = new_run_id()
    prefix = run_prefix(rid)
    claim(rid)  # this test process owns the run: it is alive
    subprocess.run(["ip", "link", "add", f"{prefix}y0", "type", "veth", "peer", "name",
                    f"{prefix}y1"], check=True)
    register(rid, "link", f"{prefix}y0")
    try:
        done = subprocess.run([sys.executable, "-m", "testbed.core.cli", "clean"], cwd=REPO,
                              capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        assert f"left alone: run {rid}" in done.stdout
        assert f"{prefix}y0" in leftovers(prefix) and run_dir(rid).exists()
        # forced, but for this run only: ``testbed clean --force`` would also remove the
        # live runs of everybody else on a shared host
        from testbed.host.cleanup import clean

        removed, _ = clean(force=True, only={rid})
        assert f"interface {prefix}y0" in removed
        assert leftovers(prefix) == []
    finally:
        subprocess.run(["ip", "link", "del", f"{prefix}y0"], capture_output=True)
        subprocess.run(["rm", "-rf", str(run_dir(rid))])
