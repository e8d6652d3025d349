#!/usr/bin/env bash
# mmdebstrap's customize hook (scripts/vm/build-image.sh): ROOT is the new root file
# system, with /proc, /sys and /dev mounted and services kept from starting.
# Puts the project at /testbed and runs its set-up script there, installs the VM's init.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
root=${1:?usage: customize.sh ROOT}

mkdir -p "$root/testbed" "$root/etc/testbed-vm"
project_tar | tar -C "$root/testbed" -x

# pip inside the chroot reaches the registry as the host does: with the host's CA bundle
# (kept outside the image's own, and removed after)
cp /etc/ssl/certs/ca-certificates.crt "$root/tmp/host-ca.crt"
chroot "$root" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
    DEBIAN_FRONTEND=noninteractive PIP_CERT=/tmp/host-ca.crt PIP_NO_CACHE_DIR=1 \
    /testbed/scripts/setup.sh --image
rm -f "$root/tmp/host-ca.crt"

install -m 755 "$REPO/scripts/vm/guest-init.sh" "$root/sbin/testbed-vm-init"
echo fabric-lab > "$root/etc/hostname"
printf '127.0.0.1 localhost\n127.0.1.1 fabric-lab\n' > "$root/etc/hosts"
chroot "$root" dpkg-query -W > "$root/etc/testbed-vm/packages.lock"
image_hash > "$root/etc/testbed-vm/image-hash"
