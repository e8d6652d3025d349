"""A helper starts only once its pid file exists (``testbed.host.procs.Helper``'s gate)."""

from __future__ import annotations

import os
import subprocess

import pytest

from testbed.host import procs
from testbed.host.naming import recorded_pid


def test_the_pid_file_names_the_program_itself(tmp_path):
    helper = procs.Helper("s", ["sleep", "30"], pid_dir=tmp_path)
    try:
        assert procs.wait_for(lambda: b"sleep" in open(f"/proc/{helper.pid}/cmdline",
                                                       "rb").read(), 5)
        assert recorded_pid((tmp_path / "s.pid").read_text()) == helper.pid
        assert os.getpgid(helper.pid) == helper.pid  # its own group, as before
    finally:
        assert helper.stop() is not None
    assert not (tmp_path / "s.pid").exists()


def test_a_starter_that_dies_before_the_pid_file_starts_nothing(tmp_path, monkeypatch):
    marker = tmp_path / "ran"
    started: list[subprocess.Popen] = []  # held here: no garbage collection reaps it first
    real_popen = subprocess.Popen

    def recorded(*args, **kwargs):
        started.append(real_popen(*args, **kwargs))
        return started[-1]

    def die(*_args):
        raise KeyboardInterrupt  # the starter ends between fork and the pid file

    monkeypatch.setattr(procs.subprocess, "Popen", recorded)
    monkeypatch.setattr(procs.Path, "write_text", die)
    with pytest.raises(KeyboardInterrupt):
        procs.Helper("m", ["touch", str(marker)], pid_dir=tmp_path)
    monkeypatch.undo()
    assert len(started) == 1, "the helper's shell was never started"
    # the gate saw its pipe closed: the shell exits without running the program
    try:
        started[0].wait(10)
    except subprocess.TimeoutExpired:
        started[0].kill()
        pytest.fail(f"the gate's shell did not exit: {started[0].pid}")
    assert not marker.exists()


def test_a_helper_reads_nothing_from_the_gate(tmp_path):
    out = tmp_path / "out"
    helper = procs.Helper("c", ["cat"], pid_dir=tmp_path, stdout_file=out)
    assert helper.wait(5) == 0 and out.read_bytes() == b""  # stdin is /dev/null
    helper.stop()


def test_an_exited_group_is_gone_before_its_parent_reaps_it():
    """A zombie is no live member: an init that reaps by polling (some containers' and
    sandboxes' pid 1) must not make every stop wait out its grace."""
    import subprocess
    import sys
    import time
    from pathlib import Path

    from testbed.host.procs import live_groups, live_processes, stop_groups, stop_processes

    quick = subprocess.Popen([sys.executable, "-c", "pass"], start_new_session=True)
    slow = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        deadline = time.monotonic() + 10
        while Path(f"/proc/{quick.pid}/stat").read_text().split(") ")[1][0] != "Z":
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert live_groups({quick.pid, slow.pid}) == {slow.pid}  # the zombie is unreaped
        t0 = time.monotonic()
        stop_groups([quick.pid, slow.pid], grace=5.0)  # nobody reaps while it waits
        assert time.monotonic() - t0 < 2.0
        assert live_groups({quick.pid, slow.pid}) == set()
        # processes one by one, as testbed clean stops those that lead no group
        other = subprocess.Popen(["sleep", "30"])
        assert live_processes({quick.pid, other.pid}) == {other.pid}
        t0 = time.monotonic()
        stop_processes([quick.pid, other.pid], grace=5.0)
        assert time.monotonic() - t0 < 2.0 and live_processes({other.pid}) == set()
        other.wait()
    finally:
        for p in (quick, slow):
            p.kill()
            p.wait()
