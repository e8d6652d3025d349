"""The handed-out images' pieces that can be checked without building one: the OVF
descriptor (made and read back against a real streamOptimized VMDK from qemu-img, and
every way an OVA can disagree with its descriptor refused), and the Vagrantfile's
promises (a box for every provider, no shared folder, pages tunnelled to 127.0.0.1 only).
The images themselves are built and booted by make image-test."""

from __future__ import annotations

import hashlib
import importlib.util
import re
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("ovf", REPO / "scripts" / "image" / "ovf.py")
ovf = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ovf)

needs_qemu_img = pytest.mark.skipif(shutil.which("qemu-img") is None,
                                    reason="needs qemu-img (scripts/packages-dev.txt)")
CAPACITY = 64 << 20


def vmdk(path: Path, subformat: str = "streamOptimized", size: int = CAPACITY) -> Path:
    subprocess.run(["qemu-img", "create", "-q", "-f", "vmdk", "-o", f"subformat={subformat}",
                    str(path), str(size)], check=True)
    return path


def ova(folder: Path, arch: str = "amd64", *, disk: Path | None = None,
        descriptor: str | None = None, manifest: bool = True, order=None) -> Path:
    disk = disk or vmdk(folder / "lab-disk1.vmdk")
    ovf_path = folder / "lab.ovf"
    ovf_path.write_text(descriptor or ovf.make("lab", arch, disk, CAPACITY, 2, 3072))
    names = ["lab.ovf", disk.name]
    if manifest:
        lines = [f"SHA256({n})= {hashlib.sha256((folder / n).read_bytes()).hexdigest()}"
                 for n in names]
        (folder / "lab.mf").write_text("\n".join(lines) + "\n")
        names.insert(1, "lab.mf")
    out = folder / "lab.ova"
    with tarfile.open(out, "w", format=tarfile.USTAR_FORMAT) as tar:
        for n in order or names:
            tar.add(folder / n, arcname=n)
    return out


@needs_qemu_img
@pytest.mark.parametrize("arch", ["amd64", "arm64"])
def test_a_made_ova_reads_back_clean(tmp_path, arch):
    assert ovf.check(ova(tmp_path, arch)) == []


@needs_qemu_img
def test_the_descriptor_says_what_an_importer_needs(tmp_path):
    text = ovf.make("lab", "arm64", vmdk(tmp_path / "d.vmdk"), CAPACITY, 2, 3072)
    # attributes in the OVF namespace keep their prefix (an unprefixed attribute is in no
    # namespace, and importers would not find ovf:href)
    assert 'ovf:href="d.vmdk"' in text and 'ovf:capacity="67108864"' in text
    assert "<rasd:VirtualQuantity>2</rasd:VirtualQuantity>" in text
    assert "<rasd:VirtualQuantity>3072</rasd:VirtualQuantity>" in text
    assert 'vmw:value="efi"' in text and "Debian_arm64" in text
    assert "<rasd:ResourceSubType>AHCI</rasd:ResourceSubType>" in text
    amd = ovf.make("lab", "amd64", tmp_path / "d.vmdk", CAPACITY, 2, 3072)
    assert "PIIX4" in amd and "efi" not in amd


@needs_qemu_img
@pytest.mark.parametrize("case, expected", [
    ("size", "bytes, the descriptor says"),
    ("missing", "which the OVA does not carry"),
    ("capacity", "the descriptor says vmdk of"),
    ("sparse", "not streamOptimized"),
    ("digest", "SHA-256 differs"),
    ("order", "is not the OVF descriptor"),
])
def test_an_ova_that_disagrees_with_its_descriptor_is_refused(tmp_path, case, expected):
    disk = vmdk(tmp_path / "lab-disk1.vmdk",
                subformat="monolithicSparse" if case == "sparse" else "streamOptimized")
    text = ovf.make("lab", "amd64", disk, CAPACITY, 2, 3072)
    if case == "size":
        text = re.sub(r'ovf:size="\d+"', 'ovf:size="12345"', text)
    elif case == "missing":
        text = text.replace('ovf:href="lab-disk1.vmdk"', 'ovf:href="other.vmdk"')
    elif case == "capacity":
        text = text.replace(f'ovf:capacity="{CAPACITY}"', f'ovf:capacity="{CAPACITY * 2}"')
    path = ova(tmp_path, disk=disk, descriptor=text,
               order=["lab-disk1.vmdk", "lab.ovf", "lab.mf"] if case == "order" else None)
    if case == "digest":
        (tmp_path / "lab.mf").write_text(f"SHA256(lab.ovf)= {'0' * 64}\n")
        path = ova(tmp_path, disk=disk, descriptor=text, manifest=False,
                   order=["lab.ovf", "lab.mf", "lab-disk1.vmdk"])
    problems = ovf.check(path)
    assert any(expected in p for p in problems), problems


VAGRANTFILE = (REPO / "vagrant" / "Vagrantfile").read_text()


def test_every_provider_has_a_box_and_its_settings():
    boxes = dict(re.findall(r'"(\w+)" => "([\w./-]+)"', VAGRANTFILE))
    assert set(boxes) == {"virtualbox", "vmware_desktop", "parallels", "libvirt", "hyperv"}
    for provider in boxes:
        assert f'config.vm.provider "{provider}"' in VAGRANTFILE
    assert 'ENV.fetch("TESTBED_BOX")' in VAGRANTFILE


def test_the_vagrant_vm_shares_no_folder_and_tunnels_to_loopback_only():
    synced = re.findall(r"synced_folder[^\n]*", VAGRANTFILE)
    assert synced and all("disabled: true" in s for s in synced)
    forwards = re.findall(r'"-L", "([^"]+)"', VAGRANTFILE)
    assert forwards and all(f.startswith("127.0.0.1:") for f in forwards)
    assert "forwarded_port" not in VAGRANTFILE  # would listen beyond the host's loopback


def test_the_documented_login_is_the_images_login():
    customize = (REPO / "scripts" / "image" / "customize-disk.sh").read_text()
    box = (REPO / "vagrant" / "box" / "Vagrantfile").read_text()
    page = (REPO / "docs" / "install" / "index.md").read_text()
    assert "echo lab:lab | chroot" in customize
    assert 'config.ssh.username = "lab"' in box and 'config.ssh.password = "lab"' in box
    assert "User `lab`, password `lab`" in page


def test_checkouts_keep_lf_line_ends():
    assert "* text=auto eol=lf" in (REPO / ".gitattributes").read_text()


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_image_sizes_passes_a_list_of_labs_whole():
    """docs/install/sizes.md documents LABS="1 3 4": the list must reach the script as one
    value, not end the variable at its first space (make -n only prints the recipe)."""
    out = subprocess.run(["make", "-n", "image-sizes", "ARCH=amd64", "LABS=5 6 7"], cwd=REPO,
                         capture_output=True, text=True, check=True).stdout
    assert 'IMAGE_TEST_SIZES="5 6 7" ./scripts/image/test.sh amd64' in out
