#!/usr/bin/env bash
# make vm-test: boot the lab VM and run inside it the tests that need the full kernel
# (OVS kernel datapath, kernel MACsec, RED, netem), no skip allowed there. Results come
# back into results/vm-test/TIMESTAMP/ (results/vm-test/latest points there):
# summary.txt, junit.xml, pytest.log, doctor.txt, console.log, artifacts/ on failure.
# Exits non-zero when a test failed or the VM did not finish.
#
#   scripts/vm/test.sh [PYTEST ARGS...]     # default: tests/integration -m vm
set -euo pipefail
source "$(dirname "$0")/lib.sh"

args=("$@")
[ ${#args[@]} -gt 0 ] || args=(tests/integration -m vm)
out="$REPO/results/vm-test/$(date +%Y%m%d-%H%M%S)"
mkdir -p "$out"
job=$(mktemp)
trap 'rm -f "$job"' EXIT
printf '#!/bin/bash\nexec /testbed/scripts/vm/guest-test.sh %s\n' "${args[*]@Q}" > "$job"

status=0
"$REPO/scripts/vm/boot.sh" --job "$job" --out "$out" --timeout "${VM_TIMEOUT:-3600}" || status=$?
ln -sfn "$(basename "$out")" "$REPO/results/vm-test/latest"
echo "lab VM: $(cat "$out/summary.txt" 2>/dev/null || echo "no pytest summary (status $status)")"
echo "lab VM results: $out"
exit "$status"
