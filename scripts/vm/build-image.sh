#!/usr/bin/env bash
# Build the lab VM image from Debian's packages, unless the cache already holds the image
# for these inputs (scripts/vm/lib.sh says which). Prints the image's folder.
#
# mmdebstrap makes a Debian 12 root file system with the stock kernel and the packages
# of scripts/packages.txt + scripts/vm/packages.txt; scripts/vm/customize.sh then runs
# scripts/setup.sh --image inside it (the same script that provisions the Vagrant VM and
# every other machine), which builds the venv with the project's pinned dependencies.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

[ "$(id -u)" -eq 0 ] || vm_die "run as root (mmdebstrap, chroot, qemu)"
# the host's tools, installed where missing (as scripts/setup.sh does for the lab's)
if ! command -v mmdebstrap >/dev/null || ! command -v qemu-system-x86_64 >/dev/null; then
    vm_say "installing mmdebstrap and qemu"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends mmdebstrap qemu-system-x86 e2fsprogs \
        >/dev/null
fi

mkdir -p "$VM_CACHE"
exec 9> "$VM_CACHE/.build.lock"
flock 9  # one build at a time; a second caller then finds the image cached
dir=$(image_dir)
if [ -f "$dir/disk.img" ]; then
    vm_say "image cached: $dir"
    echo "$dir"
    exit 0
fi

vm_workdir build

mkdir "$work/root"
start=$(date +%s)
vm_say "building the image for inputs $(image_hash) (about 2-4 minutes)"
# no fsync per file (a crash only loses this throw-away build); no manuals, docs or
# translations in the image (fewer files to write and to pack)
nice -n 10 mmdebstrap --variant=important --include="$(image_packages | paste -sd, -)" \
    --dpkgopt=force-unsafe-io --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/info/*' \
    --customize-hook="'$REPO/scripts/vm/customize.sh' \"\$1\"" \
    "$SUITE" "$work/root/" >&2

cp "$work"/root/boot/vmlinuz-* "$work/vmlinuz"
cp "$work"/root/boot/initrd.img-* "$work/initrd.img"
cp "$work/root/etc/testbed-vm/packages.lock" "$work/packages.lock"
# the root file system, with room for what tests write outside /tmp; sparse on the host
used_mb=$(du -sm "$work/root" | cut -f1)
truncate -s "$((used_mb + 4096))M" "$work/disk.img"
mkfs.ext4 -q -F -L testbed-vm -d "$work/root" "$work/disk.img"
rm -rf --one-file-system "$work/root"

echo "built $(date -u +%FT%TZ) in $(($(date +%s) - start)) s from $(image_hash)" > "$work/built"
mv "$work" "$dir"
trap - EXIT
vm_say "image built in $(($(date +%s) - start)) s: $dir ($(du -sh "$dir" | cut -f1) on disk)"

# keep the newest three images, so switching branches back and forth does not rebuild
ls -1dt "$VM_CACHE"/*/ 2>/dev/null | tail -n +4 | xargs -r rm -rf --one-file-system
echo "$dir"
