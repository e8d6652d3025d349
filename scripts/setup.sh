#!/usr/bin/env bash
# Set up what is missing for the testbed on Debian 12 / Ubuntu 24.04, as root:
# distribution packages, Open vSwitch running, and the venv at .venv (made from the
# distribution's python3 with --system-site-packages, so it sees Mininet) with the
# project installed. Safe to run again: each step checks first.
#
#   scripts/setup.sh           # a machine to run the lab on (also the Vagrant VM)
#   scripts/setup.sh --dev     # the same, and what the project's own tests need beyond it
#                              # (scripts/packages-dev.txt: a headless browser for the docs)
#   scripts/setup.sh --image   # inside an image being built (chroot, scripts/vm/): packages
#                              # and venv only; Open vSwitch starts when the image boots
set -euo pipefail
cd "$(dirname "$0")/.."
image=false
dev=false
case "${1:-}" in
    --image) image=true ;;
    --dev) dev=true ;;
    "") ;;
    *) echo "usage: $0 [--dev | --image]" >&2; exit 2 ;;
esac

say() { printf 'setup: %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }

[ "$(id -u)" -eq 0 ] || die "run as root (the testbed creates namespaces and switches)"
command -v apt-get >/dev/null || die "needs a Debian or Ubuntu machine (apt-get not found)"

# the list the lab VM image is built from too (scripts/vm/build-image.sh)
mapfile -t PACKAGES < <(grep -v -e '^#' -e '^$' scripts/packages.txt)
if $dev; then
    # only where the distribution has them (Ubuntu ships Chromium as a snap): the tests
    # that need them skip, saying so
    updated=false
    while read -r p; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" \
            && continue
        if ! apt-cache show "$p" >/dev/null 2>&1 && ! $updated; then
            apt-get update -qq
            updated=true
        fi
        if apt-cache show "$p" >/dev/null 2>&1; then PACKAGES+=("$p")
        else say "$p: not in this distribution's archive; the tests that need it skip"; fi
    done < <(grep -v -e '^#' -e '^$' scripts/packages-dev.txt)
fi
missing=()
for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    say "installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections
    # no package's service starts while we install (policy-rc.d exit 101: invoke-rc.d
    # starts nothing): nginx would serve port 80, and where its start fails (a container
    # without IPv6) its postinst would fail and stop this script. Ours only if there is
    # none, removed on any exit. Units are still enabled (see below), and Open vSwitch is
    # started by this script's own step further down.
    policy=/usr/sbin/policy-rc.d
    made_policy=false
    if [ ! -e "$policy" ]; then
        made_policy=true
        trap 'rm -f "$policy"' EXIT
        trap 'exit 130' INT
        trap 'exit 143' TERM
        printf '#!/bin/sh\n# scripts/setup.sh: no service starts while it installs packages\nexit 101\n' \
            > "$policy"
        chmod 755 "$policy"
    fi
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    if $made_policy; then
        rm -f "$policy"
        trap - EXIT INT TERM
    fi
    # the testbed runs its own FRR daemons in its namespaces; the package's service would
    # manage the host's own routes, so keep it off when we were the ones installing it
    if [[ " ${missing[*]} " == *" frr "* ]] && [ -d /run/systemd/system ]; then
        systemctl disable --now frr >/dev/null 2>&1 || true
    fi
    # likewise nginx: the node-local caches are the testbed's own nginx processes in its
    # namespaces (testbed/storage/cache.py); the package's service would serve port 80;
    # and prometheus: a lab runs its own (testbed/monitor/prometheus.py, on 127.0.0.1),
    # the package's service would listen on every address (port 9090)
    for service in nginx prometheus; do
        [[ " ${missing[*]} " == *" $service "* ]] || continue
        if [ -d /run/systemd/system ]; then
            systemctl disable --now "$service" >/dev/null 2>&1 || true
        else
            service "$service" stop >/dev/null 2>&1 || true
        fi
    done
fi

if $image; then
    say "building an image: Open vSwitch is not started here"
elif ! ovs-vsctl -t 2 show >/dev/null 2>&1; then
    say "starting Open vSwitch"
    if [ -d /run/systemd/system ]; then
        systemctl start openvswitch-switch
    else
        # no systemd (containers, CI): start ovsdb-server and ovs-vswitchd directly;
        # where the kernel has no openvswitch module the userspace datapath is used
        /usr/share/openvswitch/scripts/ovs-ctl start --system-id=random >/dev/null
    fi
    for _ in $(seq 50); do ovs-vsctl -t 1 show >/dev/null 2>&1 && break; sleep 0.2; done
    ovs-vsctl -t 2 show >/dev/null || die "Open vSwitch did not start (see /var/log/openvswitch)"
fi

PY=/usr/bin/python3
if [ ! -x .venv/bin/python ]; then
    say "creating .venv from $PY (--system-site-packages, to see the distribution's Mininet)"
    "$PY" -m venv --system-site-packages .venv
fi
stamp=.venv/.installed
want=$(sha256sum pyproject.toml | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ] || [ ! -x .venv/bin/testbed ]; then
    say "installing the project and its pinned dependencies into .venv"
    # for the project's own tests (--dev: CI, a fresh clone each time) without compiling
    # every module ahead (61 -> 40 s on the 2-core development machine): a module is
    # compiled when first imported; a lab (and the image, run under emulation) keeps them
    compile=$($dev && echo --no-compile || true)
    .venv/bin/python -m pip install -q $compile --disable-pip-version-check -e ".[dev]"
    echo "$want" > "$stamp"
fi
.venv/bin/python -c "import mininet.net" 2>/dev/null \
    || die "the venv cannot import Mininet: is the 'mininet' package installed for $PY?"
say "ready: $(.venv/bin/testbed --version 2>/dev/null || echo testbed) in .venv"
