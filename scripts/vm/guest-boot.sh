#!/bin/bash
# The lab VM's boot, from the tree on the job disk (the image's init,
# scripts/vm/guest-init.sh, hands over to it): mounts what the testbed needs, runs
# scripts/setup.sh (starts Open vSwitch, which loads the kernel datapath), then runs the
# job, whose results folder goes back to the host, or gives a shell on the serial console.
# Powers off at the end, and qemu exits.
#
# Disks, in the order boot.sh attaches them: vda the root file system; vdb the job
# (unpacked in /tmp/job by the init); vdc the results: $VM_OUT is written onto it as a tar.
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/root LANG=C.UTF-8 TERM=vt100 VM_OUT=/tmp/out

uptime_s() { read -r up _ < /proc/uptime; echo "$up"; }
echo "testbed-vm: init after $(uptime_s) s"
mountpoint -q /sys || mount -t sysfs sysfs /sys
mkdir -p /dev/pts /dev/shm
mount -t devpts -o gid=5,mode=620,ptmxmode=666 devpts /dev/pts
mount -t tmpfs tmpfs /dev/shm
mount -t tmpfs -o mode=755 tmpfs /run
mount -t cgroup2 cgroup2 /sys/fs/cgroup
mkdir -p /run/lock "$VM_OUT"
# the device nodes that load a module on first open (/dev/net/tun for TAP devices),
# as systemd-tmpfiles-setup-dev makes them on a systemd boot
kmod static-nodes --format=tmpfiles | while read -r type path mode _ _ _ dev; do
    case $type in
        [cb]*) mkdir -p "${path%/*}"
               [ -e "$path" ] || mknod -m "$mode" "$path" "${type%!}" "${dev%:*}" "${dev#*:}" ;;
    esac
done
hostname fabric-lab
ip link set lo up

power_off() {
    sync
    echo o > /proc/sysrq-trigger
    sleep 30
}

cd /testbed
./scripts/setup.sh || echo "testbed-vm: scripts/setup.sh failed"
echo "testbed-vm: ready after $(uptime_s) s, kernel $(uname -r)"

if [ -x /tmp/job/job ]; then
    /tmp/job/job 2>&1 | tee "$VM_OUT/job.log"
    echo "${PIPESTATUS[0]}" > "$VM_OUT/exit-status"
    echo "testbed-vm: job exited with status $(cat "$VM_OUT/exit-status") after $(uptime_s) s"
    tar -C "$VM_OUT" -cf /dev/vdc . || echo "testbed-vm: writing the results disk failed"
else
    for word in $(cat /proc/cmdline); do
        case $word in
            testbed.tty=*) size=${word#testbed.tty=}
                           stty -F /dev/ttyS0 rows "${size%x*}" cols "${size#*x}" ;;
        esac
    done
    echo "testbed-vm: the lab, as root in /testbed (make run-scenario, testbed doctor);"
    echo "testbed-vm: 'exit' powers the VM off"
    setsid -c bash -l < /dev/ttyS0 > /dev/ttyS0 2>&1
fi
power_off
