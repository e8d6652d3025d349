"""Constant-rate UDP probes with sequence numbers and send timestamps.

One process per region sends to every peer at ``rate`` packets per second (one
sequence space per peer) and logs every probe it receives. Probes are due on the
schedule ``t0 + seq / rate`` (late ticks are sent at once), so a lost probe's send
time is known even though it never arrived; each probe carries the time it actually
left (read just before it is sent), so the late burst of a stalled sender shows as late
instead of on time.

Output, JSON lines: first ``{"start": NAME, "t0": .., "rate": .., "peers": [...]}``,
then one ``{"s": src, "d": dst, "q": seq, "t": sent, "r": received}`` per arrival,
and at exit ``{"stop": NAME, "sent": {peer: count}}``. Times are epoch seconds.

Run as ``python -m traffic.probe --name A --bind 172.16.0.1 --peer B=172.16.1.1 ...``.
"""

from __future__ import annotations

import argparse
import json
import select
import signal
import socket
import struct
import time
from pathlib import Path

PORT = 47000
#: magic, sequence number, send time, source name
HEADER = struct.Struct("!4sId16s")
MAGIC = b"TBPR"
FLUSH_S = 0.25


def encode(seq: int, sent: float, src: str) -> bytes:
    """A probe payload.

    >>> decode(encode(7, 1.5, "us-east"))
    (7, 1.5, 'us-east')
    """
    return HEADER.pack(MAGIC, seq, sent, src.encode()[:16])


def decode(data: bytes) -> tuple[int, float, str] | None:
    if len(data) < HEADER.size:
        return None
    magic, seq, sent, src = HEADER.unpack_from(data)
    if magic != MAGIC:
        return None
    return seq, sent, src.rstrip(b"\0").decode()


class _Stop(Exception):
    pass


def run(name: str, bind: str, peers: dict[str, str], rate: float, duration: float,
        out: Path, port: int = PORT) -> dict[str, int]:
    """Send to and receive from ``peers`` for ``duration`` seconds; return sent counts."""

    def on_term(signum: int, frame: object) -> None:
        raise _Stop

    signal.signal(signal.SIGTERM, on_term)
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
    sock.bind((bind, port))
    sock.setblocking(False)
    sent = dict.fromkeys(peers, 0)
    lines: list[str] = []
    t0 = time.time() + 0.05
    interval = 1.0 / rate
    with open(out, "w") as f:
        f.write(json.dumps({"start": name, "t0": t0, "rate": rate, "bind": bind,
                            "peers": sorted(peers)}) + "\n")
        f.flush()
        seq = 0
        last_flush = time.time()
        try:
            while True:
                now = time.time()
                if now - t0 >= duration:
                    break
                due = t0 + seq * interval
                if now >= due:
                    for peer, addr in peers.items():
                        try:
                            sock.sendto(encode(seq, time.time(), name), (addr, port))
                            sent[peer] += 1
                        except OSError:  # no route while the backbone converges
                            sent[peer] += 1
                    seq += 1
                    continue
                ready, _, _ = select.select([sock], [], [], due - now)
                if ready:
                    _drain(sock, name, lines)
                if now - last_flush >= FLUSH_S:
                    f.write("".join(lines))
                    f.flush()
                    lines.clear()
                    last_flush = now
            end = time.time() + 0.5  # late arrivals of the last probes
            while time.time() < end:
                if select.select([sock], [], [], end - time.time())[0]:
                    _drain(sock, name, lines)
        except _Stop:
            pass
        f.write("".join(lines))
        f.write(json.dumps({"stop": name, "sent": sent}) + "\n")
    sock.close()
    return sent


def _drain(sock: socket.socket, name: str, lines: list[str]) -> None:
    while True:
        try:
            data = sock.recv(2048)
        except BlockingIOError:
            return
        got = time.time()
        probe = decode(data)
        if probe:
            seq, sent, src = probe
            lines.append(f'{{"s":"{src}","d":"{name}","q":{seq},"t":{sent:.6f},"r":{got:.6f}}}\n')


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--name", required=True)
    ap.add_argument("--bind", required=True)
    ap.add_argument("--peer", action="append", default=[], help="NAME=IP, repeatable")
    ap.add_argument("--rate", type=float, default=200.0)
    ap.add_argument("--duration", type=float, required=True)
    ap.add_argument("--port", type=int, default=PORT)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    peers = dict(p.split("=", 1) for p in args.peer)
    run(args.name, args.bind, peers, args.rate, args.duration, args.out, args.port)


if __name__ == "__main__":
    main()
