#!/usr/bin/env bash
# Inside the lab VM, the job of scripts/vm/test.sh: pytest over the tests that need the
# full kernel, where every skip is an error (TESTBED_REQUIRE_FULL_KERNEL=1, see
# tests/conftest.py). Into $VM_OUT: doctor.txt, junit.xml, pytest.log, summary.txt
# (pytest's closing line) and, when a test failed, artifacts/: the tests' tmp folders
# (files over 20 MB left out), the Open vSwitch logs, dmesg. Exits with pytest's status.
set -uo pipefail
cd /testbed
out=${VM_OUT:?run inside the lab VM}

# a kernel that locks up fails the run at once instead of hanging until the job's
# time-out: the panic replays the kernel's whole log, every CPU's stack included, onto
# the console (console.log; the boot's "quiet" shows errors only until then)
sysctl -qw kernel.softlockup_panic=1 kernel.softlockup_all_cpu_backtrace=1 \
    kernel.panic_print=32

.venv/bin/testbed doctor 2>&1 | tee "$out/doctor.txt"
TESTBED_REQUIRE_FULL_KERNEL=1 .venv/bin/python -m pytest -p no:cacheprovider \
    --basetemp=/tmp/pytest --junitxml="$out/junit.xml" "$@" 2>&1 | tee "$out/pytest.log"
status=${PIPESTATUS[0]}
grep -E '^=+ .* in [0-9.]+s' "$out/pytest.log" | tail -1 | tr -d '=' | xargs > "$out/summary.txt"

if [ "$status" -ne 0 ]; then
    mkdir -p "$out/artifacts"
    [ -d /tmp/pytest ] && cp -a /tmp/pytest "$out/artifacts/pytest-tmp"
    find "$out/artifacts" -type f -size +20M -print -delete > "$out/artifacts/left-out.txt"
    cp -a /var/log/openvswitch "$out/artifacts/" 2>/dev/null
    dmesg > "$out/artifacts/dmesg.txt"
    ovs-vsctl show > "$out/artifacts/ovs-vsctl-show.txt" 2>&1
fi
exit "$status"
