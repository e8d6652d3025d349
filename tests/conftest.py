"""Shared test set-up: root and Open vSwitch tests skip with a stated reason elsewhere.

Markers: ``root`` needs root (namespaces, veth); ``ovs`` needs root, a running
Open vSwitch and Mininet (real fabrics).
"""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest


def _ovs_missing() -> str | None:
    """Why a fabric cannot be built here, or None when it can."""
    if os.geteuid() != 0:
        return "needs root"
    if shutil.which("ovs-vsctl") is None:
        return "Open vSwitch is not installed (ovs-vsctl missing)"
    if subprocess.run(["ovs-vsctl", "-t", "2", "show"], capture_output=True).returncode:
        return "Open vSwitch is not running (ovs-vsctl show failed)"
    if shutil.which("mnexec") is None:
        return "Mininet is not installed (mnexec missing)"
    try:
        import mininet.net  # noqa: F401
    except ImportError:
        return "Mininet is not importable from this Python"
    return None


def pytest_collection_modifyitems(config, items):
    no_root = None if os.geteuid() == 0 else "needs root"
    no_ovs = _ovs_missing() if any("ovs" in i.keywords for i in items) else None
    for item in items:
        if "ovs" in item.keywords and no_ovs:
            item.add_marker(pytest.mark.skip(reason=no_ovs))
        elif "root" in item.keywords and no_root:
            item.add_marker(pytest.mark.skip(reason=no_root))
