#!/usr/bin/env bash
# make vagrant-test: the Vagrant route as a user takes it, here, under libvirt.
#
#   1. installs what is missing on the host (vagrant, vagrant-libvirt, libvirt, qemu) and
#      starts libvirt's daemons where nothing runs them (no systemd: containers, CI);
#   2. builds the lab's box from Debian 12's packages (scripts/vagrant/build-box.sh: the
#      lab VM image made bootable, the packages and the venv in it) and adds it, in a
#      Vagrant home of its own, as debian/bookworm64, the box vagrant/Vagrantfile names;
#   3. from a clean clone of this repository: `vagrant up --provider=libvirt` (qemu's
#      software emulation where the host has no KVM), then in the VM
#      `sudo make run-scenario DURATION=5` and `sudo .venv/bin/testbed doctor`;
#   4. checks that doctor and the run's report name the kernel datapath and that the
#      run's results are in the clone's results/ on the host (the two-way shared folder);
#   5. `vagrant destroy -f`, the box and its volume removed, and libvirt's state (domains,
#      networks, pools, volumes, bridges, IP forwarding) compared with the state before.
#
# Records (times, the VM's doctor, the run's summary) go to results/vagrant-test/TIMESTAMP/.
# Exits non-zero when a step or a check fails, or when anything is left behind.
set -euo pipefail
source "$(dirname "$0")/../vm/lib.sh"

[ "$(id -u)" -eq 0 ] || vm_die "run as root (libvirt, the box build)"
say() { vm_say "$*"; }
POOL=testbed-vagrant
BOX=debian/bookworm64
out="$REPO/results/vagrant-test/$(date +%Y%m%d-%H%M%S)"
mkdir -p "$out"
times="$out/times.txt"
: > "$times"
stamp() { echo "$1 $(($(date +%s) - $2)) s" | tee -a "$times" >&2; }

# -- 1. the host's tools --------------------------------------------------------------------
HOST_PACKAGES=(vagrant vagrant-libvirt libvirt-daemon-system libvirt-clients dnsmasq-base
               iptables qemu-system-x86 qemu-utils mmdebstrap e2fsprogs fdisk git)
missing=()
for p in "${HOST_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" \
        || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    say "installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    policy=/usr/sbin/policy-rc.d
    made_policy=false
    if [ ! -e "$policy" ]; then  # no service starts while the packages install
        printf '#!/bin/sh\nexit 101\n' > "$policy"
        chmod 755 "$policy"
        made_policy=true
    fi
    apt-get update -qq
    # no Recommends: libvirt-daemon-config-network's default network would stay behind
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null \
        || { $made_policy && rm -f "$policy"; vm_die "installing ${missing[*]} failed"; }
    $made_policy && rm -f "$policy"
fi

# -- libvirt's daemons, started here only where nothing runs them ---------------------------
VIRSH=(virsh -q -c qemu:///system)
started_daemons=()
if ! "${VIRSH[@]}" version >/dev/null 2>&1; then
    if [ -d /run/systemd/system ]; then
        systemctl start libvirtd
    else
        say "starting virtlogd and libvirtd (no systemd here)"
        virtlogd -d && started_daemons+=(virtlogd)
        libvirtd -d && started_daemons+=(libvirtd)
    fi
    for _ in $(seq 50); do "${VIRSH[@]}" version >/dev/null 2>&1 && break; sleep 0.2; done
    "${VIRSH[@]}" version >/dev/null || vm_die "libvirtd does not answer on qemu:///system"
fi

# libvirt's state, as `make vagrant-test` must leave it
libvirt_state() {
    echo "domains: $("${VIRSH[@]}" list --all --name | sort | tr '\n' ' ')"
    echo "networks: $("${VIRSH[@]}" net-list --all --name | sort | tr '\n' ' ')"
    for pool in $("${VIRSH[@]}" pool-list --all --name | sort); do
        echo "pool $pool: $("${VIRSH[@]}" vol-list "$pool" 2>/dev/null | awk '{print $1}' \
                           | sort | tr '\n' ' ')"
    done
    echo "bridges: $(ip -o link show type bridge | awk -F': ' '{print $2}' | sort | tr '\n' ' ')"
    echo "ip_forward: $(cat /proc/sys/net/ipv4/ip_forward)"
}
libvirt_state > "$out/libvirt-before.txt"
forward_before=$(cat /proc/sys/net/ipv4/ip_forward)

tmp=$(mktemp -d /tmp/testbed-vagrant.XXXXXX)
chmod 755 "$tmp"  # qemu runs as libvirt-qemu: the shared results folder must be reachable
export VAGRANT_HOME="$tmp/vagrant.d" VAGRANT_CHECKPOINT_DISABLE=1
export TESTBED_LIBVIRT_POOL=$POOL
accel=$("$REPO/scripts/vm/accel.sh")
export TESTBED_LIBVIRT_DRIVER=$([ "$accel" = kvm ] && echo kvm || echo qemu)
clone="$tmp/clone"

cleanup() {
    set +e
    say "removing the VM, the box, its volume and the pool"
    if [ -d "$clone/vagrant" ]; then
        (cd "$clone/vagrant" && vagrant destroy -f >> "$out/vagrant.log" 2>&1)
    fi
    vagrant box remove "$BOX" --provider libvirt --all --force >> "$out/vagrant.log" 2>&1
    if "${VIRSH[@]}" pool-info "$POOL" >/dev/null 2>&1; then
        for vol in $("${VIRSH[@]}" vol-list "$POOL" | awk '{print $1}'); do
            "${VIRSH[@]}" vol-delete --pool "$POOL" "$vol" >/dev/null
        done
        "${VIRSH[@]}" pool-destroy "$POOL" >/dev/null
        "${VIRSH[@]}" pool-delete "$POOL" >/dev/null
        "${VIRSH[@]}" pool-undefine "$POOL" >/dev/null
    fi
    # vagrant-libvirt's management network, where vagrant destroy left it
    for net in $("${VIRSH[@]}" net-list --all --name | grep '^vagrant-libvirt$'); do
        grep -q "^networks:.*\b$net\b" "$out/libvirt-before.txt" && continue
        "${VIRSH[@]}" net-destroy "$net" >/dev/null 2>&1
        "${VIRSH[@]}" net-undefine "$net" >/dev/null 2>&1
    done
    # a NAT network turns IP forwarding on and never back off
    echo "$forward_before" > /proc/sys/net/ipv4/ip_forward
    libvirt_state > "$out/libvirt-after.txt"
    for daemon in "${started_daemons[@]}"; do
        pkill -x "$daemon"
    done
    rm -rf "$tmp"
    if ! diff -u "$out/libvirt-before.txt" "$out/libvirt-after.txt" > "$out/libvirt-diff.txt"; then
        say "libvirt's state differs from before the test:"
        cat "$out/libvirt-diff.txt" >&2
        return 1
    fi
}
finish() {
    status=$?
    cleanup || status=1
    echo "vagrant-test: $([ "$status" -eq 0 ] && echo passed || echo FAILED); records in $out"
    exit "$status"
}
trap finish EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# -- 2. the box --------------------------------------------------------------------------------
t=$(date +%s)
box=$("$REPO/scripts/vagrant/build-box.sh")
stamp "box built (or taken from the cache):" "$t"
"${VIRSH[@]}" pool-define-as "$POOL" dir --target "/var/lib/libvirt/$POOL" >/dev/null
"${VIRSH[@]}" pool-build "$POOL" >/dev/null
"${VIRSH[@]}" pool-start "$POOL" >/dev/null
vagrant box add --name "$BOX" --provider libvirt "$box" >> "$out/vagrant.log" 2>&1

# -- 3. a clean clone, vagrant up, the default scenario and doctor inside ---------------------
git clone -q "$REPO" "$clone"
mkdir -p "$clone/results"
chmod 1777 "$clone/results"  # written by qemu's own user through the 9p share
cd "$clone/vagrant"
say "vagrant up --provider=libvirt (driver $TESTBED_LIBVIRT_DRIVER)"
t=$(date +%s)
vagrant up --provider=libvirt 2>&1 | tee -a "$out/vagrant.log" | sed 's/^/  /' >&2
stamp "vagrant up to provisioned:" "$t"
t=$(date +%s)
vagrant ssh -c 'cd /testbed && sudo make run-scenario DURATION=5' 2>&1 \
    | tee "$out/run-scenario.log" | sed 's/^/  /' >&2
stamp "make run-scenario DURATION=5 inside:" "$t"
vagrant ssh -c 'cd /testbed && sudo .venv/bin/testbed doctor' > "$out/doctor.txt" 2>&1

# -- 4. the checks ----------------------------------------------------------------------------
grep -q "switch datapath *Open vSwitch kernel datapath" "$out/doctor.txt" \
    || vm_die "doctor in the VM does not name the kernel datapath (see $out/doctor.txt)"
summary="$clone/results/latest/summary.json"
[ -f "$summary" ] || vm_die "no results/latest/summary.json on the host after the run"
grep -q "with the Open vSwitch kernel datapath" "$clone/results/latest/report.md" \
    || vm_die "the run's report does not name the kernel datapath"
cp "$summary" "$clone/results/latest/report.md" "$out/"
say "the run's results are on the host: $(dirname "$(readlink -f "$summary")")"
