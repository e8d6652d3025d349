#!/bin/bash
# PID 1 of the lab VM: scripts/vm/boot.sh boots the image with init=/sbin/testbed-vm-init.
# Mounts what the testbed needs, puts the project that came on the job disk at /testbed,
# runs scripts/setup.sh (starts Open vSwitch, which loads the kernel datapath), then runs
# the job, whose results folder goes back to the host, or gives a shell on the serial
# console. Powers off at the end, and qemu exits.
#
# Disks, in the order boot.sh attaches them: vda the root file system; vdb the job, a
# tar of project/ (the host's working tree) and, optionally, an executable `job`; vdc
# the results: the job's $VM_OUT is written onto it as a tar.
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/root LANG=C.UTF-8 TERM=vt100 VM_OUT=/tmp/out

mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mkdir -p /dev/pts /dev/shm
mount -t devpts -o gid=5,mode=620,ptmxmode=666 devpts /dev/pts
mount -t tmpfs tmpfs /dev/shm
mount -t tmpfs -o mode=755 tmpfs /run
mount -t tmpfs tmpfs /tmp
mount -t cgroup2 cgroup2 /sys/fs/cgroup
mount -o remount,rw /
# the device nodes that open a module on first use (/dev/net/tun for TAP devices, ...),
# as systemd-tmpfiles-setup-dev makes them on a systemd boot
kmod static-nodes --format=tmpfiles | while read -r type path mode _ _ _ dev; do
    mkdir -p "${path%/*}"
    [ -e "$path" ] || mknod -m "$mode" "$path" "${type%!}" "${dev%:*}" "${dev#*:}"
done
mkdir -p /run/lock "$VM_OUT" /tmp/job
hostname fabric-lab
ip link set lo up

power_off() {
    sync
    echo o > /proc/sysrq-trigger
    sleep 30
}

for word in $(cat /proc/cmdline); do
    case $word in testbed.tty=*) tty_size=${word#testbed.tty=} ;; esac
done

if [ -b /dev/vdb ] && tar -C /tmp/job -xf /dev/vdb 2>/dev/null && [ -d /tmp/job/project ]; then
    # the host's tree replaces the image's copy (files deleted there go here too);
    # the venv built with the image stays, its editable install points at /testbed
    find /testbed -mindepth 1 -maxdepth 1 ! -name .venv ! -name '*.egg-info' \
        -exec rm -rf {} +
    cp -a /tmp/job/project/. /testbed/
fi
cd /testbed
./scripts/setup.sh || echo "testbed-vm: scripts/setup.sh failed"
read -r up _ < /proc/uptime
echo "testbed-vm: ready after ${up} s, kernel $(uname -r)"

if [ -x /tmp/job/job ]; then
    /tmp/job/job 2>&1 | tee "$VM_OUT/job.log"
    echo "${PIPESTATUS[0]}" > "$VM_OUT/exit-status"
    echo "testbed-vm: job exited with status $(cat "$VM_OUT/exit-status")"
    if [ -b /dev/vdc ]; then
        tar -C "$VM_OUT" -cf /dev/vdc . || echo "testbed-vm: writing the results disk failed"
    fi
else
    [ -n "${tty_size:-}" ] && stty -F /dev/ttyS0 rows "${tty_size%x*}" cols "${tty_size#*x}"
    echo "testbed-vm: the lab, as root in /testbed (make run-scenario, testbed doctor);"
    echo "testbed-vm: 'exit' powers the VM off"
    setsid -c bash -l < /dev/ttyS0 > /dev/ttyS0 2>&1
fi
power_off
