"""Constant-rate UDP probes with sequence numbers and send timestamps.

One process per region sends to every peer at ``rate`` packets per second (one
sequence space per peer) and logs every probe it receives. One process can also serve
several streams (``--stream``, each its own address, port, peers and output file, on one
clock): a fabric's fault run probes a host's planes and flows from one process instead of
one each, which spares a 2-core host most of the wakeups. Probes are due on the
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
from dataclasses import dataclass, field
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


@dataclass
class Stream:
    """One probe stream: a name, the address and UDP port it sends from and listens on,
    its peers (name -> address, same port) and the file its records go to."""

    name: str
    bind: str
    port: int
    peers: dict[str, str]
    out: Path
    sent: dict[str, int] = field(default_factory=dict)
    lines: list[str] = field(default_factory=list)

    @classmethod
    def parse(cls, text: str) -> Stream:
        """``NAME,BIND,PORT,OUT,PEER=IP[,PEER=IP...]``.

        >>> s = Stream.parse("n0p0f1,10.0.0.1,47001,/tmp/p.jsonl,n7p0f1=10.0.0.8")
        >>> s.name, s.bind, s.port, s.peers, s.out.name
        ('n0p0f1', '10.0.0.1', 47001, {'n7p0f1': '10.0.0.8'}, 'p.jsonl')
        """
        name, bind, port, out, *peers = text.split(",") + [""] * (4 - text.count(","))
        if not peers or not all("=" in p for p in peers):
            raise ValueError(f"--stream {text!r}: want NAME,BIND,PORT,OUT,PEER=IP[,...]")
        if not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"--stream {text!r}: PORT must be 1..65535, not {port!r}")
        return cls(name, bind, int(port), dict(p.split("=", 1) for p in peers), Path(out))


def run(name: str, bind: str, peers: dict[str, str], rate: float, duration: float,
        out: Path, port: int = PORT) -> dict[str, int]:
    """Send to and receive from ``peers`` for ``duration`` seconds; return sent counts."""
    return run_streams([Stream(name, bind, port, peers, out)], rate, duration)[0]


def run_streams(streams: list[Stream], rate: float, duration: float) -> list[dict[str, int]]:
    """Every stream sends to and receives from its peers for ``duration`` seconds, on one
    schedule; returns each stream's sent counts."""

    def on_term(signum: int, frame: object) -> None:
        raise _Stop

    signal.signal(signal.SIGTERM, on_term)
    socks = {}
    for st in streams:
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        sock.bind((st.bind, st.port))
        sock.setblocking(False)
        socks[sock] = st
        st.sent = dict.fromkeys(st.peers, 0)
    t0 = time.time() + 0.05
    interval = 1.0 / rate
    files = {st.name: open(st.out, "w") for st in streams}  # noqa: SIM115 (closed below)
    try:
        for st in streams:
            files[st.name].write(json.dumps({"start": st.name, "t0": t0, "rate": rate,
                                             "bind": st.bind, "peers": sorted(st.peers)})
                                 + "\n")
            files[st.name].flush()
        seq = 0
        last_flush = time.time()
        try:
            while True:
                now = time.time()
                if now - t0 >= duration:
                    break
                due = t0 + seq * interval
                if now >= due:
                    for sock, st in socks.items():
                        for peer, addr in st.peers.items():
                            try:
                                sock.sendto(encode(seq, time.time(), st.name), (addr, st.port))
                            except OSError:  # no route while the backbone converges
                                pass
                            st.sent[peer] += 1
                    seq += 1
                    continue
                ready, _, _ = select.select(list(socks), [], [], due - now)
                for sock in ready:
                    _drain(sock, socks[sock].name, socks[sock].lines)
                if now - last_flush >= FLUSH_S:
                    for st in streams:
                        files[st.name].write("".join(st.lines))
                        files[st.name].flush()
                        st.lines.clear()
                    last_flush = now
            end = time.time() + 0.5  # late arrivals of the last probes
            while time.time() < end:
                for sock in select.select(list(socks), [], [], max(0.0, end - time.time()))[0]:
                    _drain(sock, socks[sock].name, socks[sock].lines)
        except _Stop:
            pass
        for st in streams:
            files[st.name].write("".join(st.lines))
            files[st.name].write(json.dumps({"stop": st.name, "sent": st.sent}) + "\n")
    finally:
        for f in files.values():
            f.close()
        for sock in socks:
            sock.close()
    return [st.sent for st in streams]


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
    ap.add_argument("--name", help="one stream: its name (with --bind, --peer, --out)")
    ap.add_argument("--bind")
    ap.add_argument("--peer", action="append", default=[], help="NAME=IP, repeatable")
    ap.add_argument("--rate", type=float, default=200.0)
    ap.add_argument("--duration", type=float, required=True)
    ap.add_argument("--port", type=int, default=PORT)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--stream", action="append", default=[],
                    help="NAME,BIND,PORT,OUT,PEER=IP[,PEER=IP...], repeatable (instead of "
                         "--name, --bind, --port, --peer and --out)")
    args = ap.parse_args(argv)
    try:
        streams = [Stream.parse(text) for text in args.stream]
    except ValueError as exc:
        ap.error(str(exc))
    if args.name:
        if not (args.bind and args.out and args.peer):
            ap.error("--name needs --bind, --peer and --out")
        peers = dict(p.split("=", 1) for p in args.peer)
        streams.append(Stream(args.name, args.bind, args.port, peers, args.out))
    if not streams:
        ap.error("give --stream, or --name with --bind, --peer and --out")
    run_streams(streams, args.rate, args.duration)


if __name__ == "__main__":
    main()
