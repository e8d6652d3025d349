"""``python -m traffic replay``: send a pcap's frames out of an interface, tcpreplay-style.

The capture is read into memory once, then sent through a raw AF_PACKET
socket at top speed or paced to a packet or bit rate.  One JSON object with
the counts and achieved rates goes to stdout; argument errors are one line on
stderr with exit code 2.
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
from pathlib import Path

from traffic.pcapfile import PcapError, read_frames
from traffic.rawsock import RawSender

EXIT_USAGE = 2


class UsageError(Exception):
    """A command-line argument is missing or wrong; the message names it."""


class _Parser(argparse.ArgumentParser):
    """ArgumentParser whose errors are exceptions, so main() prints one line."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(message)


def _positive(kind: type) -> object:
    def convert(text: str) -> float | int:
        try:
            value = kind(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from exc
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
        return value

    return convert


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m traffic replay", description=__doc__)
    parser.add_argument("--iface", required=True, help="interface to send on")
    parser.add_argument("--pcap", required=True, help="pcap or pcapng file of Ethernet frames")
    parser.add_argument("--loop", type=int, default=1, help="times to send the file (>= 1)")
    rate = parser.add_mutually_exclusive_group()
    rate.add_argument("--topspeed", action="store_true", help="send as fast as possible "
                      "(the default)")
    rate.add_argument("--pps", type=_positive(float), help="packets per second")
    rate.add_argument("--mbps", type=_positive(float), help="megabits per second (frame bytes)")
    parser.add_argument("--qdisc-bypass", action="store_true",
                        help="skip the interface's tc qdiscs (faster, ignores shaping)")
    return parser


def _validate(args: argparse.Namespace) -> list[bytes]:
    """Check the arguments that argparse cannot; return the frames to send."""
    if args.loop < 1:
        raise UsageError(f"argument --loop: must be >= 1, got {args.loop}")
    try:
        socket.if_nametoindex(args.iface)
    except OSError as exc:
        raise UsageError(f"argument --iface: no such interface: {args.iface}") from exc
    path = Path(args.pcap)
    if not path.is_file():
        raise UsageError(f"argument --pcap: no such file: {args.pcap}")
    try:
        frames = read_frames(path)
    except PcapError as exc:
        raise UsageError(f"argument --pcap: {exc}: {args.pcap}") from exc
    except OSError as exc:
        raise UsageError(f"argument --pcap: cannot read {args.pcap}: {exc.strerror}") from exc
    if not frames:
        raise UsageError(f"argument --pcap: no packets in {args.pcap}")
    return frames


def replay(
    iface: str,
    frames: list[bytes],
    loops: int = 1,
    pps: float | None = None,
    mbps: float | None = None,
    qdisc_bypass: bool = False,
) -> dict[str, float | int | str]:
    """Send ``frames`` ``loops`` times on ``iface``; return the JSON-able result."""
    with RawSender(iface, qdisc_bypass=qdisc_bypass) as sender:
        stats = sender.send_all(frames, loops=loops, pps=pps, mbps=mbps)
    seconds = max(stats.seconds, 1e-9)
    return {
        "iface": iface,
        "packets": stats.packets,
        "bytes": stats.bytes,
        "seconds": round(stats.seconds, 6),
        "pps": round(stats.packets / seconds, 1),
        "mbps": round(stats.bytes * 8 / seconds / 1e6, 3),
        "loops": loops,
        "frames_per_loop": len(frames),
        "enobufs": stats.enobufs,
        "mode": "pps" if pps else "mbps" if mbps else "topspeed",
    }


def main(argv: list[str]) -> int:
    """Run the replay CLI; return the process exit code."""
    try:
        args = build_parser().parse_args(argv)
        frames = _validate(args)
    except UsageError as exc:
        print(f"replay: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        result = replay(args.iface, frames, args.loop, args.pps, args.mbps, args.qdisc_bypass)
    except PermissionError:
        print("replay: error: raw sockets need root (CAP_NET_RAW)", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"replay: error: sending on {args.iface}: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(result))
    return 0
