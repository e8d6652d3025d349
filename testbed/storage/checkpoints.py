"""Checkpoint writes between two regions' stores: a writer and a watcher process.

The writer runs in the source region: it PUTs ``objects`` checkpoint shards of ``size``
bytes, one every ``interval`` seconds (on a fixed schedule, so a slow write delays only
itself), and records when each was acknowledged. With ``--remote`` (synchronous
replication) a shard is acknowledged only when both regions' stores returned 200; without
it (asynchronous) the local store's 200 is the acknowledgement and the store's own
replication (``weed filer.sync``) carries it across. A failed PUT is retried; its time
counts into the write's latency, as a trainer waiting for it would see.

The watcher runs in the destination region: it lists the bucket every ``poll`` seconds
(S3 ListObjectsV2) and reads each shard the moment it shows up, checking its sha256
(an object visible in the destination must be complete and right, also during a cut).
Its arrival time (the first listing that shows it) minus the writer's acknowledgement
is the replication lag; the listing before it bounds it from below (``t_prev``: the
watcher's resolution, about the poll interval plus the time to read what arrived).

Both print nothing; they write one JSON object a line (flushed, so a killed run keeps
what was measured): ``python -m testbed.storage.checkpoints write|watch ...``.
"""

from __future__ import annotations

import argparse
import json
import re
import signal
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from testbed.numbers import flag
from testbed.storage.s3 import object_bytes, request, sha256

KEY_PREFIX = "ckpt-"
#: seconds one PUT or GET may take before it counts as failed (and is retried)
REQUEST_TIMEOUT_S = 10.0
ATTEMPTS = 5
_KEY = re.compile(r"<Key>([^<]*)</Key>")


def checkpoint_key(i: int) -> str:
    """Name of shard ``i``.

    >>> checkpoint_key(7)
    'ckpt-00007'
    """
    return f"{KEY_PREFIX}{i:05d}"


def listed_keys(xml: str) -> set[str]:
    """Keys of a ListObjectsV2 reply.

    >>> sorted(listed_keys("<R><Contents><Key>a</Key></Contents><Contents><Key>b</Key>"
    ...                    "</Contents></R>"))
    ['a', 'b']
    """
    return set(_KEY.findall(xml))


def _put(url: str, data: bytes) -> tuple[int | None, str | None]:
    try:
        return request("PUT", url, data, timeout=REQUEST_TIMEOUT_S).status, None
    except OSError as exc:
        return None, str(exc)


def put_acked(pool: ThreadPoolExecutor, endpoints: Sequence[str], bucket: str, key: str,
              data: bytes, attempts: int = ATTEMPTS) -> dict:
    """PUT ``data`` to every endpoint at once; retry the ones that failed; the write is
    acknowledged when every endpoint returned 200."""
    status: dict[str, int | None] = {e: None for e in endpoints}
    errors: list[str] = []
    tries = 0
    while tries < attempts and any(s != 200 for s in status.values()):
        if tries:
            time.sleep(0.2)
        tries += 1
        todo = [e for e, s in status.items() if s != 200]
        futures = {e: pool.submit(_put, f"{e}/{bucket}/{key}", data) for e in todo}
        for e, fut in futures.items():
            status[e], err = fut.result()
            if err or status[e] != 200:
                errors.append(f"{e}: {err or f'HTTP {status[e]}'}")
    return {"status": list(status.values()), "ok": all(s == 200 for s in status.values()),
            "attempts": tries, "errors": errors[-3:]}


#: seconds a writer waits for its ``go`` file
GO_TIMEOUT_S = 120.0


def write(endpoints: Sequence[str], bucket: str, objects: int, size: int, interval_s: float,
          seed: int, out: Path, go: Path | None = None) -> int:
    """The checkpoint writer; returns how many writes were not acknowledged. With ``go``,
    the first write waits until that file exists: a run starts the process early (its
    start-up takes seconds under software emulation) and its schedule with the run's
    clock, so a fault at a given time always finds writes before and after it. The
    records file exists (empty) from the moment the writer waits."""
    failed = 0
    with open(out, "w") as f, ThreadPoolExecutor(len(endpoints)) as pool:
        # the empty records file says: started, waiting for go
        deadline = time.time() + GO_TIMEOUT_S
        while go is not None and not go.exists():
            if time.time() > deadline:
                raise SystemExit(f"checkpoints: no {go} after {GO_TIMEOUT_S:g} s")
            time.sleep(0.005)
        t_begin = time.time()
        for i in range(objects):
            delay = t_begin + i * interval_s - time.time()
            if delay > 0:
                time.sleep(delay)
            key = checkpoint_key(i)
            data = object_bytes(key, size, seed)
            t0 = time.time()
            res = put_acked(pool, endpoints, bucket, key, data)
            t1 = time.time()
            failed += not res["ok"]
            f.write(json.dumps({"i": i, "key": key, "t_start": t0, "t_ack": t1,
                                "write_ms": round((t1 - t0) * 1000, 3), "bytes": size,
                                "sha256": sha256(data), **res}) + "\n")
            f.flush()
    return failed


def watch(endpoint: str, bucket: str, objects: int, size: int, seed: int, poll_s: float,
          timeout_s: float, out: Path) -> int:
    """The watcher; returns how many shards never arrived intact before ``timeout_s``."""
    expected = {checkpoint_key(i): sha256(object_bytes(checkpoint_key(i), size, seed))
                for i in range(objects)}
    pending = set(expected)
    deadline = time.time() + timeout_s
    list_url = f"{endpoint}/{bucket}?list-type=2&prefix={KEY_PREFIX}&max-keys=1000"
    t_prev = time.time()  # the last listing before this one: the arrival lies between
    with open(out, "w") as f:
        while pending and time.time() < deadline:
            t_poll = time.time()
            try:
                reply = request("GET", list_url, timeout=REQUEST_TIMEOUT_S)
                seen = listed_keys(reply.body.decode(errors="replace")) if \
                    reply.status == 200 else set()
            except OSError:
                seen = set()
            t_seen = time.time()
            for key in sorted(pending & seen):
                try:
                    got = request("GET", f"{endpoint}/{bucket}/{key}", timeout=REQUEST_TIMEOUT_S)
                except OSError:
                    continue  # listed but not readable yet: the next poll tries again
                if got.status != 200:
                    continue
                ok = sha256(got.body) == expected[key]
                f.write(json.dumps({"key": key, "t": t_seen, "t_poll": t_poll, "t_prev": t_prev,
                                    "t_read": time.time(), "bytes": len(got.body),
                                    "sha256_ok": ok}) + "\n")
                f.flush()
                pending.discard(key)
            t_prev = t_poll
            time.sleep(max(0.0, t_poll + poll_s - time.time()))
    return len(pending)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testbed.storage.checkpoints")
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("write", "watch"):
        p = sub.add_parser(name)
        p.add_argument("--bucket", required=True)
        p.add_argument("--objects", type=flag(0, 10**9, integer=True), required=True)
        p.add_argument("--size", type=flag(0, 2**40, integer=True), required=True,
                       help="bytes a shard")
        p.add_argument("--seed", type=flag(0, 2**63 - 1, integer=True), default=1)
        p.add_argument("--out", type=Path, required=True)
    w = sub.choices["write"]
    w.add_argument("--endpoint", action="append", required=True,
                   help="a store to write to (twice: synchronous, acknowledged by both)")
    w.add_argument("--interval", type=flag(0, 86400), required=True,
                   help="seconds between shards")
    w.add_argument("--go", type=Path, help="start writing once this file exists")
    v = sub.choices["watch"]
    v.add_argument("--endpoint", required=True)
    v.add_argument("--poll", type=flag(0, 3600), default=0.1)
    v.add_argument("--timeout", type=flag(0, 86400), required=True)
    args = parser.parse_args(argv)
    # SIGTERM (teardown) ends the loop like Ctrl-C; the records are on disk already
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        if args.command == "write":
            bad = write(args.endpoint, args.bucket, args.objects, args.size, args.interval,
                        args.seed, args.out, args.go)
        else:
            bad = watch(args.endpoint, args.bucket, args.objects, args.size, args.seed,
                        args.poll, args.timeout, args.out)
    except KeyboardInterrupt:
        return 130
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
