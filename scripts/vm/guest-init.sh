#!/bin/bash
# PID 1 of the lab VM, baked into the image (scripts/vm/boot.sh boots it with
# init=/sbin/testbed-vm-init): puts the project that came on the job disk (vdb: a tar of
# project/ and, optionally, an executable `job`) at /testbed, then hands over to that
# tree's scripts/vm/guest-boot.sh. Kept this small so that changing what a boot does
# needs no new image.
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
mountpoint -q /proc || mount -t proc proc /proc
mountpoint -q /dev || mount -t devtmpfs devtmpfs /dev
mount -o remount,rw /
mountpoint -q /tmp || mount -t tmpfs tmpfs /tmp
mkdir -p /tmp/job
if tar -C /tmp/job -xf /dev/vdb 2>/dev/null && [ -d /tmp/job/project ]; then
    # the host's tree replaces the image's copy (files deleted there go here too); the
    # venv built with the image stays: its editable install points at /testbed
    find /testbed -mindepth 1 -maxdepth 1 ! -name .venv ! -name '*.egg-info' \
        -exec rm -rf {} +
    cp -a /tmp/job/project/. /testbed/
fi
exec /testbed/scripts/vm/guest-boot.sh
