# Shared by the scripts in scripts/vm/ (sourced, not run): where the lab VM image lives
# and what names it.
#
# The image is cached by the hash of what went into it, outside the repository, so a
# re-clone or `git clean` does not throw away a 2-minute build:
#   $VM_CACHE/<hash>/disk.img      root file system (ext4, raw, sparse)
#   $VM_CACHE/<hash>/vmlinuz, initrd.img, packages.lock (every package and its version)

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
VM_CACHE=${VM_CACHE:-/var/cache/testbed-vm}
SUITE=bookworm

vm_say() { printf '%s: %s\n' "$(basename "$0")" "$*" >&2; }
vm_die() { vm_say "error: $*"; exit 1; }

# Everything that decides the image's contents: the package lists, the set-up script
# that builds the venv, the pinned Python dependencies, the build script and the init
# baked into the image. The project's own code is not in it: each boot brings the
# current tree (scripts/vm/boot.sh).
IMAGE_INPUTS=(scripts/packages.txt scripts/vm/packages.txt scripts/vm/lib.sh scripts/setup.sh pyproject.toml
              scripts/vm/build-image.sh scripts/vm/customize.sh scripts/vm/guest-init.sh)

image_hash() {
    (cd "$REPO" && { echo "$SUITE"; sha256sum "${IMAGE_INPUTS[@]}"; } | sha256sum | cut -c1-16)
}

image_dir() { echo "$VM_CACHE/$(image_hash)"; }

# The packages: the testbed's own list, plus the kernel of the architecture (amd64 unless
# $1 says otherwise) and what a booted system needs.
image_packages() {
    grep -h -v -e '^#' -e '^$' "$REPO/scripts/packages.txt" "$REPO/scripts/vm/packages.txt"
    echo "linux-image-${1:-amd64}"
}

# The project as a tar stream: the working tree as it is (uncommitted edits included),
# what git tracks or would track, never .venv, results or .git.
project_tar() (
    cd "$REPO"
    if git rev-parse --git-dir >/dev/null 2>&1; then
        git ls-files -z -co --exclude-standard \
            | while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done \
            | tar -c --null -T - --owner=0 --group=0
    else
        tar -c --exclude=./.venv --exclude=./results --exclude=./.git --owner=0 --group=0 .
    fi
)

# A build's scratch folder under the cache ($work, named after $1), removed when the
# script exits; a build stopped half-way may leave /proc, /sys, /dev mounted in its root
# file system, which are unmounted first.
vm_workdir() {
    work=$(mktemp -d "$VM_CACHE/.$1-XXXXXX")
    trap vm_workdir_remove EXIT
}
vm_workdir_remove() {
    findmnt -rno TARGET | { grep "^$work/" || true; } | sort -r | xargs -r umount -l
    rm -rf --one-file-system "$work"
}
