#!/usr/bin/env bash
# Build the lab's Vagrant box for libvirt from Debian 12's packages, unless the cache
# already holds the box for these inputs. Prints the box file's path.
#
# The box is the lab VM image (scripts/vm/build-image.sh) made bootable: the same
# mmdebstrap of Debian 12 with the stock kernel, the packages of scripts/packages.txt and
# scripts/vm/packages.txt and the project's venv (scripts/vm/customize.sh runs
# scripts/setup.sh --image), plus what a Vagrant base box needs (packages.txt beside
# this script; scripts/vagrant/customize-box.sh). The disk is made without loop devices:
# a partition table written into a plain file, the ext4 file system made from the tree
# (mkfs.ext4 -d) and copied in at 1 MiB, GRUB's boot image and core image written into
# the first sectors. Then qcow2, with metadata.json and the box's own Vagrantfile, in one
# tar: a box `vagrant box add` takes for the libvirt provider.
set -euo pipefail
source "$(dirname "$0")/../vm/lib.sh"

[ "$(id -u)" -eq 0 ] || vm_die "run as root (mmdebstrap, chroot)"
for tool in mmdebstrap sfdisk mkfs.ext4 qemu-img; do
    command -v "$tool" >/dev/null || vm_die "needs $tool (scripts/vagrant/test.sh installs it)"
done

BOX_INPUTS=(scripts/vagrant/build-box.sh scripts/vagrant/customize-box.sh
            scripts/vagrant/packages.txt vagrant/box/Vagrantfile)
box_hash() {
    (cd "$REPO" && { image_hash; sha256sum "${BOX_INPUTS[@]}"; } | sha256sum | cut -c1-16)
}
box_packages() {
    { image_packages; grep -h -v -e '^#' -e '^$' "$REPO/scripts/vagrant/packages.txt"; }
}

mkdir -p "$VM_CACHE"
exec 9> "$VM_CACHE/.box.lock"
flock 9
dir="$VM_CACHE/box-$(box_hash)"
box="$dir/testbed-bookworm64.box"
if [ -f "$box" ]; then
    vm_say "box cached: $box"
    echo "$box"
    exit 0
fi

vm_workdir box

mkdir "$work/root" "$work/boot"
uuid=$(cat /proc/sys/kernel/random/uuid)
start=$(date +%s)
vm_say "building the Vagrant box for inputs $(box_hash) (about 3-5 minutes)"
nice -n 10 mmdebstrap --variant=important --include="$(box_packages | paste -sd, -)" \
    --dpkgopt=force-unsafe-io --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/info/*' \
    --customize-hook="'$REPO/scripts/vm/customize.sh' \"\$1\"" \
    --customize-hook="'$REPO/scripts/vagrant/customize-box.sh' \"\$1\" $uuid '$work/boot'" \
    "$SUITE" "$work/root/" >&2

# the disk: a DOS partition table, one bootable partition from 1 MiB, GRUB before it
used_mb=$(du -sm "$work/root" | cut -f1)
size_mb=$((used_mb + 4096))  # room for results, logs and a second venv
truncate -s "$((size_mb + 1))M" "$work/disk.raw"
printf 'label: dos\nstart=2048, type=83, bootable\n' \
    | sfdisk -q --no-reread --no-tell-kernel "$work/disk.raw"
truncate -s "${size_mb}M" "$work/part.img"
# features GRUB 2.06 reads (e2fsprogs 1.47 turns on two it does not)
mkfs.ext4 -q -F -L testbed-box -U "$uuid" -O ^metadata_csum_seed,^orphan_file \
    -d "$work/root" "$work/part.img"
rm -rf --one-file-system "$work/root"
dd if="$work/part.img" of="$work/disk.raw" bs=1M seek=1 conv=notrunc,sparse status=none
rm "$work/part.img"
core_bytes=$(stat -c %s "$work/boot/core.img")
[ "$core_bytes" -lt $((2047 * 512)) ] || vm_die "GRUB's core image ($core_bytes bytes) does not fit before the partition"
# boot.img's code (not the partition table after byte 440), then the core image at
# sector 1, where boot.img looks for it
dd if="$work/boot/boot.img" of="$work/disk.raw" bs=440 count=1 conv=notrunc status=none
dd if="$work/boot/core.img" of="$work/disk.raw" bs=512 seek=1 conv=notrunc status=none

qemu-img convert -f raw -O qcow2 "$work/disk.raw" "$work/box.img"
rm "$work/disk.raw"
printf '{"provider": "libvirt", "format": "qcow2", "virtual_size": %d}\n' \
    "$(( (size_mb + 1 + 1023) / 1024 ))" > "$work/metadata.json"
cp "$REPO/vagrant/box/Vagrantfile" "$work/Vagrantfile"
mkdir -p "$dir"
tar -C "$work" -cSf "$box.tmp" metadata.json Vagrantfile box.img
mv "$box.tmp" "$box"
echo "built $(date -u +%FT%TZ) in $(($(date +%s) - start)) s from $(box_hash)" > "$dir/built"
vm_say "box built in $(($(date +%s) - start)) s: $box ($(du -sh "$box" | cut -f1))"

# keep the newest two boxes
ls -1dt "$VM_CACHE"/box-*/ 2>/dev/null | tail -n +3 | xargs -r rm -rf --one-file-system
echo "$box"
