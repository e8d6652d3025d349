"""The lab keys in the form Wireshark's MACsec dissector reads.

Wireshark (4.4 and later; Debian 12's 4.0 has no MACsec decryption) decrypts MACsec
with static keys from its "Pre-Shared Key List" (Preferences > Protocols > MACsec), a
UAT table stored as the file ``psk_config_data`` in the configuration profile: one
line a key, ``HEXKEY,"info"`` (the key as hex bytes, unquoted; the info text quoted).
It tries every key on every frame, with the SCI and PN of the frame as the IV, so
GCM-AES-128 and GCM-AES-256 links decrypt; the XPN suites need the salt and SSCI of an
MKA exchange, which static keys do not give it (``testbed decrypt`` handles every
suite). Frames over 1514 bytes are not decrypted by Wireshark either.

Use: copy the file into a profile, e.g. ``~/.config/wireshark/profiles/testbed/``, and
open the capture with ``wireshark -C testbed wire.pcap``.

>>> print(uat_text({"links": [{"name": "l0", "suite": "gcm-aes-128", "sides": {
...     "a": {"keys": {"0": "00" * 16}}, "b": {"keys": {"0": "11" * 16}}}}]}), end="")
# Wireshark MACsec Pre-Shared Key List (psk_config_data): lab keys of a testbed run
00000000000000000000000000000000,"l0 a AN0 gcm-aes-128"
11111111111111111111111111111111,"l0 b AN0 gcm-aes-128"
"""

from __future__ import annotations

from pathlib import Path

UAT_FILE = "psk_config_data"
#: suites Wireshark decrypts from static keys
STATIC_SUITES = ("gcm-aes-128", "gcm-aes-256")


def uat_text(keys: dict) -> str:
    """``psk_config_data`` lines for every SAK of every link and side (each key once)."""
    lines = ["# Wireshark MACsec Pre-Shared Key List (psk_config_data): lab keys of a "
             "testbed run"]
    seen = set()
    for link in keys.get("links", []):
        suite = link.get("suite", "")
        for side, entry in sorted(link.get("sides", {}).items()):
            for an, sak in sorted(entry.get("keys", {}).items()):
                if sak.lower() in seen:
                    continue
                seen.add(sak.lower())
                info = f"{link.get('name', '')} {side} AN{an} {suite}".replace('"', "'")
                lines.append(f'{sak.lower()},"{info}"')
    return "\n".join(lines) + "\n"


def write_uat(keys: dict, path: Path) -> Path:
    """Write the keys as Wireshark's ``psk_config_data`` file (mode 0600); returns
    ``path``."""
    from testbed.host.files import write_text

    write_text(path, uat_text(keys), secret=True)
    return path
