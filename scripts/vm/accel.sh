#!/usr/bin/env bash
# Which qemu accelerator boots the lab VM on this host: kvm where a bounded probe boot
# works, tcg (software emulation) otherwise. On the development machines /dev/kvm exists
# but a KVM boot hangs, so only a real boot tells. The answer is cached per host kernel
# and qemu version; VM_ACCEL=kvm|tcg skips the probe.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

if [ -n "${VM_ACCEL:-}" ]; then
    echo "$VM_ACCEL"
    exit 0
fi
if [ ! -w /dev/kvm ]; then
    echo tcg
    exit 0
fi
# KVM runs a guest only on a CPU with virtualization extensions (Intel VT-x: vmx, AMD-V:
# svm); where /dev/kvm exists without them (a nested guest whose hypervisor hides them)
# a KVM boot hangs, so no probe is needed to know
if ! grep -q -w -E 'vmx|svm' /proc/cpuinfo; then
    vm_say "the CPU has no vmx or svm flag: software emulation (TCG)"
    echo tcg
    exit 0
fi
qemu_version=$(qemu-system-x86_64 --version | head -1 | tr -cd '0-9.')
known="$VM_CACHE/accel-$(uname -r)-qemu$qemu_version"
if [ -f "$known" ]; then
    cat "$known"
    exit 0
fi

probe=$(mktemp -d "${TMPDIR:-/tmp}/testbed-vm-kvm.XXXXXX")
trap 'rm -rf "$probe"' EXIT
printf '#!/bin/sh\necho kvm-probe: up\n' > "$probe/job"
# software emulation has the VM ready in about 25 s on a 2-core Xeon; a KVM boot that
# takes longer than 40 s is of no use even if it would finish
vm_say "probing KVM with a boot bounded to 40 s"
if "$REPO/scripts/vm/boot.sh" --accel kvm --timeout 40 --job "$probe/job" \
        --out "$probe/out" > "$probe/log" 2>&1; then
    answer=kvm
else
    answer=tcg
    vm_say "a KVM boot did not finish here: software emulation (TCG) from now on"
fi
mkdir -p "$VM_CACHE"
echo "$answer" > "$known"
echo "$answer"
