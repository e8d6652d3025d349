"""Decrypt a capture of a protected wire afterwards with the lab keys of a run.

The keys come from ``macsec-keys.json`` (mode 0600; with :func:`keys_from` also through
a run's ``summary.json`` or ``manifest.json``, which name the key files and hold only each
key's fingerprint, :func:`key_reference`)::

    {"links": [{"name": "...", "suite": "gcm-aes-128", "salt": "",
                "sides": {"a": {"sci": "hex16", "ssci": 1, "keys": {"0": "hexSAK"}},
                          "b": {...}}}]}

Each link becomes one receive-only :class:`~testbed.macsec.secy.SecY` holding a
receive SC for both sides' SCIs with every SAK ever used. Replay protection is
off: a replayed frame is genuine and decrypts; only frames whose ICV fails (or
whose SCI or AN has no key) count as failed. Untagged frames are not counted.
"""

from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path

from traffic.pcapfile import read_frames, read_records, write_records

from .frame import ETH_P_MACSEC
from .secy import SecY

_DUMMY_SCI = bytes(8)
XPN_WINDOW = 1 << 30


def receivers(keys: dict) -> list[SecY]:
    """One receive-only SecY per link of ``keys``, knowing every SCI and SAK."""
    secys = []
    for link in keys["links"]:
        salt = bytes.fromhex(link["salt"]) if link.get("salt") else None
        # the widest window keeps XPN's PN recovery in the right epoch for old frames
        secy = SecY(_DUMMY_SCI, link["suite"], replay_protect=False,
                    replay_window=XPN_WINDOW)
        for side in link["sides"].values():
            sci = bytes.fromhex(side["sci"])
            for an, sak in side["keys"].items():
                secy.add_rx_sa(sci, int(an), bytes.fromhex(sak), ssci=side.get("ssci"),
                               salt=salt)
        secys.append(secy)
    return secys


def decrypt_frame(secys: list[SecY], frame: bytes) -> bytes | None:
    """The plaintext frame, or None when no link's keys validate it."""
    for secy in secys:
        plain = secy.validate(frame)
        if plain is not None:
            return plain
    return None


def decrypt_pcap(pcap: Path, keys: dict) -> tuple[int, int]:
    """(frames that validated and decrypted, MACsec frames that did not) in ``pcap``."""
    secys = receivers(keys)
    ok = failed = 0
    for frame in read_frames(pcap):
        if len(frame) < 14 or int.from_bytes(frame[12:14], "big") != ETH_P_MACSEC:
            continue
        if decrypt_frame(secys, frame) is None:
            failed += 1
        else:
            ok += 1
    return ok, failed


def fingerprint(sak_hex: str) -> str:
    """What a record that is not a key file keeps of a SAK: enough to tell which key a
    run used, nothing to decrypt with.

    >>> fingerprint("00" * 16)
    'sha256:374708fff7719dd5'
    """
    return "sha256:" + hashlib.sha256(bytes.fromhex(sak_hex)).hexdigest()[:16]


def key_reference(keys: dict, file: str) -> dict:
    """What ``summary.json`` and ``manifest.json`` hold of a keys record (``{"links":
    [...]}``, written to the key file ``file``, relative to the run's folder): the file's
    name and every link and side as it was, each side's SAKs replaced by their
    fingerprints. Results are shared (graded, copied, published); the keys stay in the
    key files, readable by their owner alone.

    >>> ref = key_reference({"links": [{"name": "l", "sides": {"a": {"sci": "01",
    ...                      "keys": {"0": "00" * 16}}}}]}, "macsec-keys.json")
    >>> ref["file"], ref["links"][0]["sides"]["a"]
    ('macsec-keys.json', {'sci': '01', 'fingerprints': {'0': 'sha256:374708fff7719dd5'}})
    """
    links = copy.deepcopy(keys["links"])
    for link in links:
        for side in link.get("sides", {}).values():
            side["fingerprints"] = {an: fingerprint(k) for an, k in side.pop("keys", {}).items()}
    return {"file": file, "links": links}


def keys_from(data: dict, folder: Path | None = None) -> dict:
    """The ``{"links": [...]}`` keys of a keys file, or of the key files a macsec or
    backbone run's summary.json / manifest.json in ``folder`` names (every variant's
    links); ValueError if none.

    >>> keys_from({"links": [1]})
    {'links': [1]}
    """
    if isinstance(data.get("links"), list) and "file" not in data:
        return data
    refs = [data] if "file" in data else []
    macsec = data.get("macsec") or {}
    if isinstance(macsec.get("keys"), dict):
        refs.append(macsec["keys"])
    variants = ((data.get("backbone") or {}).get("macsec") or {}).get("variants") or {}
    refs += [v["keys"] for v in variants.values() if isinstance(v.get("keys"), dict)]
    links = []
    for ref in refs:
        if "file" not in ref:
            links += ref.get("links", [])
            continue
        where = (folder or Path(".")) / ref["file"]
        try:
            named = json.loads(where.read_text())
        except OSError as exc:
            raise ValueError(f"its key file {where}: {exc.strerror}") from None
        if not isinstance(named, dict) or not isinstance(named.get("links"), list):
            raise ValueError(f"its key file {where}: no links in it")
        links += named["links"]
    if links:
        return {"links": links}
    raise ValueError("no MACsec keys in it (a macsec-keys.json, or the summary.json or "
                     "manifest.json of a macsec or backbone run)")


def decrypt_to_pcap(pcap: Path, keys: dict, out: Path) -> dict[str, int]:
    """Write the plaintext of ``pcap`` to ``out`` (timestamps kept): every MACsec frame
    that validates, decrypted; frames that are not MACsec as they are; MACsec frames no
    key validates are left out (counted in ``failed``)."""
    secys = receivers(keys)
    records, nanosecond = read_records(pcap)
    counts = {"frames": len(records), "decrypted": 0, "failed": 0, "not_macsec": 0}
    plain = []
    for sec, frac, frame in records:
        if len(frame) < 14 or int.from_bytes(frame[12:14], "big") != ETH_P_MACSEC:
            counts["not_macsec"] += 1
            plain.append((sec, frac, frame))
            continue
        clear = decrypt_frame(secys, frame)
        if clear is None:
            counts["failed"] += 1
        else:
            counts["decrypted"] += 1
            plain.append((sec, frac, clear))
    write_records(out, plain, nanosecond)
    return counts
