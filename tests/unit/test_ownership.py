"""What ``testbed clean`` may touch: pid files proven by start time, registered names."""

from __future__ import annotations

import subprocess
import sys

import pytest

from testbed.host import cleanup, naming


@pytest.fixture
def run_root(tmp_path, monkeypatch):
    monkeypatch.setattr(naming, "RUN_ROOT", tmp_path)
    monkeypatch.setattr(cleanup, "RUN_ROOT", tmp_path)
    return tmp_path


@pytest.fixture
def decoys():
    """A plain ``sleep`` and one whose command line holds the testbed's own words."""
    procs = [subprocess.Popen(["sleep", "300"], start_new_session=True),
             subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)",
                               "testbed", "traffic", "controllers", "mnexec"],
                              start_new_session=True)]
    yield procs
    for proc in procs:
        proc.kill()
        proc.wait()


def test_start_time_tells_a_reused_pid(decoys):
    for proc in decoys:
        record = naming.pid_record(proc.pid)
        assert naming.recorded_pid(record) == proc.pid
        pid, started = record.split()
        assert naming.recorded_pid(f"{pid} {int(started) + 1}") is None  # another process
        assert naming.recorded_pid(pid) is None  # a bare pid proves nothing


def test_clean_kills_only_processes_proven_by_start_time(run_root, decoys):
    mine = subprocess.Popen(["sleep", "300"], start_new_session=True)
    try:
        pids = run_root / "1a2b" / "backbone" / "pids"
        pids.mkdir(parents=True)
        (pids / "mine.pid").write_text(naming.pid_record(mine.pid))
        for i, proc in enumerate(decoys):  # stale pid files whose pids were reused
            started = int(naming.pid_record(proc.pid).split()[1])
            (run_root / "1a2b" / f"stale{i}.pid").write_text(f"{proc.pid} {started - 7}")
            (run_root / "1a2b" / f"bare{i}.pid").write_text(str(proc.pid))
        assert cleanup._helpers(["1a2b"]) == [mine.pid]
    finally:
        mine.kill()
        mine.wait()


def test_registry_round_trip(run_root):
    naming.register("1a2b", "link", "tb1a2bp0l0-eth1")
    naming.register("1a2b", "nft", "netdev tb1a2becn")
    naming.register_owned("netns", "tb1a2bnyc")
    assert naming.registered("1a2b") == {"link": {"tb1a2bp0l0-eth1"}, "nft": {"netdev tb1a2becn"},
                                         "netns": {"tb1a2bnyc"}}
    with pytest.raises(ValueError):
        naming.register("1a2b", "file", "x")
    with pytest.raises(ValueError):
        naming.register_owned("netns", "eth0")
    for kind, name in (("link", "tb1a2bp0l0-eth1"), ("nft", "netdev tb1a2becn"),
                       ("netns", "tb1a2bnyc")):
        naming.forget("1a2b", kind, name)
    assert naming.registered("1a2b") == {}
    assert not (run_root / "1a2b").exists()  # nothing else was in it


def test_a_name_that_only_looks_like_the_testbeds_is_not_owned(run_root, monkeypatch):
    naming.register("face", "bridge", "tbface1")
    listing = ('{"headings": ["name", "external_ids"], "data": ['
               '["tbface0", ["map", []]], ["tbface1", ["map", []]], '
               '["tb1a2bs0", ["map", [["testbed_run", "1a2b"]]]], '
               '["tb3c4ds0", ["map", [["testbed_run", "3c4d"]]]]]}')

    class Done:
        returncode, stdout = 0, listing

    monkeypatch.setattr(cleanup.shutil, "which", lambda name: "/usr/bin/ovs-vsctl")
    monkeypatch.setattr(cleanup.subprocess, "run", lambda *a, **k: Done())
    names = naming.registered("face")["bridge"]
    assert cleanup._owned_bridges({"3c4d"}, names) == ["tbface1", "tb1a2bs0"]


def test_new_run_id_avoids_prefixes_in_use(monkeypatch):
    ids = iter(["face", "1a2b"])
    monkeypatch.setattr(naming.secrets, "token_hex", lambda n: next(ids))
    monkeypatch.setattr(naming, "_prefix_in_use", lambda prefix: prefix == "tbface")
    assert naming.new_run_id() == "1a2b"


def test_live_runs_counts_owners_registrars_and_bare_pids(run_root):
    me = naming.pid_record(__import__("os").getpid())
    for rid, record, text in (("aaaa", naming.OWNER, me), ("bbbb", naming.REGISTRAR, me),
                              ("cccc", naming.OWNER, me.split()[0]),  # older testbed: bare pid
                              ("dddd", naming.OWNER, f"{me.split()[0]} 1")):  # reused pid
        (run_root / rid).mkdir()
        (run_root / rid / record).write_text(text)
    assert set(naming.live_runs()) == {"aaaa", "bbbb", "cccc"}


def test_an_unclaimed_registration_is_alive_with_its_process(run_root):
    naming.register("eeee", "netns", "tbeeeens")
    assert "eeee" in naming.live_runs()  # a concurrent clean leaves it alone
    naming.forget("eeee", "netns", "tbeeeens")
    assert not (run_root / "eeee").exists()


def test_run_folders_are_closed_to_everyone_but_root_and_frr(tmp_path, monkeypatch):
    import grp
    import stat

    root = tmp_path / "run"
    monkeypatch.setattr(naming, "RUN_ROOT", root)
    folder = naming.claim("9f9f")
    try:
        gid = grp.getgrnam(naming.DAEMON_GROUP).gr_gid
    except KeyError:
        gid = None
    for path in (root, folder):
        st = path.stat()
        assert st.st_mode & 0o007 == 0, oct(st.st_mode)  # others: nothing, not even search
        if gid is None:
            assert stat.S_IMODE(st.st_mode) == 0o700
        else:  # FRR's daemons pass through to their configs; they cannot list
            assert (stat.S_IMODE(st.st_mode), st.st_gid) == (0o710, gid)
    root.chmod(0o755)  # a folder an older testbed left open is closed again
    naming.register("9f9f", "netns", "tb9f9fx")
    assert root.stat().st_mode & 0o077 in (0o000, 0o010)
