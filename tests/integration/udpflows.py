"""Many UDP flows between two hosts, for tests of path repair.

``python udpflows.py send SRC_IP DST_IP FLOWS PACKETS`` sends PACKETS datagrams from each
of FLOWS source ports (so the switches' ECMP hash spreads them over the spines);
``python udpflows.py recv IP SECONDS`` prints ``{source port: datagrams}`` as JSON. A
last argument PORT (both) sets the destination port (4791: RoCE, which spraying sprays).
"""

from __future__ import annotations

import json
import socket
import sys
import time

PORT = 9999
SPORT_BASE = 41000


def send(src: str, dst: str, flows: int, packets: int, port: int = PORT) -> None:
    socks = []
    for k in range(flows):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind((src, SPORT_BASE + k))
        socks.append(s)
    for _ in range(packets):
        for s in socks:
            try:
                s.sendto(b"x" * 64, (dst, port))
            except OSError:
                pass
        time.sleep(0.01)


def recv(ip: str, seconds: float, port: int = PORT) -> None:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((ip, port))
    s.settimeout(0.1)
    seen: dict[int, int] = {}
    end = time.time() + seconds
    print("ready", flush=True)
    while time.time() < end:
        try:
            _, addr = s.recvfrom(2048)
        except OSError:
            continue
        seen[addr[1]] = seen.get(addr[1], 0) + 1
    print(json.dumps(seen), flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "send":
        send(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]),
             *map(int, sys.argv[6:7]))
    else:
        recv(sys.argv[2], float(sys.argv[3]), *map(int, sys.argv[4:5]))
