#!/usr/bin/env bash
# make vm-bench: boot the lab VM and run inside it the benches that need the full kernel
# (python -m bench NAME...: by default datapath, the OVS kernel against the userspace
# datapath, and dctcp, Mininet-HiFi's DCTCP reproduction). Results come back into
# results/vm-bench/TIMESTAMP/ (results/vm-bench/latest points there): bench.log (what the
# benches printed), doctor.txt, console.log and each bench's own folder (dctcp/).
# Exits with the benches' status (1: a target missed).
#
#   scripts/vm/bench.sh [NAME...]
set -euo pipefail
source "$(dirname "$0")/lib.sh"

[ $# -gt 0 ] || set -- datapath dctcp
out="$REPO/results/vm-bench/$(date +%Y%m%d-%H%M%S)"
mkdir -p "$out"
job=$(mktemp)
trap 'rm -f "$job"' EXIT
cat > "$job" <<JOB
#!/bin/bash
cd /testbed
.venv/bin/testbed doctor > "\$VM_OUT/doctor.txt" 2>&1
.venv/bin/python -m bench ${*@Q} 2>&1 | tee "\$VM_OUT/bench.log"
status=\${PIPESTATUS[0]}
[ ! -d results/dctcp ] || cp -a results/dctcp "\$VM_OUT/"
exit \$status
JOB

status=0
"$REPO/scripts/vm/boot.sh" --job "$job" --out "$out" --timeout "${VM_TIMEOUT:-1800}" || status=$?
ln -sfn "$(basename "$out")" "$REPO/results/vm-bench/latest"
grep -E 'PASS|MISS|not measured' "$out/bench.log" 2>/dev/null || true
echo "lab VM bench results: $out"
exit "$status"
