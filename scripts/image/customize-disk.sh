#!/usr/bin/env bash
# mmdebstrap's second customize hook for the bootable lab disk (scripts/image/build-disk.sh),
# after scripts/vm/customize.sh put the project and its venv at /testbed: what a machine
# booted by its own firmware needs around the lab, and what a student sees first.
#
#   - a login user `lab`, password `lab` (the images' docs give it), with sudo without a
#     password: the lab runs as root (`sudo make run-scenario`); Vagrant logs in with the
#     same user and password, then puts a key of its own in place (vagrant/box/Vagrantfile)
#   - sshd, host keys made at the first boot (none is shipped: every VM from an image gets
#     its own), no reverse lookups (a NAT network's DNS may not answer them)
#   - DHCP on the first NIC (eth0, by net.ifnames=0), which no boot waits for: an image
#     boots the same with no network at all
#   - the console's greeting (/etc/issue) and the message after login (/etc/motd): what to
#     type first
#   - the root file system found by its UUID, and GRUB: BIOS on amd64 (its core image is
#     made here and left in OUT for the disk to be assembled around it), UEFI on arm64 (a
#     standalone EFI program left in OUT, for the EFI system partition's removable path)
#
# The `plain` flavor (a stand-in for a public Vagrant base box) gets the `vagrant` user with
# Vagrant's well-known key instead of the lab user, and no greeting of the lab's.
#
#   customize-disk.sh ROOT ARCH UUID OUT [lab|plain]
set -euo pipefail
root=${1:?usage: customize-disk.sh ROOT ARCH UUID OUT [lab|plain]}
arch=${2:?the architecture: amd64 or arm64}
uuid=${3:?the root file system UUID}
out=${4:?the folder for the boot loader files}
flavor=${5:-lab}

mkdir -p "$root/etc/testbed-vm"
if [ "$flavor" = plain ]; then
    # Vagrant's insecure public key, from the host's vagrant package (the key it logs in
    # with first, before it puts a key of this machine's own in its place)
    key=$(ls /usr/share/rubygems-integration/all/gems/vagrant-*/keys/vagrant.pub 2>/dev/null \
          | head -1)
    [ -n "$key" ] || { echo "customize-disk.sh: no vagrant.pub (is vagrant installed?)" >&2; exit 1; }
    chroot "$root" useradd --create-home --uid 1000 --user-group --shell /bin/bash vagrant
    echo vagrant:vagrant | chroot "$root" chpasswd
    install -d -m 700 -o 1000 -g 1000 "$root/home/vagrant/.ssh"
    install -m 600 -o 1000 -g 1000 "$key" "$root/home/vagrant/.ssh/authorized_keys"
    echo 'vagrant ALL=(ALL) NOPASSWD:ALL' > "$root/etc/sudoers.d/vagrant"
    chmod 440 "$root/etc/sudoers.d/vagrant"
    chroot "$root" dpkg-query -W > "$root/etc/testbed-vm/packages.lock"
else
    chroot "$root" useradd --create-home --uid 1000 --user-group --shell /bin/bash lab
    echo lab:lab | chroot "$root" chpasswd
    # `testbed` and the venv's tools on the PATH, with and without sudo
    cat > "$root/etc/sudoers.d/lab" <<'SUDO'
Defaults secure_path="/testbed/.venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
lab ALL=(ALL) NOPASSWD:ALL
SUDO
    chmod 440 "$root/etc/sudoers.d/lab"
    echo 'export PATH="/testbed/.venv/bin:$PATH"' > "$root/etc/profile.d/testbed.sh"
fi

echo 'UseDNS no' > "$root/etc/ssh/sshd_config.d/testbed.conf"
rm -f "$root"/etc/ssh/ssh_host_*
mkdir -p "$root/etc/systemd/system/ssh.service.d"
printf '[Service]\nExecStartPre=\nExecStartPre=/usr/bin/ssh-keygen -A\nExecStartPre=/usr/sbin/sshd -t\n' \
    > "$root/etc/systemd/system/ssh.service.d/host-keys.conf"

printf 'allow-hotplug eth0\niface eth0 inet dhcp\n' > "$root/etc/network/interfaces.d/eth0"
printf 'auto lo\niface lo inet loopback\nsource /etc/network/interfaces.d/*\n' \
    > "$root/etc/network/interfaces"

# the lab runs its own FRR daemons, nginx and Prometheus processes in its namespaces: the
# packages' services would manage the machine's own routes and listen on its addresses
chroot "$root" systemctl disable frr.service nginx.service prometheus.service \
    prometheus-node-exporter.service >/dev/null 2>&1 || true

[ "$flavor" = lab ] && cat > "$root/etc/issue" <<'ISSUE'
AI fabric testbed: the lab VM (Debian 12, \m) - \n

Log in as "lab", password "lab". Then:
    cd /testbed && sudo make run-scenario     (the default scenario, about 2-5 minutes)
Docs: /testbed/docs/ (install/, first-run.md); results: /testbed/results/latest/
Reach this VM over ssh on the port your VM program forwards (make image: 2222).

ISSUE
[ "$flavor" = lab ] && cat > "$root/etc/motd" <<'MOTD'

The AI fabric testbed is in /testbed (its venv: /testbed/.venv, on your PATH).
    cd /testbed
    sudo make run-scenario              # the default scenario, then read results/latest/report.md
    sudo testbed results serve          # the results as a web page on 127.0.0.1:8470 here
Your computer's browser reaches that page through ssh: ssh -L 8470:127.0.0.1:8470 ...
(docs/install/ says the exact command for each VM program). Labs: /testbed/labs/README.md

MOTD

echo "UUID=$uuid / ext4 errors=remount-ro 0 1" > "$root/etc/fstab"
kver=$(basename "$root"/boot/vmlinuz-* | sed 's/^vmlinuz-//')
mkdir -p "$root/boot/grub"
case $arch in
    amd64)
        grub_target=i386-pc
        console="console=tty0 console=ttyS0,115200"
        ;;
    arm64)
        grub_target=arm64-efi
        # tty0: a VM program's screen (UTM, VMware Fusion, Parallels); ttyAMA0: qemu's
        # serial port on its virt machine, the console that gets the kernel's messages
        console="console=tty0 console=ttyAMA0,115200"
        ;;
    *) echo "customize-disk.sh: no boot loader for $arch" >&2; exit 1 ;;
esac
cp -r "$root/usr/lib/grub/$grub_target" "$root/boot/grub/"
cat > "$root/boot/grub/grub.cfg" <<CFG
set timeout=1
search --no-floppy --fs-uuid --set=root $uuid
menuentry "AI fabric testbed lab VM" {
    linux /boot/vmlinuz-$kver root=UUID=$uuid ro net.ifnames=0 biosdevname=0 $console
    initrd /boot/initrd.img-$kver
}
CFG
case $arch in
    amd64)
        # the core image reads the first partition for its modules and grub.cfg
        chroot "$root" grub-mkimage -O i386-pc -d /usr/lib/grub/i386-pc -o /tmp/core.img \
            -p '(hd0,msdos1)/boot/grub' biosdisk part_msdos ext2
        mv "$root/tmp/core.img" "$out/core.img"
        cp "$root/usr/lib/grub/i386-pc/boot.img" "$out/boot.img"
        ;;
    arm64)
        # one EFI program with what it needs to find the root file system by its UUID and
        # read grub.cfg there; at the removable path it boots without any firmware entry
        printf 'search --no-floppy --fs-uuid --set=root %s\nset prefix=($root)/boot/grub\nconfigfile $prefix/grub.cfg\n' \
            "$uuid" > "$root/tmp/early.cfg"
        chroot "$root" grub-mkimage -O arm64-efi -d /usr/lib/grub/arm64-efi \
            -o /tmp/BOOTAA64.EFI -c /tmp/early.cfg -p /boot/grub \
            part_gpt ext2 fat search search_fs_uuid configfile normal linux echo test
        mv "$root/tmp/BOOTAA64.EFI" "$out/BOOTAA64.EFI"
        rm -f "$root/tmp/early.cfg"
        ;;
esac
