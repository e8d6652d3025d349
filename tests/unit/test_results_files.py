"""Results folders and files: one folder per run, ``latest`` never missing, whole files,
key files readable by their owner alone."""

from __future__ import annotations

import os
import stat

import pytest

from testbed.core.runner import default_out, link_latest
from testbed.host.files import write_json, write_text


def test_two_runs_in_one_second_get_two_folders(tmp_path, monkeypatch):
    monkeypatch.setattr("time.strftime", lambda _fmt: "20261202-010203")
    a, b = default_out(tmp_path, "s"), default_out(tmp_path, "s")
    assert a != b and a.is_dir() and b.is_dir()
    assert (a.name, b.name) == ("20261202-010203", "20261202-010203-2")
    lab = default_out(tmp_path, "s", label="lab-x-")
    assert lab.name == "lab-x-20261202-010203" and lab.is_dir()


def test_latest_is_replaced_in_one_step_and_a_real_folder_is_left_alone(tmp_path):
    first, second = tmp_path / "s" / "1", tmp_path / "s" / "2"
    first.mkdir(parents=True)
    second.mkdir()
    link_latest(tmp_path, first)
    link_latest(tmp_path, second)
    assert (tmp_path / "latest").resolve() == second.resolve()
    # relative: it holds where the folder is seen under another path (a VM's share)
    assert os.readlink(tmp_path / "latest") == "s/2"
    moved = tmp_path.parent / f"{tmp_path.name}-moved"
    tmp_path.rename(moved)
    assert (moved / "latest").resolve() == (moved / "s" / "2").resolve()
    moved.rename(tmp_path)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
    (tmp_path / "latest").unlink()
    (tmp_path / "latest").mkdir()  # somebody's own folder named latest
    link_latest(tmp_path, first)
    assert (tmp_path / "latest").is_dir() and not (tmp_path / "latest").is_symlink()


def test_files_are_written_whole_and_keys_are_private(tmp_path):
    path = tmp_path / "summary.json"
    write_json(path, {"a": 1})
    write_json(path, {"a": 2})
    assert path.read_text() == '{\n  "a": 2\n}\n'
    keys = tmp_path / "macsec-keys.json"
    write_json(keys, {"links": []}, secret=True)
    assert stat.S_IMODE(keys.stat().st_mode) == 0o600
    write_text(tmp_path / "report.md", "x\n")
    assert sorted(os.listdir(tmp_path)) == ["macsec-keys.json", "report.md", "summary.json"]


def test_a_full_disk_is_one_line(monkeypatch, capsys):
    import errno

    from testbed.core import cli

    def full(_args):
        raise OSError(errno.ENOSPC, "No space left on device", "results/x/summary.json")

    monkeypatch.setattr(cli, "cmd_validate", full)
    assert cli.main(["validate", "x.yaml"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no space left writing results/x/summary.json" in err[0]


def test_a_unix_socket_in_a_folder_deeper_than_sun_path_binds_and_answers(tmp_path):
    """A results folder of any depth holds the MACsec forwarders' control sockets: the
    address goes through the folder's descriptor when the path is too long for sun_path,
    and a datagram sent to it arrives (the plain path itself is refused)."""
    import socket

    from testbed.host.files import UNIX_PATH_MAX, unix_address

    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    path = deep / "ctl-a.sock"
    assert len(str(path)) > UNIX_PATH_MAX
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as server, \
            socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as client:
        with pytest.raises(OSError, match="too long"):
            server.bind(str(path))
        with unix_address(path) as address:
            server.bind(address)
        assert path.is_socket()  # made in the folder itself
        with unix_address(path) as address:
            client.sendto(b"ping", address)
        server.settimeout(2)
        assert server.recv(16) == b"ping"
    short = tmp_path / "s.sock"
    with unix_address(short) as address:
        assert address == str(short)  # a short path is itself
