"""Shared fixtures: root tests skip with a reason where the host cannot run them."""

import os
import shutil
import subprocess

import pytest


def _ovs_ready() -> str | None:
    """Return why Open vSwitch cannot be used here, or None when it can."""
    if shutil.which("ovs-vsctl") is None:
        return "Open vSwitch is not installed (ovs-vsctl missing)"
    probe = subprocess.run(["ovs-vsctl", "-t", "2", "show"], capture_output=True, text=True)
    if probe.returncode != 0:
        return "ovsdb-server is not running (ovs-vsctl show failed)"
    return None


def pytest_collection_modifyitems(config, items):
    reason = None
    if os.geteuid() != 0:
        reason = "needs root"
    else:
        reason = _ovs_ready()
    if reason is None:
        return
    skip = pytest.mark.skip(reason=reason)
    for item in items:
        if "root" in item.keywords:
            item.add_marker(skip)
