#!/usr/bin/env bash
# mmdebstrap's second customize hook for the Vagrant box (scripts/vagrant/build-box.sh),
# after scripts/vm/customize.sh put the project and its venv at /testbed: what a Vagrant
# base box needs around the lab (a `vagrant` user with Vagrant's well-known insecure key,
# which `vagrant up` replaces on first boot; passwordless sudo; sshd with host keys made
# on first boot; DHCP on eth0), a root file system found by its UUID, and GRUB for a BIOS
# boot. GRUB's core image is made here, inside the new system, and left in OUT for the
# disk to be assembled around it.
#
#   customize-box.sh ROOT UUID OUT
set -euo pipefail
root=${1:?usage: customize-box.sh ROOT UUID OUT}
uuid=${2:?the root file system UUID}
out=${3:?the folder for core.img and boot.img}

# Vagrant's insecure public key, from the host's vagrant package (the key it logs in with
# first, before it puts a key of this box's own in its place)
key=$(ls /usr/share/rubygems-integration/all/gems/vagrant-*/keys/vagrant.pub 2>/dev/null \
      | head -1)
[ -n "$key" ] || { echo "customize-box.sh: no vagrant.pub (is vagrant installed?)" >&2; exit 1; }

chroot "$root" useradd --create-home --uid 1000 --user-group --shell /bin/bash vagrant
echo vagrant:vagrant | chroot "$root" chpasswd
install -d -m 700 -o 1000 -g 1000 "$root/home/vagrant/.ssh"
install -m 600 -o 1000 -g 1000 "$key" "$root/home/vagrant/.ssh/authorized_keys"
echo 'vagrant ALL=(ALL) NOPASSWD:ALL' > "$root/etc/sudoers.d/vagrant"
chmod 440 "$root/etc/sudoers.d/vagrant"

# sshd: no reverse lookups (a NAT network's DNS may not answer them), host keys made at
# the first start (none is shipped: every machine from the box gets its own)
echo 'UseDNS no' > "$root/etc/ssh/sshd_config.d/vagrant.conf"
rm -f "$root"/etc/ssh/ssh_host_*
mkdir -p "$root/etc/systemd/system/ssh.service.d"
printf '[Service]\nExecStartPre=\nExecStartPre=/usr/bin/ssh-keygen -A\nExecStartPre=/usr/sbin/sshd -t\n' \
    > "$root/etc/systemd/system/ssh.service.d/host-keys.conf"

# the first NIC by DHCP (Vagrant's management network); eth0 by net.ifnames=0 below
printf 'allow-hotplug eth0\niface eth0 inet dhcp\n' > "$root/etc/network/interfaces.d/eth0"
printf 'auto lo\niface lo inet loopback\nsource /etc/network/interfaces.d/*\n' \
    > "$root/etc/network/interfaces"

# the lab runs its own FRR daemons and nginx processes in its namespaces: the packages'
# services would manage the machine's own routes and serve port 80
chroot "$root" systemctl disable frr.service nginx.service >/dev/null 2>&1 || true

echo "UUID=$uuid / ext4 errors=remount-ro 0 1" > "$root/etc/fstab"
kver=$(basename "$root"/boot/vmlinuz-* | sed 's/^vmlinuz-//')
mkdir -p "$root/boot/grub"
cp -r "$root/usr/lib/grub/i386-pc" "$root/boot/grub/"
cat > "$root/boot/grub/grub.cfg" <<CFG
set timeout=0
insmod part_msdos
insmod ext2
search --no-floppy --fs-uuid --set=root $uuid
linux /boot/vmlinuz-$kver root=UUID=$uuid ro net.ifnames=0 biosdevname=0 console=tty0 console=ttyS0,115200
initrd /boot/initrd.img-$kver
boot
CFG
# the core image reads the first partition for its modules and grub.cfg
chroot "$root" grub-mkimage -O i386-pc -d /usr/lib/grub/i386-pc -o /tmp/core.img \
    -p '(hd0,msdos1)/boot/grub' biosdisk part_msdos ext2
mv "$root/tmp/core.img" "$out/core.img"
cp "$root/usr/lib/grub/i386-pc/boot.img" "$out/boot.img"
