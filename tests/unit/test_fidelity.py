"""The fidelity monitor: /proc parsing on fixtures, CPU deltas on a fake /proc, the verdict
from synthetic samples, seeds combined, the report's section (no root, no fabric)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from testbed.core import fidelity, fidelity_verdict, runner
from testbed.core.fidelity import WatchedLink, link_sample, owed
from testbed.core.fidelity_verdict import Thresholds, verdict
from testbed.core.seeds import combine
from testbed.host import procs
from testbed.reports import report

# A /proc/stat as Linux 6.1 writes it: ten fields a CPU (guest time inside user).
PROC_STAT = """\
cpu  {user} 20 {system} {idle} {iowait} 0 30 0 100 0
cpu0 0 0 0 0 0 0 0 0 0 0
cpu1 0 0 0 0 0 0 0 0 0 0
intr 123456 0 9 0 0
ctxt 987654
btime 1700000000
processes 4242
procs_running 2
procs_blocked 0
softirq 1 2 3
"""


def proc_stat(user: int, system: int, idle: int, iowait: int = 0) -> str:
    return PROC_STAT.format(user=user, system=system, idle=idle, iowait=iowait)


def pid_stat(pid: int, comm: str, pgrp: int, utime: int, stime: int, start: int,
             ppid: int = 1) -> str:
    """A /proc/PID/stat line (52 fields) with the fields the monitor reads."""
    fields = [str(pid), f"({comm})", "S", str(ppid), str(pgrp), str(pgrp), "0", "-1", "4194560",
              "100", "0", "0", "0", str(utime), str(stime), "0", "0", "20", "0", "1", "0",
              str(start)] + ["0"] * 30
    return " ".join(fields) + "\n"


# -- /proc parsing ---------------------------------------------------------------------
def test_cpu_times_from_proc_stat():
    t = procs.parse_cpu_times(proc_stat(user=1000, system=500, idle=8000, iowait=200))
    # user nice system idle iowait irq softirq steal; guest (100) is inside user already
    assert t == procs.CpuTimes(total=1000 + 20 + 500 + 8000 + 200 + 30, idle=8200, cpus=2)


def test_cpu_times_of_an_empty_file_are_zero():
    assert procs.parse_cpu_times("") == procs.CpuTimes(0, 0, 1)


@pytest.mark.parametrize("comm", ["ovs-vswitchd", "python3 -m x", "a) (b", "(sd-pam)"])
def test_proc_stat_counts_fields_from_the_last_parenthesis(comm):
    st = procs.parse_proc_stat(pid_stat(4242, comm, 4200, utime=300, stime=45, start=987,
                                           ppid=17))
    assert st == procs.ProcStat(comm=comm, ppid=17, pgrp=4200, ticks=345, start=987)


def test_proc_stat_of_this_process_parses():
    st = procs.parse_proc_stat(Path("/proc/self/stat").read_text())
    assert st.ticks >= 0 and st.start > 0


def test_run_folders_of_this_owner_and_their_pid_files_at_any_depth(tmp_path):
    mine, other = tmp_path / "1a2b", tmp_path / "3c4d"
    for folder, owner in ((mine, "77"), (other, "88")):
        (folder / "backbone" / "fast" / "pids").mkdir(parents=True)
        (folder / "owner").write_text(owner)
    (mine / "controller.pid").write_text("101\n")
    (mine / "backbone" / "fast" / "pids" / "nyc-zebra.pid").write_text("102")
    (mine / "backbone" / "junk.pid").write_text("not a pid")
    (other / "controller.pid").write_text("201")
    assert fidelity.owned_run_dirs(77, tmp_path) == [mine]
    assert fidelity.helper_pids([mine]) == {101, 102}
    assert fidelity.owned_run_dirs(99, tmp_path / "missing") == []


def test_run_folders_and_pid_files_as_runs_write_them(tmp_path):
    """Owner and pid files hold "PID START_TIME" (naming.pid_record): found all the same."""
    mine, other = tmp_path / "1a2b", tmp_path / "3c4d"
    for folder, owner in ((mine, "77 12345\n"), (other, "771 5\n")):
        (folder / "switch").mkdir(parents=True)
        (folder / "owner").write_text(owner)
    (mine / "controller.pid").write_text("101 4242\n")
    assert fidelity.owned_run_dirs(77, tmp_path) == [mine]
    assert fidelity.helper_pids([mine]) == {101}


def test_switch_processes_are_the_runs_vswitchd_pid_files_that_run(tmp_path, monkeypatch):
    monkeypatch.setattr(fidelity, "ovs_pid", lambda: None)
    folder = tmp_path / "1a2b"
    (folder / "switch").mkdir(parents=True)
    me = os.getpid()
    (folder / "switch" / "vswitchd0.pid").write_text(f"{me} 1\n")
    (folder / "switch" / "vswitchd1.pid").write_text("999999999 1\n")  # gone
    (folder / "switch" / "ovsdb0.pid").write_text("1 1\n")  # a database, not a switch
    assert fidelity.switch_pids([folder]) == [me]
    monkeypatch.setattr(fidelity, "ovs_pid", lambda: 1)
    assert fidelity.switch_pids([folder]) == [1, me]


# -- CPU deltas on a fake /proc ----------------------------------------------------------
class FakeProc:
    """A /proc with /proc/stat, /proc/uptime and some processes, rewritten between samples."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir()

    def host(self, user: int, system: int, idle: int, uptime_s: float) -> None:
        (self.root / "stat").write_text(proc_stat(user, system, idle))
        (self.root / "uptime").write_text(f"{uptime_s:.2f} 1.00\n")

    def proc(self, pid: int, comm: str, pgrp: int, ticks: int, start: int = 0,
             threads: dict[int, tuple[str, int]] | None = None, ppid: int = 1) -> None:
        folder = self.root / str(pid)
        folder.mkdir(exist_ok=True)
        (folder / "stat").write_text(pid_stat(pid, comm, pgrp, ticks, 0, start, ppid))
        for tid, (name, t) in (threads or {}).items():
            task = folder / "task" / str(tid)
            task.mkdir(parents=True, exist_ok=True)
            (task / "stat").write_text(pid_stat(tid, name, pgrp, t, 0, start))


def test_cpu_sample_splits_the_host_into_ovs_helpers_runner_and_the_rest(tmp_path,
                                                                          monkeypatch):
    hz = fidelity.HZ
    proc, runs = FakeProc(tmp_path / "proc"), tmp_path / "run"
    monkeypatch.setattr(fidelity, "PROC", proc.root)
    (tmp_path / "ovs.pid").write_text("500\n")
    monkeypatch.setattr(fidelity, "OVS_PID_FILES", (tmp_path / "ovs.pid",))
    (runs / "1a2b").mkdir(parents=True)
    (runs / "1a2b" / "owner").write_text("10")
    (runs / "1a2b" / "controller.pid").write_text("600")
    (runs / "1a2b" / "rank0.pid").write_text("700")
    # t = 100 s: the baseline
    proc.host(user=1000, system=0, idle=1000, uptime_s=100)
    proc.proc(10, "testbed", 10, ticks=50)  # the runner
    proc.proc(500, "ovs-vswitchd", 500, ticks=0,
              threads={500: ("ovs-vswitchd", 1000), 501: ("handler1", 10)})
    proc.proc(600, "python3", 600, ticks=400, start=1)
    proc.proc(700, "mnexec", 700, ticks=0, start=1)
    proc.proc(900, "stress", 900, ticks=5000, start=1)  # not the lab's
    proc.proc(950, "forwarder", 950, ticks=100, start=1, ppid=10)  # no pid file: a child
    proc.proc(951, "python3", 950, ticks=0, start=1, ppid=950)  # ... and its child
    cpu = fidelity._Cpu(owner=10, run_root=runs)
    first = cpu.sample(1.0)
    assert first["cpus"] == 2 and "host_idle" not in first and "helpers_cores" not in first
    # t = 101 s: one second later (2 CPUs = 2 * HZ ticks), 1.1 cores busy
    proc.host(user=1000 + hz + hz // 10, system=0, idle=1000 + hz - hz // 10, uptime_s=101)
    proc.proc(10, "testbed", 10, ticks=50 + hz // 10)  # 0.1 core
    proc.proc(500, "ovs-vswitchd", 500, ticks=0,
              threads={500: ("ovs-vswitchd", 1000 + hz // 2), 501: ("handler1", 10 + hz // 10)})
    proc.proc(600, "python3", 600, ticks=400 + hz // 10)  # 0.1 core
    proc.proc(701, "python3", 700, ticks=hz // 5, start=int(100.5 * hz))  # new, in group 700
    (proc.root / "701" / "cmdline").write_text("/v/bin/python\0-m\0traffic\0training\0")
    proc.proc(800, "late", 700, ticks=1000, start=1)  # in the group, seen late: baseline
    proc.proc(900, "stress", 900, ticks=5000 + hz)
    proc.proc(950, "forwarder", 950, ticks=100 + hz // 10, ppid=10)  # 0.1 core
    proc.proc(951, "python3", 950, ticks=0, ppid=950)
    s = cpu.sample(1.0)
    assert s["host_idle"] == 0.45
    assert s["ovs_cores"] == pytest.approx(0.6, abs=0.02)
    assert s["ovs_thread_cores"] == pytest.approx(0.5, abs=0.02)
    assert s["ovs_thread"] == "ovs-vswitchd"
    # 600, the new 701, the runner's child 950
    assert s["helpers_cores"] == pytest.approx(0.4, abs=0.02)
    assert s["helpers"] == 6  # 600, 700, 701, 800, 950, 951
    # by kind, busiest first: the rank (by its command line), then by name
    assert s["helpers_top"] == [["traffic training", pytest.approx(0.2, abs=0.02)],
                                ["forwarder", pytest.approx(0.1, abs=0.02)],
                                ["python3", pytest.approx(0.1, abs=0.02)]]
    assert s["runner_cores"] == pytest.approx(0.1, abs=0.02)
    # 1.1 cores busy: 0.6 ovs + 0.4 helpers + 0.1 runner; nothing else
    assert s["other_cores"] == pytest.approx(0.0, abs=0.03)


def test_cpu_sample_without_ovs_or_helpers(tmp_path, monkeypatch):
    proc = FakeProc(tmp_path / "proc")
    monkeypatch.setattr(fidelity, "PROC", proc.root)
    monkeypatch.setattr(fidelity, "OVS_PID_FILES", (tmp_path / "missing.pid",))
    proc.host(user=0, system=0, idle=100, uptime_s=10)
    cpu = fidelity._Cpu(owner=1, run_root=tmp_path / "run")
    cpu.sample(1.0)
    proc.host(user=10, system=0, idle=190, uptime_s=11)
    s = cpu.sample(1.0)
    assert s["host_idle"] == 0.9 and "ovs_cores" not in s
    assert s["helpers_cores"] == 0.0 and s["helpers"] == 0


# -- links -------------------------------------------------------------------------------
def test_a_link_is_judged_on_what_its_queue_owed_the_wire():
    lk = WatchedLink(None, "tb1a2bp0l0e3", 10)  # 1.25 MB a second
    full = link_sample(lk, (0, 9000), (1_250_000, 9000), 1.0, 1_250_000)
    assert full["saturated"] and full["delivered"] == 1.0 and full["mbps"] == 10.0
    starved = link_sample(lk, (0, 9000), (625_000, 64000), 1.0, 1_250_000)
    assert starved["delivered"] == 0.5
    # bursts: a backlog at every read, but small; what it owed was sent: not judged
    bursty = link_sample(lk, (0, 3434), (800_000, 3434), 1.0, 4 * 3434)
    assert not bursty["saturated"] and "delivered" not in bursty
    # 64 KB at each of four reads owes 256 KB: a fifth of a second, not judged; two
    # quarters at full rate (625 KB) are judged, one (312.5 KB) is not
    assert link_sample(lk, (0, 0), (625_000, 0), 1.0, 2 * owed(lk, 10**6, 0.25))["saturated"]
    assert not link_sample(lk, (0, 0), (625_000, 0), 1.0, owed(lk, 10**6, 0.25))["saturated"]
    assert not link_sample(lk, (0, 64_000), (0, 64_000), 1.0, 4 * owed(lk, 64_000, 0.25))[
        "saturated"]


def test_a_queue_owes_what_it_holds_as_far_as_its_rate_allows():
    lk = WatchedLink(None, "tb1a2bp0l0e3", 10)
    assert owed(lk, 64_000, 0.25) == 64_000
    assert owed(lk, 1_000_000, 0.25) == 312_500
    assert owed(lk, 0, 0.25) == 0


def test_a_delay_line_is_not_a_backlog():
    lk = WatchedLink("tb1a2bnyc", "tb1a2bl0a", 100, min_backlog=125_000)  # 10 ms at 100
    assert lk.name == "tb1a2bnyc/tb1a2bl0a"
    assert owed(lk, 120_000, 0.25) == 0
    assert owed(lk, 1_000_000, 0.25) == 875_000


class _Reads:
    """A fake of the monitor's netlink side: each call returns the next scripted read,
    {link: (bytes sent, backlog, time)}, for the links asked about."""

    def __init__(self, reads: list[dict]) -> None:
        self.reads, self.asked = reads, []

    def queues(self, links):
        now = self.reads.pop(0)
        self.asked.append(sorted(lk.name for lk in links))
        return {lk.name: now[lk.name] for lk in links if lk.name in now}

    def close(self, netns=None) -> None:
        pass


def _monitor(tmp_path, reads: list[dict]) -> fidelity.Monitor:
    mon = fidelity.Monitor(tmp_path / "fidelity.jsonl")
    mon._netns = _Reads(reads)
    mon._cpu.sample = lambda interval: {"host_idle": 0.9}
    return mon


def test_the_monitor_owes_what_each_read_held_and_stops_polling_an_empty_queue(tmp_path):
    deep, bursty = WatchedLink(None, "deep", 10), WatchedLink(None, "bursty", 10)
    mon = _monitor(tmp_path, [
        {"deep": (0, 200_000, 0.0), "bursty": (0, 200_000, 0.0)},          # baseline
        {"deep": (300_000, 200_000, 0.25), "bursty": (300_000, 0, 0.25)},  # polls
        {"deep": (600_000, 200_000, 0.5)},
        {"deep": (900_000, 200_000, 0.75)},
        {"deep": (1_200_000, 200_000, 1.0), "bursty": (800_000, 64_000, 1.0)},  # sample
    ])
    mon.watch([deep, bursty])
    mon._sample()
    for _ in range(3):
        mon._poll()
    mon._last -= 1.0  # a second since the baseline
    mon._sample()
    # after its queue read empty, the bursty link was not polled again
    assert mon._netns.asked[2:4] == [["deep"], ["deep"]]
    (deep_s,) = mon.samples[0]["saturated"]
    assert deep_s["link"] == "deep" and deep_s["delivered"] == 1.5  # 1.2 MB for 800 KB owed
    assert mon._owed == {}


def test_a_short_span_keeps_what_was_owed_for_the_next_sample(tmp_path):
    lk = WatchedLink(None, "deep", 10)
    mon = _monitor(tmp_path, [
        {"deep": (0, 400_000, 0.0)},
        {"deep": (300_000, 400_000, 0.3)},     # the sample: too short a span to judge
        {"deep": (1_250_000, 400_000, 1.0)},   # the next sample
    ])
    mon.watch([lk])
    mon._sample()
    mon._last -= 1.0
    mon._sample()
    assert mon.samples[0]["saturated"] == [] and mon._owed == {"deep": 375_000.0}  # 0.3 s
    mon._last -= 1.0
    mon._sample()
    (s,) = mon.samples[1]["saturated"]
    assert s["delivered"] == round(1_250_000 / (375_000 + 400_000), 3)  # over the whole 1 s


def test_a_sample_is_judged_only_when_its_whole_interval_lies_in_the_window(tmp_path):
    """The interval in which the window opened (the generators still getting ready) is
    not judged; the next one is; the one in which it closed is not."""
    mon = _monitor(tmp_path, [{}] * 6)
    mon._sample()  # the baseline
    for step in ("before", "opens", "inside", "closes"):
        if step == "opens":
            mon.watch([])
        elif step == "closes":
            mon.unwatch()
        time.sleep(0.01)
        mon._sample()
    assert [s["measuring"] for s in mon.samples] == [False, False, True, False]


# -- the verdict -------------------------------------------------------------------------
def sample(idle: float = 0.8, ovs: float = 0.3, helpers: float = 0.2, other: float = 0.1,
           delivered: tuple[float, ...] = (), measuring: bool = True) -> dict:
    return {"host_idle": idle, "ovs_cores": ovs + 0.02, "ovs_thread_cores": ovs,
            "helpers_cores": helpers, "other_cores": other, "measuring": measuring,
            "saturated": [{"link": f"p{i}", "delivered": d} for i, d in enumerate(delivered)]}


def test_an_idle_host_is_ok():
    v = verdict([sample(delivered=(0.99, 1.0)) for _ in range(10)])
    assert v["ok"] and v["reasons"] == [] and v["samples"] == 10
    assert v["stats"]["host_idle"] == {"p10": 0.8, "mean": 0.8}
    assert v["stats"]["delivery"] == {"p10": 0.99, "link_samples": 20}
    assert v["thresholds"] == Thresholds().to_dict()


def test_a_starved_host_is_flagged_with_who_used_the_cpu():
    samples = [sample(idle=0.02, other=1.5) for _ in range(5)] + [sample() for _ in range(5)]
    v = verdict(samples)
    assert not v["ok"]
    reason, = v["reasons"]
    assert "less than 10 % idle CPU in 50 % of the samples" in reason
    assert "everything else 0.80 cores on average" in reason


def test_one_bad_second_in_five_is_noise():
    samples = [sample(idle=0.0, ovs=1.0, delivered=(0.5,))] * 2 + [sample(delivered=(1.0,))] * 8
    assert verdict(samples)["ok"]  # 20 %: not more than the share allowed
    samples.append(sample(idle=0.0, ovs=1.0, delivered=(0.5,)))
    assert len(verdict(samples)["reasons"]) == 3  # 3 of 11: more than 20 %


def test_a_pegged_forwarding_thread_is_flagged():
    v = verdict([sample(ovs=0.97, idle=0.4) for _ in range(10)])
    assert not v["ok"]
    assert v["reasons"] == ["ovs-vswitchd's forwarding thread used more than 0.9 of a core "
                            "in 100 % of the samples: every switch's frames waited for that "
                            "one thread, so rates and latencies measure it"]
    assert v["stats"]["ovs_thread_cores"] == {"p90": 0.97, "max": 0.97}


def test_links_that_miss_their_rate_are_flagged_once_enough_were_seen():
    few = [sample(delivered=(0.4,)) for _ in range(4)]
    assert verdict(few)["ok"]  # 4 link-samples: too few to judge
    many = [sample(delivered=(0.4, 1.0)) for _ in range(5)]
    v = verdict(many)
    assert not v["ok"]
    assert v["reasons"][0].startswith("saturated links sent less than 90 % of what their "
                                      "queues held for the wire in 50 % of 10 link-samples "
                                      "(p10 0.40)")


def test_only_the_measured_window_is_judged_when_there_is_one():
    bring_up = [sample(idle=0.0, measuring=False) for _ in range(6)]
    traffic = [sample() for _ in range(4)]
    v = verdict(bring_up + traffic)
    assert v["ok"] and v["samples"] == 4
    assert not verdict(bring_up)["ok"]  # no window: every sample counts


def test_no_samples_is_no_evidence_against_the_run():
    v = verdict([])
    assert v["ok"] and v["samples"] == 0 and v["stats"]["host_idle"]["p10"] is None


def test_a_starved_host_names_the_busiest_helpers():
    samples = [{"host_idle": 0.05, "helpers_cores": 1.5, "other_cores": 0.1,
                "helpers_top": [["testbed.fabric.pfc", 0.9], ["traffic training", 0.5]],
                "saturated": []}] * 4
    samples += [{**samples[0], "helpers_top": [["traffic training", 1.3]]}]
    v = verdict(samples)
    # means over the window: 0.9 in four samples of five, 0.5 in four and 1.3 in one
    assert v["stats"]["helpers_top"] == [["testbed.fabric.pfc", 0.72],
                                         ["traffic training", 0.66]]
    reason, = v["reasons"]
    assert ("the lab's helpers 1.50 cores on average (most: testbed.fabric.pfc 0.72 cores, "
            "traffic training 0.66 cores), everything else") in reason


def test_samples_without_ovs_figures():
    samples = [{"host_idle": 0.05, "helpers_cores": 0.1, "other_cores": 1.8, "saturated": []}]
    reason, = verdict(samples * 5)["reasons"]
    assert "ovs-vswitchd ? at p90" in reason


def test_a_server_is_judged_sample_by_sample_and_named_in_the_runs_reasons():
    # half the window the server's switch thread was pegged, half it was idle: an average
    # (0.5 cores, 45 % idle) would pass it; its samples, judged one by one, do not
    pegged = [{**sample(ovs=0.98, idle=0.1), "cpus": 2} for _ in range(5)]
    calm = [{**sample(ovs=0.02, idle=0.8), "cpus": 2} for _ in range(5)]
    before = [{**sample(idle=0.0, measuring=False), "cpus": 2}]  # bring-up: not judged
    rec = fidelity_verdict.server_record("gpu2", before + pegged + calm)
    assert (rec["server"], rec["cores"], rec["idle_share"]) == ("gpu2", 2, 0.45)
    assert rec["busy_cores"] == 1.1 and rec["fidelity"]["samples"] == 10
    ok = verdict([sample() for _ in range(10)])
    run = fidelity_verdict.with_servers(ok, [rec, fidelity_verdict.server_record("gpu3", calm)])
    assert not run["ok"]
    assert run["reasons"] == ["server gpu2: ovs-vswitchd's forwarding thread used more than "
                              "0.9 of a core in 50 % of the samples: every switch's frames "
                              "waited for that one thread, so rates and latencies measure it"]
    assert fidelity_verdict.with_servers(ok, [fidelity_verdict.server_record("gpu3", calm)]) is ok


# -- the monitor (no root: /proc only, no links) ----------------------------------------
def test_monitor_writes_a_line_a_sample_and_judges_at_stop(tmp_path):
    path = tmp_path / "v" / "fidelity.jsonl"
    fast = Thresholds(interval_s=0.1)
    with fidelity.Monitor(path, fast, run_root=tmp_path / "run") as mon:
        with mon.watching([]):
            # three judged samples: 0.4 s on a lab machine; far longer in an emulated VM
            deadline = time.monotonic() + 30
            while (sum(s["measuring"] for s in mon.samples) < 3
                   and time.monotonic() < deadline):
                time.sleep(0.05)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(lines) == len(mon.samples)
    assert mon.result["samples"] == sum(s["measuring"] for s in lines) >= 3
    assert {"t", "interval_s", "measuring", "host_idle", "cpus", "helpers_cores",
            "saturated"} <= set(lines[-1])
    assert mon.result["thresholds"]["interval_s"] == 0.1


# -- where the verdict goes --------------------------------------------------------------
def entry(name: str, seed: int, ok: bool) -> dict:
    v = verdict([sample(idle=0.8 if ok else 0.01)] * 5)
    return {"name": name, "seed": seed, "fidelity": v,
            "agents": {}, "training": {}, "fabric": {}}


def test_seeds_keep_their_verdicts_and_one_bad_seed_flags_the_variant():
    run = combine("ecmp", [entry("ecmp", 1, True), entry("ecmp", 2, False),
                           entry("ecmp", 3, True)])
    assert [e["fidelity"]["ok"] for e in run["seeds"]] == [True, False, True]
    assert run["fidelity"]["ok"] is False and run["fidelity"]["flagged_seeds"] == [2]
    assert run["fidelity"]["reasons"][0].startswith("seed 2: the host had less than")
    assert run["fidelity"]["samples"] == 15
    one = combine("ecmp", [entry("ecmp", 1, True)])
    assert one["fidelity"] == one["seeds"][0]["fidelity"]


def test_manifest_record_names_the_flagged_runs():
    runs = [combine("a", [entry("a", 1, True), entry("a", 2, False)]),
            combine("b", [entry("b", 1, True), entry("b", 2, True)])]
    record = runner._fidelity_record(runs)
    assert record["ok"] is False and record["thresholds"] == Thresholds().to_dict()
    assert [(f["variant"], f["seed"]) for f in record["flagged"]] == [("a", 2)]
    assert runner._fidelity_record([])["ok"] is True


def test_report_names_the_runs_not_to_trust():
    summary = {"runs": [combine("a", [entry("a", 1, True), entry("a", 2, False)]),
                        combine("b", [entry("b", 1, True)])]}
    warning, = report.untrusted(summary)
    assert warning.startswith("Do not trust the numbers of a (seed 2): the host had less")
    section = report.fidelity_section(summary)
    assert section[0] == "## Fidelity"
    rows = [line for line in section if line.startswith("| a ") or line.startswith("| b ")]
    assert len(rows) == 3
    assert rows[1].startswith("| a | 2 | FLAGGED | 5 | 0.01 / 0.01 |")
    assert rows[2].startswith("| b | - | ok |")
    assert report.fidelity_section({"runs": [{"name": "old", "agents": {}}]}) == []
