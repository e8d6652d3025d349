# Sourced by the image scripts (not run): lets this machine run another architecture's
# programs (an arm64 root file system's dpkg, python and grub-mkimage while it is built),
# through the kernel's binfmt_misc and Debian's qemu-user-static, and puts everything back
# as it was found when the script exits.
#
#   binfmt_enable arm64     # mounts binfmt_misc if it is not mounted, registers
#                           # qemu-aarch64 if nothing handles arm64 binaries yet
#   binfmt_restore          # (on exit) unregisters what it registered, unmounts what it
#                           # mounted
BINFMT=/proc/sys/fs/binfmt_misc
binfmt_mounted_here=false
binfmt_registered_here=""

binfmt_enable() {
    local arch=$1 qarch conf
    case $arch in
        arm64) qarch=aarch64 ;;
        amd64) qarch=x86_64 ;;
        *) vm_die "no binfmt handler known for $arch" ;;
    esac
    if ! mountpoint -q "$BINFMT"; then
        mount -t binfmt_misc binfmt_misc "$BINFMT" || vm_die "cannot mount $BINFMT"
        binfmt_mounted_here=true
    fi
    if [ -e "$BINFMT/qemu-$qarch" ]; then
        grep -q '^enabled' "$BINFMT/qemu-$qarch" || vm_die "$BINFMT/qemu-$qarch is disabled"
        return 0
    fi
    conf=/usr/lib/binfmt.d/qemu-$qarch.conf
    [ -f "$conf" ] || vm_die "no $conf: install qemu-user-static"
    # the F flag: the interpreter is opened now, so it works inside the chroot too
    cat "$conf" > "$BINFMT/register" || vm_die "registering $conf failed"
    binfmt_registered_here=qemu-$qarch
    vm_say "registered $binfmt_registered_here with binfmt_misc (undone on exit)"
}

binfmt_restore() {
    if [ -n "$binfmt_registered_here" ] && [ -e "$BINFMT/$binfmt_registered_here" ]; then
        echo -1 > "$BINFMT/$binfmt_registered_here"
    fi
    binfmt_registered_here=""
    if $binfmt_mounted_here; then
        umount "$BINFMT"
        binfmt_mounted_here=false
    fi
}
