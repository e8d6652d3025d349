"""Host-wide sysctls: a lock, originals saved once, back after the last run or a kill."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from testbed.host import naming
from testbed.host import sysctls as host_settings

NAMES = ("net.core.rmem_default", "net.core.wmem_default")
BIG = {name: 8388608 for name in NAMES}


@pytest.fixture
def host(tmp_path, monkeypatch):
    """A fake /proc/sys with the two sysctls at 212992, and a private /run/testbed."""
    sys_root, run_root = tmp_path / "sys", tmp_path / "run"
    for name in NAMES:
        path = sys_root / name.replace(".", "/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("212992\n")
    monkeypatch.setattr(host_settings, "SYSCTL_ROOT", sys_root)
    monkeypatch.setattr(naming, "RUN_ROOT", run_root)
    return sys_root, run_root


def values() -> list[int]:
    return [int(host_settings.sysctl_path(name).read_text()) for name in NAMES]


def test_overlapping_runs_leave_the_host_as_it_was(host):
    a, b = host_settings.raised(BIG), host_settings.raised(BIG)
    a.__enter__()
    b.__enter__()  # sees the raised values, must not save them as the originals
    assert values() == [8388608, 8388608]
    a.__exit__(None, None, None)
    assert values() == [8388608, 8388608]  # b still needs them
    b.__exit__(None, None, None)
    assert values() == [212992, 212992]
    assert host_settings.restore_saved() == []


def test_fabric_uses_the_shared_settings(host):
    from testbed.fabric.net import socket_buffer_defaults

    with socket_buffer_defaults(4194304), socket_buffer_defaults(8388608):
        assert values() == [8388608, 8388608]
    assert values() == [212992, 212992]


def _killed_inside(sys_root: Path, run_root: Path) -> None:
    """A run that is SIGKILLed while it holds the settings raised (during bring-up)."""
    code = textwrap.dedent(f"""
        import time
        from pathlib import Path
        from testbed.host import sysctls as host_settings, naming
        host_settings.SYSCTL_ROOT = Path({str(sys_root)!r})
        naming.RUN_ROOT = Path({str(run_root)!r})
        from testbed.fabric.net import socket_buffer_defaults
        with socket_buffer_defaults(8388608):
            print("raised", flush=True)
            time.sleep(60)
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "raised"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    proc.stdout.close()


def test_clean_restores_after_a_killed_run(host):
    _killed_inside(*host)
    assert values() == [8388608, 8388608]  # nobody put them back
    with host_settings.raised(BIG):  # a later run shares the killed run's originals
        pass
    assert values() == [212992, 212992]
    _killed_inside(*host)
    assert host_settings.restore_saved(dry_run=True) == [(n, "212992") for n in NAMES]
    assert values() == [8388608, 8388608]
    assert host_settings.restore_saved() == [(n, "212992") for n in NAMES]
    assert values() == [212992, 212992]


def test_clean_leaves_settings_a_live_run_holds(host):
    with host_settings.raised(BIG):
        assert host_settings.restore_saved() == []
        assert values() == [8388608, 8388608]
    assert values() == [212992, 212992]


def test_fast_rcu_is_held_and_put_back_like_a_sysctl(host, tmp_path, monkeypatch):
    """RCU expedited for a fabric's bring-up and teardown: a /sys knob, shared between
    runs, back to the host's value after the last; no knob, nothing done."""
    from testbed.fabric import net as fabric

    sysfs = tmp_path / "sysfs"
    knob = sysfs / "kernel" / "rcu_expedited"
    knob.parent.mkdir(parents=True)
    knob.write_text("0\n")
    monkeypatch.setattr(host_settings, "SYSFS_ROOT", sysfs)
    assert host_settings.sysctl_path(fabric.RCU_EXPEDITED) == knob
    with fabric.fast_rcu():
        with fabric.fast_rcu():
            assert knob.read_text().strip() == "1"
        assert knob.read_text().strip() == "1"  # the outer holder still needs it
    assert knob.read_text().strip() == "0"
    knob.unlink()
    with fabric.fast_rcu():  # a kernel without the knob: left alone
        assert not knob.exists()


def test_a_value_an_administrator_changed_meanwhile_is_left_alone(host):
    with host_settings.raised(BIG):
        host_settings.sysctl_path(NAMES[0]).write_text("1048576\n")  # the admin's
    assert values() == [1048576, 212992]


def test_a_value_the_lab_did_not_raise_is_not_written(host):
    host_settings.sysctl_path(NAMES[1]).write_text("16777216\n")  # already larger
    with host_settings.raised(BIG):
        assert values() == [8388608, 16777216]
        host_settings.sysctl_path(NAMES[1]).write_text("4096\n")  # the admin's
    assert values() == [212992, 4096]
