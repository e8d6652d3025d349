"""Host-wide sysctls a run changes for a moment, shared safely between runs.

A fabric on the userspace datapath raises ``net.core.{r,w}mem_default`` while it comes
up (see :func:`testbed.fabric.net.socket_buffer_defaults`), and every fabric expedites the
kernel's RCU grace periods while it comes up and goes (:func:`testbed.fabric.net.fast_rcu`).
Those are the whole host's, so:

- every change happens under one lock (``fcntl`` on :data:`LOCK`);
- the original values are saved in :data:`SAVED` before the first change, and the first
  saver wins: a run that starts while another holds them raised (or after one was
  killed with them raised) shares the saved originals instead of saving raised values;
- each run holding them raised is listed in :data:`SAVED` by pid and start time; the
  last one to leave puts the originals back, where the value is still the one a run
  set (a value an administrator changed meanwhile is left as they set it);
- a run killed while holding them (SIGKILL: no ``finally``) is a dead holder, and
  ``testbed clean`` (:func:`restore_saved`) puts the originals back once no live run
  holds them.
"""

from __future__ import annotations

import fcntl
import json
import os
import secrets
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from testbed.host import naming

SYSCTL_ROOT = Path("/proc/sys")
SYSFS_ROOT = Path("/sys")


def _paths() -> tuple[Path, Path]:
    root = naming.RUN_ROOT
    return root / "host-settings.lock", root / "host-settings.json"


def sysctl_path(name: str) -> Path:
    """``net.core.rmem_default`` -> /proc/sys/net/core/rmem_default; a kernel knob that
    is not a sysctl is named by its path under /sys (``/sys/kernel/rcu_expedited``)."""
    if name.startswith("/sys/"):
        return SYSFS_ROOT / name[len("/sys/"):]
    return SYSCTL_ROOT / name.replace(".", "/")


@contextmanager
def _locked() -> Iterator[Path]:
    lock, saved = _paths()
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield saved


def _load(saved: Path) -> dict:
    try:
        return json.loads(saved.read_text())
    except (OSError, ValueError):
        return {"original": {}, "holders": []}


def _store(saved: Path, state: dict) -> None:
    tmp = saved.with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=1))
    os.replace(tmp, saved)


def _live(holders: list[str]) -> list[str]:
    """Holders ("PID START_TIME TOKEN") whose process still runs."""
    return [h for h in holders if naming.recorded_pid(" ".join(h.split()[:2])) is not None]


def _put_back(saved: Path, state: dict, dry_run: bool = False) -> list[tuple[str, str]]:
    """Put each original back where the value is still the one the lab set (state
    ``set``); a value somebody changed since (an administrator) is theirs, and stays."""
    restored = []
    for name, value in state["original"].items():
        lab = state.get("set", {}).get(name)
        if lab is None:
            continue  # never changed by a run: still the original
        path = sysctl_path(name)
        try:
            now = path.read_text().strip()
        except OSError:
            continue
        if now != lab:
            continue
        if not dry_run:
            path.write_text(value)
        restored.append((name, value.strip()))
    if not dry_run:
        saved.unlink(missing_ok=True)
    return restored


@contextmanager
def raised(minimum: Mapping[str, int]) -> Iterator[None]:
    """Hold each sysctl at least at ``minimum[name]``; the originals return after the last holder.
    """
    me = f"{naming.pid_record(os.getpid()).strip()} {secrets.token_hex(4)}"  # nests
    with _locked() as saved:
        state = _load(saved)
        for name in minimum:  # first saver wins: never save a value a run raised
            state["original"].setdefault(name, sysctl_path(name).read_text())
        state["holders"] = _live(state["holders"]) + [me]
        state.setdefault("set", {})
        _store(saved, state)
        for name, value in minimum.items():
            path = sysctl_path(name)
            if int(path.read_text()) < value:
                state["set"][name] = str(value)  # saved before the write: a kill between
                _store(saved, state)
                path.write_text(str(value))
    try:
        yield
    finally:
        with _locked() as saved:
            state = _load(saved)
            holders = _live([h for h in state["holders"] if h != me])
            if holders:
                state["holders"] = holders
                _store(saved, state)
            else:
                _put_back(saved, state)


def restore_saved(dry_run: bool = False, force: bool = False) -> list[tuple[str, str]]:
    """Put back the originals a killed run left raised, unless a live run holds them.

    Returns the (sysctl, value) pairs restored (or that would be). ``force`` restores even
    while a live run holds them.
    """
    with _locked() as saved:
        if not saved.exists():
            return []
        state = _load(saved)
        if _live(state["holders"]) and not force:
            return []
        return _put_back(saved, state, dry_run=dry_run)
