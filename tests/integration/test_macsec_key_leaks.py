"""No SAK outside the key files a run writes on purpose (mode 0600, named in summary.json):
not in any other file a MACsec run or a backbone run leaves in its results folder, not in
any file of its run folder while it runs, and not on any command line seen meanwhile
(``/proc/PID/cmdline`` is anyone's to read).

The userspace backend runs here; the kernel backend's variant of each test is the lab VM's
(this machine's kernel has no MACsec: it skips here, with that reason).
"""

from __future__ import annotations

import os
import stat
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from testbed.core.runner import run_section
from testbed.host.naming import new_run_id, run_dir
from testbed.macsec.decrypt import keys_from
from testbed.macsec.kernel import kernel_macsec_available

from .test_backbone import QUICK_RETRANSMIT
from .test_macsec_experiment import SECTION

pytestmark = [pytest.mark.root, pytest.mark.shares_host]

BACKENDS = ["userspace", pytest.param("kernel", marks=pytest.mark.vm)]
MAX_FILE = 1 << 20  # a run folder's files are small (configs, pid files, logs)

#: the watch the audit hook reports to (an audit hook cannot be removed: it is added once
#: and reports only while a test watches)
_WATCHING: list[Watch] = []
_HOOKED = False


def _audit(event: str, args: tuple) -> None:
    if _WATCHING and event in ("subprocess.Popen", "os.posix_spawn", "os.exec"):
        argv = args[1]
        _WATCHING[-1].argvs.append(
            [os.fsdecode(a) for a in argv] if isinstance(argv, list | tuple) else [str(argv)])


class Watch:
    """While a run goes on: every argv this process starts (an audit hook, so not one is
    missed), every ``/proc/*/cmdline`` on the host and every file of the run folder (both
    read every 50 ms)."""

    def __init__(self, run_folder: Path) -> None:
        self.run_folder = run_folder
        self.argvs: list[list[str]] = []
        self.cmdlines: set[bytes] = set()
        self.files: dict[str, set[bytes]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> Watch:
        global _HOOKED
        if not _HOOKED:
            sys.addaudithook(_audit)
            _HOOKED = True
        _WATCHING.append(self)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)
        _WATCHING.remove(self)

    def _sample(self) -> None:
        while not self._stop.wait(0.05):
            for entry in os.scandir("/proc"):
                if entry.name.isdigit():
                    try:
                        self.cmdlines.add(Path(entry.path, "cmdline").read_bytes())
                    except OSError:
                        continue
            for path in _files(self.run_folder, MAX_FILE):
                versions = self.files.setdefault(str(path), set())
                if len(versions) < 50:
                    try:
                        versions.add(path.read_bytes())
                    except OSError:
                        continue


def _files(root: Path, max_size: int | None = None) -> Iterator[Path]:
    """Regular files under ``root`` (not through a symbolic link), of at most
    ``max_size`` bytes when given."""
    for folder, _, names in os.walk(root):
        for name in names:
            path = Path(folder, name)
            try:
                st = path.lstat()
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode) and (max_size is None or st.st_size <= max_size):
                yield path


def _key_files(summary: object) -> set[str]:
    """The key files ``summary.json`` names (relative to the results folder)."""
    found: set[str] = set()
    if isinstance(summary, dict):
        if isinstance(summary.get("file"), str) and isinstance(summary.get("links"), list):
            found.add(summary["file"])
        for key, value in summary.items():
            if key in ("keys_file", "wireshark_keys_file") and isinstance(value, str):
                found.add(value)
            else:
                found |= _key_files(value)
    elif isinstance(summary, list):
        for item in summary:
            found |= _key_files(item)
    return found


def _forms(saks: set[str]) -> list[bytes]:
    """Each SAK as it could appear: hex in either case, and its raw bytes."""
    return [form for k in saks for form in (k.lower().encode(), k.upper().encode(),
                                            bytes.fromhex(k))]


def check_no_leak(result: dict, out: Path, watch: Watch) -> set[str]:
    """Assert that the SAKs of ``result`` are only in its named 0600 key files; returns
    the SAKs."""
    named = _key_files(result)
    keys = keys_from(result, out)
    saks = {k for link in keys["links"] for side in link["sides"].values()
            for k in side["keys"].values()}
    assert saks and named, (saks, named)
    forms = _forms(saks)
    holders = set()
    for path in _files(out):
        data = path.read_bytes()
        if any(f in data for f in forms):
            holders.add(str(path.relative_to(out)))
            assert str(path.relative_to(out)) in named, f"SAK in {path} (not a key file)"
            assert path.stat().st_mode & 0o077 == 0, f"key file {path} readable by others"
    assert holders and holders <= named, (holders, named)  # the scan finds keys where they are
    seen_files = [p for p, versions in watch.files.items()
                  if any(f in v for v in versions for f in forms)]
    assert seen_files == [], f"SAK in the run folder while it ran: {seen_files}"
    assert watch.files, "the run folder was never seen"  # the watch saw the run
    argvs = [a for a in watch.argvs if any(f in "\0".join(a).encode() for f in forms)]
    assert argvs == [], f"SAK on a command line this process started: {argvs[:1]}"
    assert any(a and a[0] == "ip" for a in watch.argvs), "no ip command was seen"
    cmdlines = [c for c in watch.cmdlines if any(f in c for f in forms)]
    assert cmdlines == [], f"SAK in a /proc/PID/cmdline: {cmdlines[:1]}"
    return saks


def _backend(backend: str) -> None:
    if backend == "kernel" and not kernel_macsec_available():
        pytest.skip("this kernel has no MACsec (ip link add type macsec fails): the lab "
                    "VM runs the kernel backend's variant")


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_macsec_run_leaves_its_keys_in_its_key_files_alone(backend, tmp_path):
    """The smallest MACsec run of the integration tests (3 s, a key rotation, a short
    attack), watched: the SAKs of both ANs only in the key files."""
    _backend(backend)
    run_id = new_run_id()
    section = {**SECTION, "backend": backend, "bulk_seconds": 1.5,
               "attack": {"tampered": 2, "replayed": 2, "untagged": 2, "at_s": 2}}
    with Watch(run_dir(run_id)) as watch:
        result = run_section("macsec", section, tmp_path, duration_s=3, seed=1,
                             run_id=run_id, progress=lambda _line: None)
    assert result["macsec"]["backend"] == backend
    assert [r["an"] for r in result["macsec"]["rotations"]] == [1]
    saks = check_no_leak(result, tmp_path, watch)
    assert len(saks) == 4  # two sides, AN 0 and the rotated AN 1
    if backend == "userspace":  # the forwarders' config stays, without a key
        assert list(tmp_path.glob("variants/protected/link/link.json"))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.skipif(not Path("/usr/lib/frr/ospfd").exists(), reason="needs FRR "
                    "(apt-get install frr)")
def test_a_backbone_run_leaves_its_keys_in_its_key_files_alone(backend, tmp_path):
    """The small ring, every link encrypted, one variant of a few seconds, watched: the
    forwarders' configs in the run folder hold no key while they run."""
    _backend(backend)
    run_id = new_run_id()
    section = {"topology": "small", "timers": {"fast": QUICK_RETRANSMIT}, "settle_s": 1,
               "probe_rate_pps": 50, "macsec": {"enabled": True, "backend": backend}}
    with Watch(run_dir(run_id)) as watch:
        result = run_section("backbone", section, tmp_path, duration_s=4, seed=1,
                             run_id=run_id, progress=lambda _line: None)
    assert result["runs"][0]["macsec"]["backend"] == backend
    check_no_leak(result, tmp_path, watch)
    if backend == "userspace":
        assert [p for p in watch.files if p.endswith("/link.json")]
    assert not run_dir(run_id).exists()
