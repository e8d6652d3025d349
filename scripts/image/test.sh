#!/usr/bin/env bash
# make image-test ARCH=amd64|arm64: the handed-out images, tried as a student's VM program
# would use them, here under qemu (software emulation, TCG: no KVM on these machines).
#
#   1. builds the images (make image; the disk is cached) and checks dist/SHA256SUMS;
#   2. reads the OVA as an importer does (scripts/image/ovf.py check): the descriptor
#      against the disk it carries (references, sizes, streamOptimized format, capacity,
#      manifest);
#   3. boots the qcow2 by its firmware (amd64: BIOS; arm64: UEFI, qemu-efi-aarch64) with
#      no network but a NAT card whose ssh port is forwarded to 127.0.0.1 here, logs in as
#      `lab` with the documented password, runs `testbed doctor` and
#      `sudo make run-scenario DURATION=$IMAGE_TEST_DURATION` (default 5) inside, copies the
#      run's results back, checks that they name the architecture, and fetches the
#      results page, the report, one plot and the run as a .zip through an ssh tunnel
#      from 127.0.0.1 here (scripts/vagrant/fetch_results.py); then runs the unit tests
#      (tests/unit) on the image's own Python and architecture (IMAGE_TEST_UNIT=0 skips
#      them: 15-25 minutes under emulation);
#   4. boots the OVA's VMDK on the controller and card its descriptor names (IDE and e1000
#      on amd64; on arm64 the e1000 card and a virtio disk, since qemu's arm64 UEFI
#      firmware has no driver for the SATA controller the descriptor names), logs in the
#      same way and runs `testbed doctor`.
#
# With IMAGE_TEST_SIZES="all" (make image-sizes) or a list of labs, each lab's starter run
# as its guide writes it is measured inside the qcow2's VM (scripts/image/sizes.py) and its
# figures come back in sizes/.
#
# Records go to results/image-test/ARCH-TIMESTAMP/: times.txt, each boot's console log,
# doctor.txt, run.log, the run's results (run/). Nothing is left behind: each boot runs
# on a snapshot of the image (qemu's temporary overlay), and qemu is stopped on exit,
# Ctrl-C or SIGTERM. Exits non-zero when a step or a check fails.
set -euo pipefail
# the whole script is read before it runs: an edit of this file while a build runs (they
# take long) cannot change what the running build does
{
source "$(dirname "$0")/../vm/lib.sh"

arch=${1:-amd64}
case $arch in amd64|arm64) ;; *) vm_die "ARCH must be amd64 or arm64, not '$arch'" ;; esac
[ "$(id -u)" -eq 0 ] || vm_die "run as root (the image build)"
duration=${IMAGE_TEST_DURATION:-5}
dist=${DIST:-$REPO/dist}
name=testbed-lab-$arch
out="$REPO/results/image-test/$arch-$(date +%Y%m%d-%H%M%S)"
mkdir -p "$out"
times="$out/times.txt"
: > "$times"
stamp() { echo "$1 $(($(date +%s) - $2)) s" | tee -a "$times" >&2; }

for tool in qemu-system-x86_64 qemu-system-aarch64 ssh curl; do
    command -v "$tool" >/dev/null && continue
    vm_say "installing qemu and the ssh client"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends qemu-system-x86 qemu-system-arm \
        qemu-efi-aarch64 qemu-utils openssh-client curl >/dev/null
    break
done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/testbed-image-test.XXXXXX")
qemu_pid=""
stop_vm() {
    if [ -n "$qemu_pid" ] && kill -0 "$qemu_pid" 2>/dev/null; then
        kill "$qemu_pid" 2>/dev/null || true
        wait "$qemu_pid" 2>/dev/null || true
    fi
    qemu_pid=""
}
cleanup() { stop_vm; rm -rf "$tmp"; }
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# -- 1. the images ----------------------------------------------------------------------------
t=$(date +%s)
"$REPO/scripts/image/build.sh" "$arch" 2>&1 | tee "$out/build.log" | sed 's/^/  /' >&2
stamp "make image ARCH=$arch (disk cached or built):" "$t"
(cd "$dist" && sha256sum -c --ignore-missing SHA256SUMS) > "$out/sha256sums.txt" \
    || vm_die "dist/SHA256SUMS does not match the images (see $out/sha256sums.txt)"

# -- 2. the OVA as an importer reads it --------------------------------------------------------
python3 "$REPO/scripts/image/ovf.py" check "$dist/$name.ova" | tee "$out/ovf-check.txt" >&2
tar -C "$tmp" -xf "$dist/$name.ova" "$name-disk1.vmdk"

# -- the VM, and ssh into it as the student does ---------------------------------------------
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
printf '#!/bin/sh\necho lab\n' > "$tmp/askpass"
chmod 700 "$tmp/askpass"
ssh_port=""
vm_ssh() {
    SSH_ASKPASS="$tmp/askpass" SSH_ASKPASS_REQUIRE=force setsid -w ssh -p "$ssh_port" \
        -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR \
        -o PubkeyAuthentication=no -o PreferredAuthentications=password,keyboard-interactive \
        -o ConnectTimeout=10 -o ServerAliveInterval=15 "$@" lab@127.0.0.1 "${remote[@]}" \
        < /dev/null
}
in_vm() { remote=("$@"); vm_ssh; }

# boot DISK FORMAT WHICH: firmware boot of DISK on the controller and card WHICH names
boot() {
    local disk=$1 format=$2 which=$3 accel_args firmware machine drive nic
    ssh_port=$(free_port)
    case $arch in
        amd64)
            machine=(qemu-system-x86_64 -accel tcg -cpu max)
            firmware=()
            ;;
        arm64)
            # pauth-impdef: the same pointer authentication, a cheaper hash under TCG
            machine=(qemu-system-aarch64 -M virt -accel tcg -cpu max,pauth-impdef=on)
            firmware=(-bios /usr/share/qemu-efi-aarch64/QEMU_EFI.fd)
            ;;
    esac
    local net="user,id=nat,hostfwd=tcp:127.0.0.1:$ssh_port-:22"
    case $which in
        qcow2)
            drive=(-drive "file=$disk,format=$format,if=virtio,snapshot=on")
            nic=(-netdev "$net" -device virtio-net-pci,netdev=nat)
            ;;
        ova)  # what the OVF descriptor names (scripts/image/ovf.py)
            if [ "$arch" = amd64 ]; then
                drive=(-drive "file=$disk,format=$format,if=ide,snapshot=on")
            else
                # qemu's arm64 UEFI firmware (edk2's ArmVirtQemu) has no AHCI driver: the
                # disk goes on virtio here, so this boot checks the VMDK, not the SATA
                # controller the descriptor names for VMware and VirtualBox
                drive=(-drive "file=$disk,format=$format,if=virtio,snapshot=on")
            fi
            nic=(-netdev "$net" -device e1000,netdev=nat)
            ;;
    esac
    TMPDIR=$tmp "${machine[@]}" "${firmware[@]}" -smp 2 -m "${IMAGE_TEST_MEMORY_MB:-3072}" \
        -nodefaults -no-reboot -display none -device virtio-rng-pci "${drive[@]}" "${nic[@]}" \
        -chardev "file,id=console,path=$out/console-$which.log" -serial chardev:console \
        < /dev/null > "$out/qemu-$which.log" 2>&1 &
    qemu_pid=$!
    local t0 limit
    t0=$(date +%s)
    limit=$([ "$arch" = amd64 ] && echo 900 || echo 2400)
    vm_say "booting the $which image ($arch, software emulation); ssh on 127.0.0.1:$ssh_port"
    until in_vm true 2>/dev/null; do
        kill -0 "$qemu_pid" 2>/dev/null || vm_die "qemu ended during the boot (see $out/qemu-$which.log, console-$which.log)"
        [ $(($(date +%s) - t0)) -lt "$limit" ] \
            || vm_die "no ssh login within $limit s (see $out/console-$which.log)"
        sleep 5
    done
    stamp "$which: boot to the first ssh login as lab:" "$t0"
}

# -- 3. the qcow2: doctor, the default scenario, the results back ------------------------------
boot "$dist/$name.qcow2" qcow2 qcow2
in_vm "grep -q 'Log in as \"lab\", password \"lab\"' /etc/issue" \
    || vm_die "the console's greeting does not give the login"
in_vm uname -m > "$out/uname.txt"
in_vm 'df -m / && free -m && nproc' > "$out/vm-space.txt"
expected_machine=$([ "$arch" = amd64 ] && echo x86_64 || echo aarch64)
grep -qx "$expected_machine" "$out/uname.txt" || vm_die "the VM runs $(cat "$out/uname.txt")"
t=$(date +%s)
in_vm 'cd /testbed && sudo .venv/bin/testbed doctor' > "$out/doctor.txt" 2>&1 \
    || vm_die "testbed doctor failed in the VM (see $out/doctor.txt)"
stamp "qcow2: testbed doctor:" "$t"
grep -q "on $expected_machine" "$out/doctor.txt" || vm_die "doctor does not name $expected_machine"
t=$(date +%s)
# measured as it runs (scripts/sizing.py: memory at the peak, busy cores, the folder's size)
in_vm "cd /testbed && sudo .venv/bin/python scripts/sizing.py --out results/latest \
       --json /tmp/run-sizing.json -- make run-scenario DURATION=$duration" \
    > "$out/run.log" 2>&1 || vm_die "make run-scenario failed in the VM (see $out/run.log)"
in_vm cat /tmp/run-sizing.json > "$out/run-sizing.json"
stamp "qcow2: make run-scenario DURATION=$duration inside:" "$t"
in_vm 'df -m /' >> "$out/vm-space.txt"
mkdir -p "$out/run"
in_vm 'cd /testbed/results/latest/ && sudo tar -c .' | tar -C "$out/run" -x
python3 - "$out/run" "$expected_machine" <<'PY'
import json, sys
from pathlib import Path
run, machine = Path(sys.argv[1]), sys.argv[2]
summary = json.loads((run / "summary.json").read_text())
manifest = json.loads((run / "manifest.json").read_text())
for name, doc in (("summary.json", summary), ("manifest.json", manifest)):
    found = doc.get("capabilities", {}).get("architecture")
    if found != machine:
        sys.exit(f"image-test: {name} records architecture {found!r}, not {machine!r}")
runs = summary["runs"]
done = [r["name"] for r in runs if r["agents"]["chains_completed"] > 0]
if not done:
    sys.exit("image-test: no variant of the run completed a chain")
flagged = [r["name"] for r in runs if not r.get("fidelity", {}).get("ok", True)]
print(f"image-test: {len(runs)} variants, chains completed in {len(done)}; "
      f"flagged by the fidelity monitor (emulation): {', '.join(flagged) or 'none'}")
PY
# the results page, served in the VM on its 127.0.0.1, fetched here through an ssh tunnel
# from this machine's 127.0.0.1 (the same port at both ends, as the page's Host check asks)
page_port=$(free_port)
run_rel=$(in_vm readlink -f /testbed/results/latest | sed 's|^/testbed/results/||')
remote=("sudo timeout 300 testbed results serve /testbed/results --port $page_port")
vm_ssh -L "127.0.0.1:$page_port:127.0.0.1:$page_port" > "$out/serve.log" 2>&1 &
serve_pid=$!
for _ in $(seq 120); do
    curl -fsS --max-time 5 -o /dev/null "http://127.0.0.1:$page_port/" 2>/dev/null && break
    sleep 1
done
mkdir -p "$out/page"
python3 "$REPO/scripts/vagrant/fetch_results.py" "http://127.0.0.1:$page_port" "$run_rel" \
    "$out/run/summary.json" "$out/page" >&2 \
    || vm_die "the results page did not give the run back (see $out/serve.log)"
kill "$serve_pid" 2>/dev/null || true
wait "$serve_pid" 2>/dev/null || true

if [ "${IMAGE_TEST_UNIT:-1}" != 0 ]; then
    t=$(date +%s)
    in_vm 'cd /testbed && sudo .venv/bin/python -m pytest -q -p no:cacheprovider tests/unit' \
        > "$out/unit.log" 2>&1 || { tail -5 "$out/unit.log" >&2
                                    vm_die "the unit tests failed in the VM (see $out/unit.log)"; }
    tail -1 "$out/unit.log" >&2
    stamp "qcow2: the unit tests inside ($(tail -1 "$out/unit.log" | tr -d '=')):" "$t"
fi

if [ -n "${IMAGE_TEST_SIZES:-}" ]; then
    # make image-sizes: each lab's starter run as its guide writes it, measured in the VM
    t=$(date +%s)
    in_vm "cd /testbed && sudo .venv/bin/python scripts/image/sizes.py /tmp/sizes $IMAGE_TEST_SIZES" \
        2>&1 | tee "$out/sizes.log" >&2
    mkdir -p "$out/sizes"
    in_vm 'cd /tmp/sizes && sudo tar -c .' | tar -C "$out/sizes" -x
    stamp "qcow2: the labs' starter runs (make image-sizes):" "$t"
fi
stop_vm

# -- 4. the OVA's VMDK, on the hardware its descriptor names -----------------------------------
boot "$tmp/$name-disk1.vmdk" vmdk ova
in_vm 'cd /testbed && sudo .venv/bin/testbed doctor' > "$out/doctor-ova.txt" 2>&1 \
    || vm_die "testbed doctor failed in the VM booted from the OVA's disk"
stop_vm
echo "image-test ($arch): passed; records in $out"
exit
}
