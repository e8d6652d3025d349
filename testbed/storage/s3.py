"""A minimal S3 client over plain HTTP, run inside a host's namespace.

The lab's store (:mod:`testbed.storage.seaweedfs`) runs with no identities configured,
and SeaweedFS's S3 gateway then accepts anonymous requests: a bucket is ``PUT /BUCKET``,
an object ``PUT /BUCKET/KEY`` and ``GET /BUCKET/KEY``, with no signature. So the lab
needs no SDK (boto3 would bring botocore, some 100 MB of service models, for three
verbs) and the same few lines read through a node-local cache (an HTTP proxy) as from
the store itself.

Run as ``python -m testbed.storage.s3 COMMAND`` inside a host (``Host.run``), each
command prints one JSON object a line: ``ready`` (wait until the gateway stores a
bucket), ``put`` (objects of given sizes, deterministic bytes), ``get`` (objects, with
status, sha256, seconds and the cache's verdict), ``load`` (Zipf-popular reads one
after the other for a time: reads, bytes, seconds), ``metric`` (a counter of a
Prometheus text page, e.g. the store's own bytes sent).
"""

from __future__ import annotations

import argparse
import hashlib
import http.client
import json
import random
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from urllib.parse import urlsplit

from testbed.errors import HostError
from testbed.host.hosts import Host
from testbed.host.procs import python_env
from testbed.numbers import flag
from traffic.object_reads import CACHE_HEADER, KeyPicker, key_name

#: this client, run as a command inside a host
CLIENT = [sys.executable, "-m", "testbed.storage.s3"]


@dataclass(frozen=True)
class Reply:
    status: int
    body: bytes
    seconds: float
    cache: str | None = None


def request(method: str, url: str, body: bytes = b"", timeout: float = 30.0) -> Reply:
    """One HTTP request on a fresh connection; the time includes connecting. Blocking,
    for the command-line tools (the retriever's reads in the asyncio agent service use
    :func:`traffic.object_reads.http_get`)."""
    parts = urlsplit(url)
    t0 = time.perf_counter()
    conn = http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=timeout)
    try:
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        conn.request(method, path, body=body or None,
                     headers={"Content-Length": str(len(body))} if method == "PUT" else {})
        resp = conn.getresponse()
        data = resp.read()
        return Reply(resp.status, data, time.perf_counter() - t0, resp.getheader(CACHE_HEADER))
    finally:
        conn.close()


def object_bytes(key: str, size: int, seed: int) -> bytes:
    """The content of object ``key``: ``size`` bytes drawn from (seed, key), so a reader
    can check what it got without being told.

    >>> object_bytes("k1", 4, 1) == object_bytes("k1", 4, 1) != object_bytes("k2", 4, 1)
    True
    >>> len(object_bytes("k", 1000, 7))
    1000
    """
    return random.Random(f"{seed}:{key}").randbytes(size)


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def metric_total(text: str, name: str, **labels: str) -> float:
    """Sum of a Prometheus text page's samples of ``name`` whose labels include ``labels``.

    >>> page = ('# TYPE x counter\\nx{bucket="a",t="GET"} 2\\nx{bucket="b"} 5\\n'
    ...         'x_sum 9\\nx{bucket="a",t="PUT"} 1e3\\n')
    >>> metric_total(page, "x", bucket="a"), metric_total(page, "x"), metric_total(page, "y")
    (1002.0, 1007.0, 0.0)
    """
    total = 0.0
    wanted = [f'{k}="{v}"' for k, v in labels.items()]
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        series, _, value = line.rpartition(" ")
        metric, _, label_text = series.partition("{")
        if metric == name and all(w in label_text for w in wanted):
            total += float(value)
    return total


def wait_ready(endpoint: str, bucket: str, timeout: float) -> float:
    """Create ``bucket`` and store a probe object in it, retrying until ``timeout``; the
    seconds it took, or TimeoutError. The gateway answers before the master has a volume
    server to write to: only a stored object says the store is up."""
    t0 = time.monotonic()
    deadline = t0 + timeout
    last = "no answer"
    while time.monotonic() < deadline:
        try:
            made = request("PUT", f"{endpoint}/{bucket}", timeout=5)
            if made.status in (200, 409):  # 409: it exists already
                probe = request("PUT", f"{endpoint}/{bucket}/.ready", b"ready", timeout=5)
                if probe.status == 200:
                    return time.monotonic() - t0
                last = f"probe object: HTTP {probe.status}"
            else:
                last = f"bucket: HTTP {made.status}"
        except OSError as exc:
            last = str(exc)
        time.sleep(0.1)
    raise TimeoutError(f"{endpoint} not ready in {timeout:g} s ({last})")


def put_objects(endpoint: str, bucket: str, keys: Sequence[str], size: int,
                seed: int) -> list[dict]:
    records = []
    for key in keys:
        data = object_bytes(key, size, seed)
        reply = request("PUT", f"{endpoint}/{bucket}/{key}", data)
        records.append({"key": key, "status": reply.status, "bytes": len(data),
                        "sha256": sha256(data), "seconds": reply.seconds})
    return records


def get_objects(endpoint: str, bucket: str, keys: Sequence[str]) -> list[dict]:
    records = []
    for key in keys:
        reply = request("GET", f"{endpoint}/{bucket}/{key}")
        record = asdict(reply)
        del record["body"]
        records.append({"key": key, **record, "bytes": len(reply.body),
                        "sha256": sha256(reply.body)})
    return records


def read_load(endpoint: str, bucket: str, picker: KeyPicker, seconds: float) -> dict:
    """Read objects one after the other (keys from ``picker``) for ``seconds``: reads
    and bytes of the 200 replies (an error's body is not an object), errors, and the
    wall-clock ``start`` and ``end`` (seconds since the epoch), so that several readers'
    aggregate throughput is taken over the span from the first start to the last end."""
    reads = errors = size = 0
    start = time.time()
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        try:
            reply = request("GET", f"{endpoint}/{bucket}/{key_name(picker.pick())}")
        except OSError:
            errors += 1
            continue
        if reply.status == 200:
            reads += 1
            size += len(reply.body)
        else:
            errors += 1
    return {"reads": reads, "errors": errors, "bytes": size, "start": start,
            "end": time.time()}


def aggregate_mbps(loads: Sequence[dict]) -> float:
    """Aggregate Mb/s of readers that ran at about the same time (``read_load``'s
    records): all their bytes over the span from the first start to the last end, not
    over one reader's own time (readers start one after the other).

    >>> aggregate_mbps([{"bytes": 1_000_000, "start": 10.0, "end": 12.0},
    ...                 {"bytes": 1_000_000, "start": 11.0, "end": 14.0}])
    4.0
    >>> aggregate_mbps([])
    0.0
    """
    if not loads:
        return 0.0
    span = max(g["end"] for g in loads) - min(g["start"] for g in loads)
    return round(sum(g["bytes"] for g in loads) * 8 / 1e6 / span, 2) if span > 0 else 0.0


def run_in(host: Host, *args: str, timeout: float = 60.0) -> list[dict]:
    """Run this client inside ``host`` (``command`` and its arguments, as on the command
    line) and return what it printed; HostError with its stderr if it failed."""
    done = subprocess.run(host.argv([*CLIENT, *args]), capture_output=True, text=True,
                          timeout=timeout, env=python_env())
    if done.returncode:
        raise HostError(f"{host.name}: s3 {args[0]}: {done.stderr.strip()[-300:]}")
    return [json.loads(line) for line in done.stdout.splitlines()]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testbed.storage.s3")
    sub = parser.add_subparsers(dest="command", required=True)
    ready = sub.add_parser("ready")
    ready.add_argument("endpoint")
    ready.add_argument("bucket")
    ready.add_argument("--timeout", type=flag(0, 86400), default=60.0)
    put = sub.add_parser("put")
    put.add_argument("endpoint")
    put.add_argument("bucket")
    put.add_argument("keys", nargs="+")
    put.add_argument("--size", type=flag(0, 2**40, integer=True), required=True)
    put.add_argument("--seed", type=flag(0, 2**63 - 1, integer=True), default=1)
    get = sub.add_parser("get")
    get.add_argument("endpoint")
    get.add_argument("bucket")
    get.add_argument("keys", nargs="+")
    load = sub.add_parser("load")
    load.add_argument("endpoint")
    load.add_argument("bucket")
    load.add_argument("--seconds", type=flag(0, 86400), required=True)
    load.add_argument("--keys", type=flag(0, 10**9, integer=True), required=True)
    load.add_argument("--zipf", type=flag(0, 100), default=1.0)
    load.add_argument("--seed", type=flag(0, 2**63 - 1, integer=True), default=1)
    metric = sub.add_parser("metric")
    metric.add_argument("url")
    metric.add_argument("name")
    metric.add_argument("labels", nargs="*", help="LABEL=VALUE")
    args = parser.parse_args(argv)

    if args.command == "ready":
        try:
            records = [{"seconds": wait_ready(args.endpoint, args.bucket, args.timeout)}]
        except TimeoutError as exc:
            print(exc, file=sys.stderr)
            return 1
    elif args.command == "put":
        records = put_objects(args.endpoint, args.bucket, args.keys, args.size, args.seed)
    elif args.command == "get":
        records = get_objects(args.endpoint, args.bucket, args.keys)
    elif args.command == "load":
        picker = KeyPicker(args.keys, args.zipf, args.seed)
        records = [read_load(args.endpoint, args.bucket, picker, args.seconds)]
    else:
        page = request("GET", args.url).body.decode()
        labels = dict(item.split("=", 1) for item in args.labels)
        records = [{"value": metric_total(page, args.name, **labels)}]
    for record in records:
        print(json.dumps(record))
    return 0


if __name__ == "__main__":
    sys.exit(main())
