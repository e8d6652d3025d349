#!/usr/bin/env bash
# make image ARCH=amd64|arm64: the lab VM as files a teacher hands out, in dist/:
#
#   testbed-lab-ARCH.qcow2               QEMU, UTM, Lima, libvirt (virt-manager, GNOME Boxes)
#   testbed-lab-ARCH.ova                 VirtualBox, VMware (OVF descriptor + streamOptimized
#                                        VMDK + SHA-256 manifest)
#   testbed-lab-amd64.vhdx               Hyper-V (generation 1; amd64 only)
#   testbed-lab-ARCH-libvirt.box         Vagrant, libvirt provider
#   testbed-lab-ARCH-virtualbox.box      Vagrant, VirtualBox provider
#   testbed-lab-ARCH.txt                 what it was built from (commit, date, inputs, sizes)
#   SHA256SUMS                           every file above, as `sha256sum -c` reads it
#
# Every image is the same disk (scripts/image/build-disk.sh, cached): Debian 12, the lab's
# packages, the project at /testbed with its venv, the user `lab` (password `lab`), sshd;
# it boots with no network. The VM's size in the OVA and the boxes: IMAGE_CPUS and
# IMAGE_MEMORY_MB (defaults: the sizes docs/install/sizes.md measured).
set -euo pipefail
# the whole script is read before it runs: an edit of this file while a build runs (they
# take long) cannot change what the running build does
{
source "$(dirname "$0")/../vm/lib.sh"

arch=${1:-amd64}
case $arch in amd64|arm64) ;; *) vm_die "ARCH must be amd64 or arm64, not '$arch'" ;; esac
cpus=${IMAGE_CPUS:-2}
memory_mb=${IMAGE_MEMORY_MB:-3072}
dist=${DIST:-$REPO/dist}
name=testbed-lab-$arch

mkdir -p "$dist"
tmp=$(mktemp -d "$dist/.build-$arch.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
start=$(date +%s)
disk=$tmp/disk.raw
"$REPO/scripts/image/build-disk.sh" "$arch" lab "$disk"
disk_dir=$(ls -1dt "$VM_CACHE"/disk-"$arch"-lab-*/ | head -1)
capacity=$(stat -c %s "$disk")

vm_say "qcow2 (compressed)"
qemu-img convert -c -f raw -O qcow2 "$disk" "$tmp/$name.qcow2"

vm_say "OVA: streamOptimized VMDK, OVF descriptor, manifest"
qemu-img convert -f raw -O vmdk -o subformat=streamOptimized,adapter_type=lsilogic \
    "$disk" "$tmp/$name-disk1.vmdk"
python3 "$REPO/scripts/image/ovf.py" make --name "$name" --arch "$arch" \
    --disk "$tmp/$name-disk1.vmdk" --capacity "$capacity" --cpus "$cpus" \
    --memory-mb "$memory_mb" > "$tmp/$name.ovf"
(cd "$tmp" && for f in "$name.ovf" "$name-disk1.vmdk"; do
     echo "SHA256($f)= $(sha256sum "$f" | cut -d' ' -f1)"; done > "$name.mf")
# the descriptor first, as the OVF standard asks of an OVA; ustar, which every importer reads
tar -C "$tmp" --format=ustar --owner=0 --group=0 -cf "$tmp/$name.ova" \
    "$name.ovf" "$name.mf" "$name-disk1.vmdk"
python3 "$REPO/scripts/image/ovf.py" check "$tmp/$name.ova" >&2

if [ "$arch" = amd64 ]; then
    vm_say "VHDX (dynamic)"
    qemu-img convert -f raw -O vhdx -o subformat=dynamic "$disk" "$tmp/$name.vhdx"
fi

vm_say "Vagrant boxes: libvirt, VirtualBox"
cp "$REPO/vagrant/box/Vagrantfile" "$tmp/Vagrantfile"
mkdir "$tmp/libvirt" "$tmp/virtualbox"
printf '{"provider": "libvirt", "format": "qcow2", "virtual_size": %d, "architecture": "%s"}\n' \
    "$(( (capacity + (1 << 30) - 1) >> 30 ))" "$arch" > "$tmp/libvirt/metadata.json"
ln "$tmp/$name.qcow2" "$tmp/libvirt/box.img"
cp "$tmp/Vagrantfile" "$tmp/libvirt/"
tar -C "$tmp/libvirt" -cf "$tmp/$name-libvirt.box" metadata.json Vagrantfile box.img
printf '{"provider": "virtualbox", "architecture": "%s"}\n' "$arch" \
    > "$tmp/virtualbox/metadata.json"
ln "$tmp/$name-disk1.vmdk" "$tmp/virtualbox/$name-disk1.vmdk"
cp "$tmp/$name.ovf" "$tmp/virtualbox/box.ovf"
cp "$tmp/Vagrantfile" "$tmp/virtualbox/"
tar -C "$tmp/virtualbox" -cf "$tmp/$name-virtualbox.box" metadata.json Vagrantfile box.ovf \
    "$name-disk1.vmdk"

outputs=("$name.qcow2" "$name.ova" "$name-libvirt.box" "$name-virtualbox.box")
[ "$arch" = amd64 ] && outputs+=("$name.vhdx")
{
    echo "the AI fabric testbed's lab VM for $arch"
    echo "commit: $(git -C "$REPO" describe --always --dirty 2>/dev/null || echo unknown)"
    echo "built: $(date -u +%FT%TZ) in $(($(date +%s) - start)) s"
    echo "root file system: $(cat "$disk_dir/built")"
    echo "login: lab / lab (sudo without a password); the lab: cd /testbed && sudo make run-scenario"
    echo "VM size in the OVA and the boxes: $cpus CPUs, $memory_mb MB"
    echo "packages: $(wc -l < "$disk_dir/packages.lock") (the list: /etc/testbed-vm/packages.lock inside)"
    for f in "${outputs[@]}"; do echo "$f: $(du -h --apparent-size "$tmp/$f" | cut -f1)"; done
} > "$tmp/$name.txt"
outputs+=("$name.txt")
for f in "${outputs[@]}"; do mv -f "$tmp/$f" "$dist/$f"; done
rm -f "$dist/$name-disk1.vmdk"
# the checksums of every image in dist/, whichever architecture built it
(cd "$dist" && find . -maxdepth 1 -type f -name 'testbed-lab-*' -printf '%f\n' | sort \
    | xargs -r sha256sum > SHA256SUMS.tmp && mv SHA256SUMS.tmp SHA256SUMS)
vm_say "images for $arch in $dist ($(($(date +%s) - start)) s):"
(cd "$dist" && ls -l "${outputs[@]}" SHA256SUMS) >&2
exit
}
