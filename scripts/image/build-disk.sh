#!/usr/bin/env bash
# The bootable lab disk for an architecture, from Debian 12's packages, written to FILE
# (raw, sparse). Its root file system is built once and cached for these inputs; each call
# puts the current working tree at /testbed in it (uncommitted edits included; the venv
# built with the image stays) and assembles the disk around it:
#   $VM_CACHE/disk-ARCH-FLAVOR-HASH/root/          the root file system, as a folder
#   $VM_CACHE/disk-ARCH-FLAVOR-HASH/boot/          GRUB's files for the disk's first sectors
#                                                  or its EFI system partition
#   $VM_CACHE/disk-ARCH-FLAVOR-HASH/packages.lock  every package in it and its version
#
#   scripts/image/build-disk.sh amd64|arm64 [lab|plain] FILE
#
# The root file system holds what the lab VM image (scripts/vm/build-image.sh) holds:
# Debian 12 by mmdebstrap with the stock kernel, the packages of scripts/packages.txt and
# scripts/vm/packages.txt, the project at /testbed and its venv (scripts/vm/customize.sh
# runs scripts/setup.sh --image inside it); and what a machine booted by its own firmware
# needs (scripts/image/packages.txt, scripts/image/customize-disk.sh: the `lab` user,
# sshd, DHCP, the console's greeting, GRUB). For arm64 on an amd64 machine, every program
# of the new system runs under qemu-user-static through binfmt_misc (scripts/image/
# binfmt.sh), which is put back as it was found.
#
# `plain` makes what a public Vagrant base box is (debian/bookworm64, bento/debian-12):
# Debian 12 with the kernel, sshd, sudo and the `vagrant` user with Vagrant's well-known
# key, nothing of the lab: make vagrant-test provisions it as a student's `vagrant up`
# provisions a public box, from the registries.
#
# The disk is made without loop devices: a partition table written into a plain file, the
# file systems made from folders (mkfs.ext4 -d; mkfs.vfat and mtools for the EFI system
# partition) and copied in place.
#   amd64: DOS partition table, one bootable ext4 partition from 1 MiB; GRUB for a BIOS
#          boot (boot.img in the first sector, its core image in the gap before 1 MiB).
#   arm64: GPT, an EFI system partition (64 MiB, FAT) with GRUB as EFI/BOOT/BOOTAA64.EFI,
#          then the ext4 root: UEFI firmware boots it with no entry of its own.
set -euo pipefail
# the whole script is read before it runs: an edit of this file while a build runs (they
# take long) cannot change what the running build does
{
source "$(dirname "$0")/../vm/lib.sh"
source "$REPO/scripts/image/binfmt.sh"

arch=${1:?usage: build-disk.sh amd64|arm64 [lab|plain] FILE}
if [ $# -ge 3 ]; then flavor=$2; disk=$3; else flavor=lab; disk=${2:?the disk file to write}; fi
case $flavor in lab|plain) ;; *) vm_die "the flavor is lab or plain, not '$flavor'" ;; esac
case $arch in
    amd64) grub_package=grub-pc-bin ;;
    arm64) grub_package=grub-efi-arm64-bin ;;
    *) vm_die "ARCH must be amd64 or arm64, not '$arch'" ;;
esac
[ "$(id -u)" -eq 0 ] || vm_die "run as root (mmdebstrap, chroot)"

host_arch=$(dpkg --print-architecture)
tools=(mmdebstrap sfdisk mkfs.ext4 qemu-img)
[ "$arch" = arm64 ] && tools+=(mkfs.vfat mcopy)
[ "$arch" != "$host_arch" ] && tools+=(qemu-aarch64-static arch-test)
missing=()
for tool in "${tools[@]}"; do command -v "$tool" >/dev/null || missing+=("$tool"); done
if [ ${#missing[@]} -gt 0 ]; then
    vm_say "installing the tools that build the disk (missing: ${missing[*]})"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends mmdebstrap fdisk e2fsprogs qemu-utils \
        dosfstools mtools qemu-user-static arch-test >/dev/null
fi

DISK_INPUTS=(scripts/image/build-disk.sh scripts/image/customize-disk.sh
             scripts/image/packages.txt)
disk_hash() {
    (cd "$REPO" && { echo "$arch $flavor"; image_hash; sha256sum "${DISK_INPUTS[@]}"; } \
        | sha256sum | cut -c1-16)
}
disk_packages() {
    if [ "$flavor" = lab ]; then
        image_packages "$arch"
    else
        grep -h -v -e '^#' -e '^$' "$REPO/scripts/vm/packages.txt"
        echo "linux-image-$arch"
    fi
    grep -h -v -e '^#' -e '^$' "$REPO/scripts/image/packages.txt"
    echo "$grub_package"
}

mkdir -p "$VM_CACHE"
exec 9> "$VM_CACHE/.disk-$arch.lock"
flock 9
dir="$VM_CACHE/disk-$arch-$flavor-$(disk_hash)"
if [ -d "$dir/root" ]; then
    vm_say "root file system cached: $dir"
else
vm_workdir "disk-$arch-$flavor"
trap 'binfmt_restore; vm_workdir_remove' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
[ "$arch" = "$host_arch" ] || binfmt_enable "$arch"

mkdir "$work/root" "$work/boot"
uuid=$(cat /proc/sys/kernel/random/uuid)
start=$(date +%s)
if [ "$arch" = "$host_arch" ]; then
    vm_say "building the $arch $flavor disk for inputs $(disk_hash) (about 3-5 minutes)"
else
    vm_say "building the $arch $flavor disk for inputs $(disk_hash) under qemu-user emulation" \
        "(about 30-60 minutes)"
fi
hooks=()
[ "$flavor" = lab ] && hooks+=(--customize-hook="'$REPO/scripts/vm/customize.sh' \"\$1\"")
hooks+=(--customize-hook="'$REPO/scripts/image/customize-disk.sh' \"\$1\" $arch $uuid '$work/boot' $flavor")
nice -n 10 mmdebstrap --variant=important --architectures="$arch" \
    --include="$(disk_packages | paste -sd, -)" \
    --dpkgopt=force-unsafe-io --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/info/*' \
    "${hooks[@]}" "$SUITE" "$work/root/" >&2
cp "$work/root/etc/testbed-vm/packages.lock" "$work/packages.lock"
echo "$uuid" > "$work/uuid"
echo "built $(date -u +%FT%TZ) in $(($(date +%s) - start)) s from $(disk_hash) for $arch ($flavor)" \
    > "$work/built"
mv "$work" "$dir"
trap - EXIT INT TERM
binfmt_restore
vm_say "$arch $flavor root file system built in $(($(date +%s) - start)) s: $dir"
# keep the newest two of each architecture and flavor
ls -1dt "$VM_CACHE"/disk-"$arch-$flavor"-*/ 2>/dev/null | tail -n +3 \
    | xargs -r rm -rf --one-file-system
fi

# -- the disk, around the cached root file system ------------------------------------------------
uuid=$(cat "$dir/uuid")
if [ "$flavor" = lab ]; then
    # the working tree as it is now at /testbed (files deleted here go there too); the
    # venv built with the image and its editable install stay
    find "$dir/root/testbed" -mindepth 1 -maxdepth 1 ! -name .venv ! -name '*.egg-info' \
        -exec rm -rf {} +
    project_tar | tar -C "$dir/root/testbed" -x
    git -C "$REPO" describe --always --dirty 2>/dev/null > "$dir/root/etc/testbed-vm/commit" || true
fi
part=$(mktemp "$(dirname "$disk")/.part-XXXXXX")
trap 'rm -f "$part" "$disk.tmp" "$part.esp"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
used_mb=$(du -sm "$dir/root" | cut -f1)
root_mb=$((used_mb + 4096))  # room for results, logs and a second venv
# features GRUB 2.06 reads (e2fsprogs 1.47 turns on two it does not)
rm -f "$part"
truncate -s "${root_mb}M" "$part"
mkfs.ext4 -q -F -L testbed-lab -U "$uuid" -O ^metadata_csum_seed,^orphan_file \
    -d "$dir/root" "$part"
case $arch in
    amd64)
        truncate -s "$((root_mb + 1))M" "$disk.tmp"
        printf 'label: dos\nstart=2048, type=83, bootable\n' \
            | sfdisk -q --no-reread --no-tell-kernel "$disk.tmp"
        dd if="$part" of="$disk.tmp" bs=1M seek=1 conv=notrunc,sparse status=none
        core_bytes=$(stat -c %s "$dir/boot/core.img")
        [ "$core_bytes" -lt $((2047 * 512)) ] \
            || vm_die "GRUB's core image ($core_bytes bytes) does not fit before the partition"
        # boot.img's code (not the partition table after byte 440), then the core image at
        # sector 1, where boot.img looks for it
        dd if="$dir/boot/boot.img" of="$disk.tmp" bs=440 count=1 conv=notrunc status=none
        dd if="$dir/boot/core.img" of="$disk.tmp" bs=512 seek=1 conv=notrunc status=none
        ;;
    arm64)
        esp_mb=64
        mkfs.vfat -n TESTBED-EFI -C "$part.esp" $((esp_mb * 1024)) >/dev/null
        mmd -i "$part.esp" ::/EFI ::/EFI/BOOT
        mcopy -i "$part.esp" "$dir/boot/BOOTAA64.EFI" ::/EFI/BOOT/BOOTAA64.EFI
        # 1 MiB before the partitions and 1 MiB after them for GPT's backup copy
        truncate -s "$((1 + esp_mb + root_mb + 1))M" "$disk.tmp"
        printf 'label: gpt\nstart=1MiB, size=%dMiB, type=C12A7328-F81F-11D2-BA4B-00A0C93EC93B, name="EFI system"\nstart=%dMiB, size=%dMiB, type=0FC63DAF-8483-4772-8E79-3D69D8477DE4, name="testbed root"\n' \
            "$esp_mb" "$((1 + esp_mb))" "$root_mb" \
            | sfdisk -q --no-reread --no-tell-kernel "$disk.tmp"
        dd if="$part.esp" of="$disk.tmp" bs=1M seek=1 conv=notrunc status=none
        dd if="$part" of="$disk.tmp" bs=1M seek=$((1 + esp_mb)) conv=notrunc,sparse status=none
        ;;
esac
mv "$disk.tmp" "$disk"
vm_say "$arch $flavor disk: $disk ($(du -h "$disk" | cut -f1) on disk, $((root_mb + 1)) MB)"
exit
}
