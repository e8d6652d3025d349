#!/usr/bin/env bash
# Boot the lab VM under qemu, serial console, with the current working tree as /testbed.
#
#   scripts/vm/boot.sh                        # a root shell on the serial console; 'exit'
#                                             # powers off (Ctrl-A x quits qemu at once)
#   scripts/vm/boot.sh --job FILE --out DIR   # runs FILE inside (root, in /testbed), brings
#                                             # its results folder ($VM_OUT) back into DIR
#                                             # and exits with FILE's status
# Options: --accel kvm|tcg (default: scripts/vm/accel.sh decides), --timeout SECONDS for a
# job (default 3600), --net LOCAL:REMOTE:MAC a NIC (eth0) whose frames go in UDP datagrams
# from 127.0.0.1:LOCAL to 127.0.0.1:REMOTE, where a second VM's NIC is (qemu's socket
# network: a wire between two VMs with nothing on the host but the two qemu processes;
# default: no NIC). VM_MEM (MB, default 6144) and VM_CPUS (default 2, at most 2 here).
#
# Nothing outlives it: the image boots as a snapshot (writes go to a temporary overlay),
# the job and results disks live in a temporary folder, and qemu is stopped on exit,
# Ctrl-C or SIGTERM.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

accel="" job="" out="" timeout=3600 net=""
while [ $# -gt 0 ]; do
    case $1 in
        --accel) accel=$2; shift 2 ;;
        --job) job=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        --timeout) timeout=$2; shift 2 ;;
        --net) net=$2; shift 2 ;;
        *) vm_die "unknown argument $1 (see the head of $0)" ;;
    esac
done
[ -z "$job" ] || [ -n "$out" ] || vm_die "--job needs --out DIR"
cpus=${VM_CPUS:-2}
[ "$cpus" -le 2 ] || vm_die "VM_CPUS=$cpus: at most 2 on these machines"

image=$("$REPO/scripts/vm/build-image.sh")
[ -n "$accel" ] || accel=$("$REPO/scripts/vm/accel.sh")

run=$(mktemp -d "${TMPDIR:-/tmp}/testbed-vm.XXXXXX")
qemu_pid=""
cleanup() {
    if [ -n "$qemu_pid" ] && kill -0 "$qemu_pid" 2>/dev/null; then
        kill "$qemu_pid" 2>/dev/null || true
        wait "$qemu_pid" 2>/dev/null || true
    fi
    rm -rf "$run"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# the job disk: the working tree (uncommitted edits included) and the job
mkdir -p "$run/job/project"
project_tar | tar -C "$run/job/project" -x
[ -z "$job" ] || install -m 755 "$job" "$run/job/job"
tar -C "$run/job" -cf "$run/job.img" .
truncate -s %1M "$run/job.img"
truncate -s 2G "$run/results.img"

case $accel in
    kvm) cpu=host ;;
    tcg) cpu=max ;;
    *) vm_die "--accel kvm or tcg, not $accel" ;;
esac
nic=(-nic none)
if [ -n "$net" ]; then
    IFS=: read -r local_port remote_port mac <<< "$net"
    nic=(-netdev "socket,id=wire,udp=127.0.0.1:$remote_port,localaddr=127.0.0.1:$local_port"
         -device "virtio-net-pci,netdev=wire,mac=$mac")
fi
tty_size=$(stty size 2>/dev/null | tr ' ' x || true)
qemu=(qemu-system-x86_64 -name testbed-vm -accel "$accel" -cpu "$cpu" -smp "$cpus"
      -m "${VM_MEM:-6144}" -nodefaults -no-reboot -display none "${nic[@]}"
      -device virtio-rng-pci
      -kernel "$image/vmlinuz" -initrd "$image/initrd.img"
      -append "root=/dev/vda rw console=ttyS0 init=/sbin/testbed-vm-init panic=-1 quiet ${tty_size:+testbed.tty=$tty_size}"
      -drive "file=$image/disk.img,format=raw,if=virtio,snapshot=on"
      -drive "file=$run/job.img,format=raw,if=virtio,readonly=on"
      -drive "file=$run/results.img,format=raw,if=virtio")
export TMPDIR=$run  # the snapshot overlay of the root disk goes there

if [ -z "$job" ]; then
    vm_say "booting ($accel); Ctrl-A x quits qemu"
    "${qemu[@]}" -serial mon:stdio
    exit 0
fi

mkdir -p "$out"
vm_say "booting ($accel) to run $job; console in $out/console.log"
start=$(date +%s)
# the job's time is bounded; timeout passes a SIGTERM from cleanup on to qemu
timeout -k 10 "$timeout" "${qemu[@]}" \
    -chardev "stdio,id=console,signal=off,logfile=$out/console.log" \
    -serial chardev:console < /dev/null &
qemu_pid=$!
wait "$qemu_pid" || vm_say "qemu ended with status $? (124: the $timeout s timeout)"
qemu_pid=""

tar -C "$out" -xf "$run/results.img" 2>/dev/null || true
if [ ! -f "$out/exit-status" ]; then
    vm_say "the VM ended without finishing its job after $(($(date +%s) - start)) s (see $out/console.log)"
    exit 3
fi
status=$(cat "$out/exit-status")
vm_say "VM done in $(($(date +%s) - start)) s, job status $status"
exit "$status"
