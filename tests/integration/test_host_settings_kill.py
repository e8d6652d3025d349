"""A run SIGKILLed while the host's socket-buffer defaults are raised: clean puts them back."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.root
REPO = Path(__file__).resolve().parents[2]
SYSCTLS = [Path("/proc/sys/net/core/rmem_default"), Path("/proc/sys/net/core/wmem_default")]
RAISE = ("import time\n"
         "from testbed.fabric.net import socket_buffer_defaults\n"
         "with socket_buffer_defaults(max(int(open('/proc/sys/net/core/rmem_default').read()),"
         " int(open('/proc/sys/net/core/wmem_default').read())) + 4096):\n"
         "    print('raised', flush=True)\n"
         "    time.sleep(60)\n")


def test_clean_restores_socket_buffers_after_a_killed_bring_up():
    before = [p.read_text() for p in SYSCTLS]
    proc = subprocess.Popen([sys.executable, "-c", RAISE], cwd=REPO, stdout=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout.readline().strip() == "raised"
        assert [p.read_text() for p in SYSCTLS] != before
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert [p.read_text() for p in SYSCTLS] != before  # a SIGKILL runs no finally
        done = subprocess.run([sys.executable, "-m", "testbed.core.cli", "clean"], cwd=REPO,
                              capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        assert "raised host setting net.core.rmem_default" in done.stdout
        assert [p.read_text() for p in SYSCTLS] == before
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
        for path, value in zip(SYSCTLS, before, strict=True):
            path.write_text(value)
