"""Tiny UDP sender and receiver for the congestion tests, run inside host namespaces.

``send``: paced datagrams with a chosen TOS byte (its low two bits are the ECN field;
the kernel keeps them for UDP) from one or several source ports, rotated per packet as
RoCE entropy does; prints ``sending`` as it starts and a JSON line at the end. ``recv``:
counts datagrams by the ECN field of the IP header as it arrived (``IP_RECVTOS``), prints
``ready`` once bound, counts until SIGTERM (or its ``--seconds``), then prints a JSON line.
"""

from __future__ import annotations

import argparse
import json
import signal
import socket
import sys
import time


def send(dst: str, port: int, mbps: float, seconds: float, size: int, tos: int,
         sports: int, first_sport: int = 0) -> dict:
    socks = []
    for i in range(sports):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, tos)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
        s.bind(("0.0.0.0", first_sport + i if first_sport else 0))
        socks.append(s)
    payload = b"\0" * size
    gap = size * 8 / (mbps * 1e6)
    print("sending", flush=True)  # started (a loaded machine starts Python late)
    start = time.monotonic()
    next_t, sent, i = start, 0, 0
    while (now := time.monotonic()) - start < seconds:
        if now < next_t:
            time.sleep(min(next_t - now, 0.005))
            continue
        try:
            socks[i % len(socks)].sendto(payload, (dst, port))
            sent += 1
        except OSError:
            pass  # a full socket buffer: the packet is lost, as on a NIC
        i += 1
        next_t += gap
    return {"sent": sent, "sports": [s.getsockname()[1] for s in socks]}


def recv(port: int, seconds: float) -> dict:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    s.setsockopt(socket.IPPROTO_IP, socket.IP_RECVTOS, 1)
    s.bind(("0.0.0.0", port))
    s.settimeout(0.2)
    stopped = []  # SIGTERM ends the count: the test stops a receiver once its senders ended
    signal.signal(signal.SIGTERM, lambda *_: stopped.append(True))
    print("ready", flush=True)
    counts = {"packets": 0, "bytes": 0, "not_ect": 0, "ect1": 0, "ect0": 0, "ce": 0}
    names = ("not_ect", "ect1", "ect0", "ce")
    end = time.monotonic() + seconds
    while time.monotonic() < end and not stopped:
        try:
            data, ancdata, _, _ = s.recvmsg(65535, socket.CMSG_SPACE(4))
        except TimeoutError:
            continue
        counts["packets"] += 1
        counts["bytes"] += len(data)
        for level, kind, value in ancdata:
            if level == socket.IPPROTO_IP and kind == socket.IP_TOS:
                counts[names[value[0] & 3]] += 1
    return counts


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("send")
    s.add_argument("--dst", required=True)
    s.add_argument("--port", type=int, required=True)
    s.add_argument("--mbps", type=float, required=True)
    s.add_argument("--seconds", type=float, required=True)
    s.add_argument("--size", type=int, default=8000)
    s.add_argument("--tos", type=int, default=0)
    s.add_argument("--sports", type=int, default=1)
    s.add_argument("--first-sport", type=int, default=0, help="0: the kernel picks")
    r = sub.add_parser("recv")
    r.add_argument("--port", type=int, required=True)
    r.add_argument("--seconds", type=float, required=True)
    args = p.parse_args(argv)
    if args.cmd == "send":
        out = send(args.dst, args.port, args.mbps, args.seconds, args.size, args.tos,
                   args.sports, args.first_sport)
    else:
        out = recv(args.port, args.seconds)
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
