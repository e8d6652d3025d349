#!/usr/bin/env bash
# make vagrant-test: the Vagrant route as a student takes it, here, under libvirt, with both
# kinds of box vagrant/Vagrantfile takes:
#
#   teacher  the teacher's box of `make image` (dist/testbed-lab-amd64-libvirt.box), added
#            under a name of its own and chosen with TESTBED_BOX: the lab is in it, so
#            provisioning installs nothing;
#   public   a stand-in for the public box the Vagrantfile names for libvirt
#            (debian/bookworm64, which cannot be downloaded here): plain Debian 12 with the
#            `vagrant` user and Vagrant's key (scripts/image/build-disk.sh amd64 plain),
#            added under that public name; provisioning installs the lab from the
#            registries, as it does on a student's machine.
#
# For each (VAGRANT_ROUTES="teacher public" by default):
#   1. installs what is missing on the host (vagrant, vagrant-libvirt, libvirt, qemu) and
#      starts libvirt's daemons where nothing runs them (no systemd: containers, CI);
#   2. from a clean clone of this repository: `vagrant up --provider=libvirt` (qemu's
#      software emulation where the host has no KVM): the tree goes in as one archive over
#      ssh, no shared folder; then in the VM `sudo make run-scenario DURATION=5` and
#      `sudo testbed doctor`;
#   3. checks that doctor and the run's report name the kernel datapath, that
#      results/latest is a link on the VM's own disk, and, through the ssh tunnel every
#      `vagrant ssh` opens, fetches from 127.0.0.1 here the results page, the run's
#      report, one plot and the run as a .zip (whose summary.json must be the VM's), and
#      that the tunnel listens on 127.0.0.1 only;
#   4. `vagrant destroy -f`, the box and its volume removed, and libvirt's state (domains,
#      networks, pools, volumes, bridges, IP forwarding) compared with the state before.
#
# Records (times, the VM's doctor, the run's summary, the pages fetched) go to
# results/vagrant-test/TIMESTAMP/ROUTE/. Exits non-zero when a step or a check fails, or
# when anything is left behind.
set -euo pipefail
source "$(dirname "$0")/../vm/lib.sh"

[ "$(id -u)" -eq 0 ] || vm_die "run as root (libvirt, the box build)"
say() { vm_say "$*"; }
POOL=testbed-vagrant
boxes=()
out="$REPO/results/vagrant-test/$(date +%Y%m%d-%H%M%S)"
mkdir -p "$out"
times="$out/times.txt"
: > "$times"
stamp() { echo "$1 $(($(date +%s) - $2)) s" | tee -a "$times" >&2; }

# -- 1. the host's tools --------------------------------------------------------------------
HOST_PACKAGES=(vagrant vagrant-libvirt libvirt-daemon-system libvirt-clients dnsmasq-base
               iptables qemu-system-x86 qemu-utils mmdebstrap e2fsprogs fdisk git curl
               iproute2)
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

serve_pid=""
# the results page's `vagrant ssh` runs in a session of its own: stopping it stops its ssh
# too, which holds the tunnel (killing vagrant alone left ssh holding 127.0.0.1:8470, and
# the next route's tunnel could not listen there)
stop_serve() {
    [ -n "$serve_pid" ] || return 0
    kill -- -"$serve_pid" 2>/dev/null || true
    wait "$serve_pid" 2>/dev/null || true  # 143: it was stopped (set -e would end here)
    serve_pid=""
}
cleanup() {
    set +e
    stop_serve
    say "removing the VM, the box, its volume and the pool"
    if [ -d "$clone/vagrant" ]; then
        (cd "$clone/vagrant" && vagrant destroy -f >> "$out/vagrant.log" 2>&1)
    fi
    for b in "${boxes[@]}"; do
        vagrant box remove "$b" --provider libvirt --all --force >> "$out/vagrant.log" 2>&1
    done
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

# -- 2-4. each route ---------------------------------------------------------------------------
"${VIRSH[@]}" pool-define-as "$POOL" dir --target "/var/lib/libvirt/$POOL" >/dev/null
"${VIRSH[@]}" pool-build "$POOL" >/dev/null
"${VIRSH[@]}" pool-start "$POOL" >/dev/null
git clone -q "$REPO" "$clone"
plain_box() {  # the public box's stand-in: the plain disk as a libvirt box
    local dir=$tmp/plain
    mkdir -p "$dir"
    "$REPO/scripts/image/build-disk.sh" amd64 plain "$dir/disk.raw" >&2
    qemu-img convert -c -f raw -O qcow2 "$dir/disk.raw" "$dir/box.img"
    printf '{"provider": "libvirt", "format": "qcow2", "virtual_size": %d}\n' \
        "$(( ($(stat -c %s "$dir/disk.raw") + (1 << 30) - 1) >> 30 ))" > "$dir/metadata.json"
    printf 'Vagrant.configure("2") do |c|\n  c.vm.provider :libvirt do |l|\n    l.disk_bus = "virtio"\n  end\nend\n' \
        > "$dir/Vagrantfile"
    rm "$dir/disk.raw"
    tar -C "$dir" -cf "$dir/plain.box" metadata.json Vagrantfile box.img
    echo "$dir/plain.box"
}

PORT=8470  # the results page, as vagrant/Vagrantfile tunnels it
for route in ${VAGRANT_ROUTES:-teacher public}; do
    rout="$out/$route"
    mkdir -p "$rout"
    say "route: $route"
    t=$(date +%s)
    case $route in
        teacher)
            "$REPO/scripts/image/build.sh" amd64 >> "$rout/box-build.log" 2>&1 \
                || vm_die "make image failed (see $rout/box-build.log)"
            boxfile="$REPO/dist/testbed-lab-amd64-libvirt.box"
            BOX=testbed/lab-test
            export TESTBED_BOX=$BOX
            ;;
        public)
            boxfile=$(plain_box 2>> "$rout/box-build.log") \
                || vm_die "the plain box failed (see $rout/box-build.log)"
            BOX=debian/bookworm64
            unset TESTBED_BOX
            # pip in the VM trusts what this machine trusts (a proxy here may intercept TLS)
            export TESTBED_CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt
            ;;
        *) vm_die "VAGRANT_ROUTES: teacher or public, not $route" ;;
    esac
    stamp "$route: box built (or its root file system taken from the cache):" "$t"
    vagrant box add --name "$BOX" --provider libvirt "$boxfile" >> "$rout/vagrant.log" 2>&1
    boxes+=("$BOX")

    cd "$clone/vagrant"
    say "vagrant up --provider=libvirt (driver $TESTBED_LIBVIRT_DRIVER, box $BOX)"
    t=$(date +%s)
    vagrant up --provider=libvirt 2>&1 | tee -a "$rout/vagrant.log" | sed 's/^/  /' >&2
    [ "${PIPESTATUS[0]}" -eq 0 ] || vm_die "vagrant up failed (see $rout/vagrant.log)"
    stamp "$route: vagrant up to provisioned:" "$t"
    t=$(date +%s)
    vagrant ssh -c 'cd /testbed && sudo make run-scenario DURATION=5' > "$rout/run-scenario.log" 2>&1 \
        || vm_die "make run-scenario failed in the VM (see $rout/run-scenario.log)"
    stamp "$route: make run-scenario DURATION=5 inside:" "$t"
    vagrant ssh -c 'cd /testbed && sudo .venv/bin/testbed doctor' > "$rout/doctor.txt" 2>&1

    grep -q "switch datapath *Open vSwitch kernel datapath" "$rout/doctor.txt" \
        || vm_die "doctor in the VM does not name the kernel datapath (see $rout/doctor.txt)"
    vagrant ssh -c 'sudo cat /testbed/results/latest/report.md' > "$rout/report.md" 2>/dev/null
    grep -q "with the Open vSwitch kernel datapath" "$rout/report.md" \
        || vm_die "the run's report does not name the kernel datapath"
    vagrant ssh -c 'test -L /testbed/results/latest && stat -f -c %T /testbed/results/' \
        > "$rout/results-fs.txt" 2>&1 || vm_die "results/latest is not a link in the VM"
    grep -q '^ext2/ext3' "$rout/results-fs.txt" \
        || vm_die "results/ is not on the VM's own disk: $(cat "$rout/results-fs.txt")"
    vagrant ssh -c 'sudo cat /testbed/results/latest/summary.json' > "$rout/summary.json" 2>/dev/null
    run_path=$(vagrant ssh -c 'readlink -f /testbed/results/latest' 2>/dev/null | tr -d '\r')
    run_rel=${run_path#/testbed/results/}

    # the results page through the tunnel of `vagrant ssh`, from 127.0.0.1 here
    if ss -Hltn "sport = :$PORT" | grep -q .; then
        vm_die "127.0.0.1:$PORT is taken here already: $(ss -Hltnp "sport = :$PORT")"
    fi
    setsid vagrant ssh -c "sudo timeout 300 testbed results serve --port $PORT" \
        > "$rout/serve.log" 2>&1 &
    serve_pid=$!
    for _ in $(seq 120); do
        curl -fsS --max-time 5 -o "$rout/index.html" "http://127.0.0.1:$PORT/" 2>/dev/null && break
        sleep 1
    done
    [ -s "$rout/index.html" ] || vm_die "no results page on 127.0.0.1:$PORT here (see $rout/serve.log)"
    ss -Hltn "sport = :$PORT" > "$rout/listening.txt"
    if grep -v -E "127\.0\.0\.1:$PORT|\[::1\]:$PORT" "$rout/listening.txt" | grep -q .; then
        vm_die "the tunnel listens beyond 127.0.0.1: $(cat "$rout/listening.txt")"
    fi
    python3 "$REPO/scripts/vagrant/fetch_results.py" "http://127.0.0.1:$PORT" "$run_rel" \
        "$rout/summary.json" "$rout" || vm_die "the results page did not give the run back"
    stop_serve

    cp "$rout/summary.json" "$rout/report.md" "$out/" 2>/dev/null || true
    t=$(date +%s)
    vagrant destroy -f >> "$rout/vagrant.log" 2>&1
    vagrant box remove "$BOX" --provider libvirt --all --force >> "$rout/vagrant.log" 2>&1
    stamp "$route: destroyed:" "$t"
    cd "$REPO"
done
