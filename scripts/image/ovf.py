#!/usr/bin/env python3
"""The OVF descriptor of the lab VM's OVA (VirtualBox, VMware), made and checked.

    ovf.py make --name NAME --arch amd64|arm64 --disk DISK.vmdk --capacity BYTES \
        --cpus N --memory-mb N > NAME.ovf
    ovf.py check FILE.ova       # the descriptor against the disk it carries: exit 0 or 1

``make`` writes an OVF 1.0 envelope with one virtual system: its CPUs, memory, one disk
controller (IDE on amd64, which every OVF importer takes; SATA on arm64, where virtual
machines have no IDE), the disk, and one NAT network card; on arm64 it asks for UEFI
firmware (VMware's ``firmware`` key; VirtualBox's OS type Debian_arm64). ``check`` reads an
OVA as an importer does: the descriptor first in the tar, every file it references present
with the size it states, each disk's format (a streamOptimized VMDK, read from the file's
own header) and capacity (qemu-img's virtual size) as stated, and the manifest's SHA-256 of
every file right. Only the Python standard library and qemu-img: it runs on any host that
builds the images.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import tarfile
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

OVF = "http://schemas.dmtf.org/ovf/envelope/1"
RASD = "http://schemas.dmtf.org/wbem/wscim/1/cim-schema/2/CIM_ResourceAllocationSettingData"
VSSD = "http://schemas.dmtf.org/wbem/wscim/1/cim-schema/2/CIM_VirtualSystemSettingData"
VBOX = "http://www.virtualbox.org/ovf/machine"
VMW = "http://www.vmware.com/schema/ovf"
STREAM = "http://www.vmware.com/interfaces/specifications/vmdk.html#streamOptimized"
NS = {"ovf": OVF, "rasd": RASD, "vssd": VSSD, "vbox": VBOX, "vmw": VMW}
for prefix, uri in NS.items():
    ET.register_namespace(prefix, uri)

#: the CIM operating system id and VirtualBox's OS type of each architecture
OS_TYPES = {"amd64": ("96", "Debian_64"), "arm64": ("96", "Debian_arm64")}


def _sub(parent: ET.Element, tag: str, text: str | None = None, **attrs: str) -> ET.Element:
    prefix, _, name = tag.rpartition(":")
    el = ET.SubElement(parent, f"{{{NS[prefix or 'ovf']}}}{name}",
                       {f"{{{OVF}}}{k}" if ":" not in k else
                        f"{{{NS[k.split(':')[0]]}}}{k.split(':')[1]}": v
                        for k, v in attrs.items()})
    if text is not None:
        el.text = text
    return el


def _item(section: ET.Element, fields: dict[str, str], **attrs: str) -> None:
    item = _sub(section, "Item", **attrs)
    for name in sorted(fields):  # the schema orders rasd elements alphabetically
        _sub(item, f"rasd:{name}", fields[name])


def make(name: str, arch: str, disk: Path, capacity: int, cpus: int, memory_mb: int) -> str:
    """The descriptor's text for one VM with ``disk`` (a streamOptimized VMDK)."""
    env = ET.Element(f"{{{OVF}}}Envelope", {f"{{{OVF}}}version": "1.0"})
    refs = _sub(env, "References")
    _sub(refs, "File", id="file1", href=disk.name, size=str(disk.stat().st_size))
    disks = _sub(env, "DiskSection")
    _sub(disks, "Info", "The virtual disk of the lab VM")
    _sub(disks, "Disk", capacity=str(capacity), capacityAllocationUnits="byte",
         diskId="vmdisk1", fileRef="file1", format=STREAM)
    nets = _sub(env, "NetworkSection")
    _sub(nets, "Info", "The network the VM's card is attached to")
    net = _sub(nets, "Network", name="NAT")
    _sub(net, "Description", "NAT: the VM reaches out, the host reaches in by forwarded ports")
    system = _sub(env, "VirtualSystem", id=name)
    _sub(system, "Info", "The AI fabric testbed's lab VM")
    _sub(system, "Name", name)
    product = _sub(system, "ProductSection")
    _sub(product, "Info", "What is installed")
    _sub(product, "Product", "AI fabric testbed lab VM (Debian 12)")
    _sub(product, "FullVersion", name)
    os_id, vbox_os = OS_TYPES[arch]
    osec = _sub(system, "OperatingSystemSection", id=os_id)
    _sub(osec, "Info", "The guest operating system")
    _sub(osec, "Description", f"Debian 12 ({arch})")
    _sub(osec, "vbox:OSType", vbox_os, **{"ovf:required": "false"})
    hw = _sub(system, "VirtualHardwareSection")
    _sub(hw, "Info", "Virtual hardware requirements")
    sysel = _sub(hw, "System")
    _sub(sysel, "vssd:ElementName", "Virtual Hardware Family")
    _sub(sysel, "vssd:InstanceID", "0")
    _sub(sysel, "vssd:VirtualSystemIdentifier", name)
    _sub(sysel, "vssd:VirtualSystemType", "vmx-14")
    _item(hw, {"Caption": f"{cpus} virtual CPUs", "Description": "Number of virtual CPUs",
               "ElementName": f"{cpus} virtual CPUs", "InstanceID": "1", "ResourceType": "3",
               "VirtualQuantity": str(cpus)})
    _item(hw, {"AllocationUnits": "byte * 2^20", "Caption": f"{memory_mb} MB of memory",
               "Description": "Memory Size", "ElementName": f"{memory_mb} MB of memory",
               "InstanceID": "2", "ResourceType": "4", "VirtualQuantity": str(memory_mb)})
    if arch == "amd64":
        _item(hw, {"Address": "0", "Caption": "ideController0", "Description": "IDE Controller",
                   "ElementName": "ideController0", "InstanceID": "3",
                   "ResourceSubType": "PIIX4", "ResourceType": "5"})
    else:
        _item(hw, {"Address": "0", "Caption": "sataController0",
                   "Description": "SATA Controller", "ElementName": "sataController0",
                   "InstanceID": "3", "ResourceSubType": "AHCI", "ResourceType": "20"})
    _item(hw, {"AddressOnParent": "0", "Caption": "disk1", "Description": "Disk Image",
               "ElementName": "disk1", "HostResource": "ovf:/disk/vmdisk1", "InstanceID": "4",
               "Parent": "3", "ResourceType": "17"})
    _item(hw, {"AutomaticAllocation": "true", "Caption": "Ethernet adapter on 'NAT'",
               "Connection": "NAT", "ElementName": "Ethernet adapter on 'NAT'",
               "InstanceID": "5", "ResourceSubType": "E1000", "ResourceType": "10"})
    if arch == "arm64":
        _sub(hw, "vmw:Config", **{"ovf:required": "false", "vmw:key": "firmware",
                                  "vmw:value": "efi"})
    ET.indent(env)
    # as VirtualBox and VMware write it: the elements in the default namespace, the
    # attributes with the ovf: prefix (ElementTree drops a default namespace's prefix from
    # attributes too, which would take them out of the namespace)
    text = ET.tostring(env, "unicode").replace("<ovf:", "<").replace("</ovf:", "</")
    text = text.replace("<Envelope ", f'<Envelope xmlns="{OVF}" ', 1)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + text + "\n"


def _vmdk_create_type(path: Path) -> str:
    """The createType of a VMDK's embedded descriptor (a streamOptimized VMDK starts with
    a sparse header whose descriptor lies at the sector it names)."""
    with open(path, "rb") as f:
        head = f.read(512)
        if head[:4] != b"KDMV":
            raise ValueError(f"{path.name} is not a VMDK sparse extent (no KDMV magic)")
        desc_offset = int.from_bytes(head[28:36], "little")
        desc_size = int.from_bytes(head[36:44], "little")
        f.seek(desc_offset * 512)
        text = f.read(desc_size * 512).split(b"\0")[0].decode("ascii", "replace")
    for line in text.splitlines():
        if line.startswith("createType="):
            return line.split("=", 1)[1].strip().strip('"')
    raise ValueError(f"{path.name}: no createType in its descriptor")


def check(ova: Path) -> list[str]:
    """What is wrong with ``ova`` as an importer reads it; empty when nothing is."""
    problems: list[str] = []
    with tarfile.open(ova) as tar, tempfile.TemporaryDirectory() as tmp:
        members = tar.getmembers()
        if not members or not members[0].name.endswith(".ovf"):
            return [f"the first file of {ova.name} is not the OVF descriptor"]
        sizes = {m.name: m.size for m in members}
        for m in members:
            if not m.isfile() or "/" in m.name or m.name.startswith("."):
                return [f"{ova.name}: {m.name!r} is not a plain file at the top"]
        folder = Path(tmp)
        for m in members:  # plain files at the top only (checked above)
            with tar.extractfile(m) as src, open(folder / m.name, "wb") as dst:
                for block in iter(lambda: src.read(1 << 20), b""):  # noqa: B023
                    dst.write(block)
        root = ET.parse(folder / members[0].name).getroot()
        files = {}
        for f in root.iterfind("ovf:References/ovf:File", NS):
            href, size = f.get(f"{{{OVF}}}href"), int(f.get(f"{{{OVF}}}size", "-1"))
            files[f.get(f"{{{OVF}}}id")] = href
            if href not in sizes:
                problems.append(f"References names {href}, which the OVA does not carry")
            elif sizes[href] != size:
                problems.append(f"{href}: {sizes[href]} bytes, the descriptor says {size}")
        disks = root.findall("ovf:DiskSection/ovf:Disk", NS)
        if not disks:
            problems.append("no disk in DiskSection")
        for d in disks:
            href = files.get(d.get(f"{{{OVF}}}fileRef"))
            if href is None or href not in sizes:
                problems.append(f"disk {d.get(f'{{{OVF}}}diskId')} refers to no carried file")
                continue
            if d.get(f"{{{OVF}}}format") != STREAM:
                problems.append(f"{href}: format {d.get(f'{{{OVF}}}format')} is not "
                                "streamOptimized")
            try:
                kind = _vmdk_create_type(folder / href)
            except ValueError as e:
                problems.append(str(e))
            else:
                if kind != "streamOptimized":
                    problems.append(f"{href} is a {kind} VMDK, not streamOptimized")
            info = json.loads(subprocess.run(
                ["qemu-img", "info", "--output=json", str(folder / href)],
                check=True, capture_output=True, text=True).stdout)
            capacity = int(d.get(f"{{{OVF}}}capacity", "-1"))
            if info.get("format") != "vmdk" or info.get("virtual-size") != capacity:
                problems.append(f"{href}: qemu-img reads {info.get('format')} of "
                                f"{info.get('virtual-size')} bytes, the descriptor says vmdk "
                                f"of {capacity}")
        hosts = {i.findtext("rasd:HostResource", namespaces=NS)
                 for i in root.iterfind(".//ovf:VirtualHardwareSection/ovf:Item", NS)}
        for d in disks:
            if f"ovf:/disk/{d.get(f'{{{OVF}}}diskId')}" not in hosts:
                problems.append(f"disk {d.get(f'{{{OVF}}}diskId')} is attached to no "
                                "controller")
        manifests = [n for n in sizes if n.endswith(".mf")]
        for mf in manifests:
            for line in (folder / mf).read_text().splitlines():
                algo, _, rest = line.partition("(")
                name, _, digest = rest.partition(")= ")
                if algo != "SHA256" or name not in sizes:
                    problems.append(f"{mf}: cannot check {line!r}")
                    continue
                h = hashlib.sha256()
                with open(folder / name, "rb") as f:
                    for block in iter(lambda: f.read(1 << 20), b""):  # noqa: B023
                        h.update(block)
                if h.hexdigest() != digest.strip():
                    problems.append(f"{name}: its SHA-256 differs from {mf}'s")
    return problems


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="verb", required=True)
    m = sub.add_parser("make")
    m.add_argument("--name", required=True)
    m.add_argument("--arch", choices=sorted(OS_TYPES), required=True)
    m.add_argument("--disk", type=Path, required=True)
    m.add_argument("--capacity", type=int, required=True)
    m.add_argument("--cpus", type=int, required=True)
    m.add_argument("--memory-mb", type=int, required=True)
    c = sub.add_parser("check")
    c.add_argument("ova", type=Path)
    a = p.parse_args(argv)
    if a.verb == "make":
        sys.stdout.write(make(a.name, a.arch, a.disk, a.capacity, a.cpus, a.memory_mb))
        return 0
    problems = check(a.ova)
    for line in problems:
        print(f"ovf.py: {a.ova.name}: {line}", file=sys.stderr)
    if not problems:
        print(f"ovf.py: {a.ova.name}: descriptor, disk and manifest agree")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
