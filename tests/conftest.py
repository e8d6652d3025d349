"""Shared test set-up: root and Open vSwitch tests skip with a stated reason elsewhere.

Markers: ``root`` needs root (namespaces, veth); ``ovs`` needs root, a running
Open vSwitch and Mininet (real fabrics); ``vm`` runs inside the lab VM (``make vm-test``);
``userspace_datapath`` applies only where switches use the OVS userspace datapath.

Inside the lab VM (``TESTBED_REQUIRE_FULL_KERNEL=1``, set by scripts/vm/guest-test.sh)
the stock kernel has every feature, so a skip there is a failure: a full-kernel path that
did not run. Only a test that does not apply to that kernel (``userspace_datapath``) may
skip.
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


REQUIRE_FULL_KERNEL = os.environ.get("TESTBED_REQUIRE_FULL_KERNEL") == "1"


def _kernel_datapath() -> bool:
    """Whether fabrics here use the OVS kernel datapath (the probe the bring-up uses)."""
    from testbed.host.capabilities import probe

    return probe().ovs_datapath == "kernel"


def pytest_collection_modifyitems(config, items):
    no_root = None if os.geteuid() == 0 else "needs root"
    no_ovs = _ovs_missing() if any("ovs" in i.keywords for i in items) else None
    kernel_dp = (not no_ovs and any("userspace_datapath" in i.keywords for i in items)
                 and _kernel_datapath())
    for item in items:
        if "ovs" in item.keywords and no_ovs:
            item.add_marker(pytest.mark.skip(reason=no_ovs))
        elif "root" in item.keywords and no_root:
            item.add_marker(pytest.mark.skip(reason=no_root))
        elif "userspace_datapath" in item.keywords and kernel_dp:
            item.add_marker(pytest.mark.skip(
                reason="applies to the OVS userspace datapath; this host has the kernel one"))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """With TESTBED_REQUIRE_FULL_KERNEL=1 a skip is a failure, naming the skip's reason."""
    report = (yield).get_result()
    if (REQUIRE_FULL_KERNEL and report.skipped and not hasattr(report, "wasxfail")
            and "userspace_datapath" not in item.keywords):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        report.outcome = "failed"
        report.longrepr = (f"skipped where the full kernel is required "
                           f"(TESTBED_REQUIRE_FULL_KERNEL=1): {reason}")


@pytest.fixture
def plugins_load():
    """Plug-ins named by a scenario may be imported in the test, as in ``testbed run``
    (a validation refuses to: :mod:`topologies.plugins`)."""
    from topologies import plugins

    with plugins.allowed():
        yield


@pytest.fixture(autouse=True)
def _plugins_refused_again():
    """A test that ran ``testbed run`` or ``up`` in this process (which allow plug-ins for
    the rest of the process) leaves the next test refusing them again."""
    yield
    from topologies import plugins

    plugins._allowed = False  # noqa: SLF001
