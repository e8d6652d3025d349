#!/usr/bin/env bash
# make cluster-test: a lab spread over two machines, tested on two lab VMs. The second
# VM is a server (sshd on the wire only, the lab's key authorized); the first runs the
# tests of tests/cluster with TESTBED_SERVERS naming the second, then tells the second
# to power off. The two VMs' NICs are joined by qemu's socket network (UDP datagrams
# between two ports on 127.0.0.1): nothing is made on the host but the two qemu
# processes, and a frame between the VMs crosses the host's loopback only.
#
#   scripts/vm/cluster.sh [PYTEST ARGS...]     # default: tests/cluster
#
# Results: results/cluster-test/TIMESTAMP/{lab,server}/ (console.log of each VM; the
# lab VM's summary.txt, junit.xml, pytest.log), results/cluster-test/latest. Exits
# non-zero when a test failed or a VM did not finish. VM_CPUS (default 1 each: a machine
# of the test is one of the host's two cores, in the one-VM run as in the two-VM run)
# and VM_MEM (default 4096 each).
set -euo pipefail
source "$(dirname "$0")/lib.sh"

args=("$@")
[ ${#args[@]} -gt 0 ] || args=(tests/cluster)
export VM_CPUS=${VM_CPUS:-1} VM_MEM=${VM_MEM:-4096}
timeout=${VM_TIMEOUT:-2400}
out="$REPO/results/cluster-test/$(date +%Y%m%d-%H%M%S)"
mkdir -p "$out/lab" "$out/server"
work=$(mktemp -d "${TMPDIR:-/tmp}/testbed-cluster.XXXXXX")
server_pid=""
cleanup() {
    if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then
        kill "$server_pid" 2>/dev/null || true
        wait "$server_pid" 2>/dev/null || true
    fi
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

"$REPO/scripts/vm/build-image.sh" >/dev/null  # once, before two boots ask for it
ssh-keygen -q -t ed25519 -N "" -C testbed-cluster-test -f "$work/key"
read -r lab_port server_port < <(python3 -c '
import socket
socks = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(2)]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(*(s.getsockname()[1] for s in socks))')

# the wire: 10.99.0.0/24, MTU 9100 (the fabric's 9000-byte frames in GRE need 9042); the
# VM's init runs no udev, so the NIC's driver is loaded by hand (the NIC is ens2 then)
nic_up='nic_up() {
    modprobe virtio_net
    local dev=""
    for _ in $(seq 50); do
        dev=$(ls /sys/class/net | grep -v -x lo | head -1)
        [ -n "$dev" ] && break; sleep 0.2
    done
    ip link set "$dev" mtu 9100 up && ip addr add "$1/24" dev "$dev"
}'
cat > "$work/server" <<EOF
#!/bin/bash
$nic_up
nic_up 10.99.0.2
mkdir -p /root/.ssh /run/sshd && chmod 700 /root/.ssh
echo '$(cat "$work/key.pub")' > /root/.ssh/authorized_keys
/usr/sbin/sshd -o ListenAddress=10.99.0.2 -o PasswordAuthentication=no -o UseDNS=no \
    -o MaxSessions=64 -o MaxStartups=64 || exit 1
echo "server: sshd listens on 10.99.0.2"
# until the lab VM is done with it (it touches /tmp/done), at most the job's time
for _ in \$(seq $timeout); do [ -e /tmp/done ] && exit 0; sleep 1; done
echo "server: the lab VM never said it was done"; exit 1
EOF
cat > "$work/lab" <<EOF
#!/bin/bash
$nic_up
nic_up 10.99.0.1
mkdir -p /root/.ssh && chmod 700 /root/.ssh
echo '$(cat "$work/key")' > /root/.ssh/id_ed25519 && chmod 600 /root/.ssh/id_ed25519
printf 'Host 10.99.0.2\n  StrictHostKeyChecking accept-new\n  UserKnownHostsFile /root/.ssh/known_hosts\n' \
    > /root/.ssh/config
ssh_ok() { ssh -o BatchMode=yes -o ConnectTimeout=5 root@10.99.0.2 true 2>/dev/null; }
for _ in \$(seq 120); do ssh_ok && break; sleep 5; done
ssh_ok || { echo "lab: the server VM's sshd never answered"; exit 1; }
echo "lab: the server answers over ssh"
TESTBED_SERVERS=root@10.99.0.2 /testbed/scripts/vm/guest-test.sh ${args[*]@Q}
status=\$?
ssh -o BatchMode=yes root@10.99.0.2 touch /tmp/done
exit \$status
EOF

"$REPO/scripts/vm/boot.sh" --job "$work/server" --out "$out/server" --timeout "$timeout" \
    --net "$server_port:$lab_port:52:54:00:99:00:02" > "$out/server/boot.log" 2>&1 &
server_pid=$!
status=0
"$REPO/scripts/vm/boot.sh" --job "$work/lab" --out "$out/lab" --timeout "$timeout" \
    --net "$lab_port:$server_port:52:54:00:99:00:01" || status=$?
# the server powers off once told; a lab VM that never told it is not waited for long
for _ in $(seq 120); do kill -0 "$server_pid" 2>/dev/null || break; sleep 1; done
server_status=0
wait_server() { wait "$server_pid" || server_status=$?; }
if kill -0 "$server_pid" 2>/dev/null; then kill "$server_pid"; fi
wait_server
server_pid=""
ln -sfn "$(basename "$out")" "$REPO/results/cluster-test/latest"
echo "cluster test: lab VM $(cat "$out/lab/summary.txt" 2>/dev/null || echo "no pytest summary (status $status)"); server VM status $server_status"
echo "cluster test results: $out"
[ "$status" -eq 0 ] && [ "$server_status" -eq 0 ]
