"""``python -m traffic training``: one rank of a synchronized ring all-reduce.

Each iteration is a compute phase (idle for ``compute_ms``) followed by the
2*(n-1) steps of a ring all-reduce.  In every step this rank sends a chunk
(ceil(bytes/n) payload bytes, split evenly over its channels) to rank r+1 as
RoCEv2 SEND_FIRST/MIDDLE/LAST packets, each channel paced at ``rate_mbps``,
then waits until the chunk of the same step from rank r-1 is complete on
every channel, or ``step_timeout_ms`` passes (missing packets count as lost).
The BTH dest QP carries a step sequence number (iteration*steps+step mod
2**24), so late packets of an old step are not mistaken for new ones and
early packets of a future step are kept for it.  Received traffic arrives on
ordinary UDP sockets bound to (channel ip, 4791), drained while waiting.
One JSON line per iteration goes to ``--out``; a JSON summary to stdout.
A timed run (``--duration``) is ended by one rank, the lowest of its ring, which sends
an end-of-run message (BTH opcode 0xC0, from the manufacturer-specific range) that
goes round the ring: so every rank runs the same iterations, and none waits out its
time-outs for an iteration its peers never started.

Beyond the ring: ``send_to`` in the config gives any permutation of destinations
(stride and random elephant patterns, traffic/patterns.py); with ``ecn`` the senders
mark ECT(0) and a receiver answers CE-marked packets with CNPs (at most one per flow per
``cnp_interval_us``); with ``dcqcn.enabled`` each channel's pacing follows a DCQCN
reaction point (traffic/dcqcn.py); with ``spray`` the UDP source port rotates per packet
and receivers place packets by PSN (traffic/reorder.py), so reordering is not loss. With
``qps`` N > 1 each channel is N queue pairs, as RoCE stacks open them for ECMP entropy
(NCCL_IB_QPS_PER_CONNECTION): the packets of a message go round-robin over the N QPs, as
a NIC's QP arbiter interleaves messages posted on them at once, each QP its own UDP source
port (hashed independently); receivers place by PSN as for spraying.
"""

from __future__ import annotations

import json
import logging
import math
import selectors
import signal
import socket
import sys
import time
from pathlib import Path
from typing import Any, TextIO

from traffic import roce
from traffic.dcqcn import CnpPacer, ReactionPoint
from traffic.multipath import live_channels
from traffic.patterns import sources
from traffic.rawsock import RawSender, TokenBucket
from traffic.reorder import MessageAssembly
from traffic.ring import (
    EXIT_USAGE,
    Config,
    IterStats,
    UsageError,
    await_start,
    build_parser,
    cycle,
    load_config,
    opcode_for,
    split_chunk,
    totals,
)

log = logging.getLogger("traffic.training")

SPORT_BASE = 49152
RCVBUF_BYTES = 32 * 1024 * 1024
#: a RoCE NIC's transmit buffer: the send buffer of a channel's data socket (the kernel
#: doubles it). A send blocks once this much of the channel's frames wait in the host's
#: NIC queue, as a QP stops when its NIC is paused; with the 8 MB of an ordinary sender,
#: a paused NIC's class queue took up to its whole 320 KB, the rank "finished" sending
#: its step while that still drained behind the pause, and the receiver's step time-out
#: counted frames that were only late as lost
NIC_TX_BYTES = 32 * 1024
SO_RCVBUFFORCE = getattr(socket, "SO_RCVBUFFORCE", 33)
SEQ_MASK = 0xFFFFFF
SEQ_HALF = 0x800000
BURST_S = 0.001
LAST_OPCODES = (roce.SEND_LAST, roce.SEND_ONLY)
FIRST_OPCODES = (roce.SEND_FIRST, roce.SEND_ONLY)
#: the lab's end-of-run message, from the manufacturer-specific opcodes (0xC0-0xFF) the
#: InfiniBand transport keeps free: "I start no step from the one in DestQP on"
END_OPCODE = 0xC0
END_COPIES = 3  # sent on every channel this many times: one lost copy must not hang a peer
IP_RECVTOS = getattr(socket, "IP_RECVTOS", 13)
TOS_CMSG_SPACE = socket.CMSG_SPACE(4)
QPN_BASE = 0x100  # a sender's own QP number: QPN_BASE + rank * 64 + channel (CNPs go there)
TRACE_EVERY_S = 0.005  # DCQCN rate samples: at most one per 5 ms, plus one per CNP


def data_sender(iface: str) -> RawSender:
    """A channel's data socket: a send blocks while ``NIC_TX_BYTES`` wait in the NIC."""
    return RawSender(iface, sndbuf=NIC_TX_BYTES)


class RingRank:
    """One rank: its send sockets, receive sockets and the iteration loop."""

    def __init__(self, cfg: Config, rank: int) -> None:
        n = len(cfg.ranks)
        if not 0 <= rank < n:
            raise UsageError(f"argument --rank: must be 0..{n - 1}, got {rank}")
        self.cfg = cfg
        #: how many source ports a channel's packets rotate over (1: one flow): spray's
        #: ports or the queue pairs
        self.rotation = cfg.spray_ports if cfg.spray else cfg.qps
        self.rank = rank
        self.n = n
        self.steps = 2 * (n - 1)
        self.chunk = math.ceil(cfg.bytes / n)
        self.me = cfg.ranks[rank]
        dest = cfg.send_to or [(i + 1) % n for i in range(n)]
        self.succ_rank, self.pred_rank = dest[rank], sources(dest)[rank]
        #: the rank that ends a timed run for its cycle of the permutation (its lowest):
        #: ranks that read the clock each would disagree when the end falls between their
        #: iterations' ends, and the ones that started one more iteration wait out their
        #: time-outs for data that never comes, counted as lost
        self.leader = min(cycle(dest, rank))
        #: the first step the predecessor will not send (its end-of-run message), if any
        self.end_seq: int | None = None
        self.succ = cfg.ranks[self.succ_rank]
        self.pred = cfg.ranks[self.pred_rank]
        self.nch = len(self.me)
        self.plan = split_chunk(self.chunk, self.nch, cfg.payload)
        self.expected = [len(p) for p in self.plan]
        self.channels_used = list(range(self.nch))
        self.send_errors = 0
        self.stop_requested = False
        self.stats = IterStats()
        self.expect_seq = 0
        self.pending: dict[int, list[MessageAssembly]] = {}
        self.psn = [0] * self.nch
        self.enobufs = 0
        self._rxbuf = bytearray(65536)
        self._rxmv = memoryview(self._rxbuf)
        self.sel = selectors.DefaultSelector()
        self.rx_socks: list[socket.socket] = []
        self.senders: list[RawSender] = []
        #: CNPs leave by a socket of their own: a paused data class never holds them up
        self.cnp_senders: list[RawSender] = []
        try:
            self._open()
        except BaseException:
            self.close()
            raise
        rate = cfg.rate_mbps * 1e6
        self.max_bits = (cfg.payload + roce.OVERHEAD) * 8
        self.buckets = [TokenBucket(rate, max(self.max_bits, rate * BURST_S)) for _ in self.me]
        now = time.perf_counter()
        self.clock0 = (now, time.time())
        self.rps = ([ReactionPoint(cfg.dcqcn, cfg.rate_mbps, now) for _ in self.me]
                    if cfg.dcqcn.enabled else [])
        self.pacer = CnpPacer(cfg.cnp_interval_us)
        self.trace: list[list[float]] = []
        self._last_trace = -math.inf

    def _open(self) -> None:
        """Bind receive sockets first (peers may start any time), then senders and templates."""
        for k, ch in enumerate(self.me):
            sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            self.rx_socks.append(sock)
            try:
                sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, RCVBUF_BYTES)
            except PermissionError:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF_BYTES)
            if self.cfg.ecn:
                sock.setsockopt(socket.IPPROTO_IP, IP_RECVTOS, 1)  # TOS byte as ancillary data
            sock.bind((ch.ip, roce.ROCE_PORT))
            sock.setblocking(False)
            self.sel.register(sock, selectors.EVENT_READ, k)
        self.pred_ips = [ch.ip for ch in self.pred]
        self.succ_ips = [ch.ip for ch in self.succ]
        self.cnps: list[bytes] = []
        self.templates: list[dict[int, roce.FrameTemplate]] = []
        for k, ch in enumerate(self.me):
            self.senders.append(data_sender(ch.iface))
            self.cnp_senders.append(RawSender(ch.iface))
            back = self.pred[k]
            self.cnps.append(roce.cnp_frame(
                src_mac=ch.mac, dst_mac=ch.gw_mac or back.mac, src_ip=ch.ip, dst_ip=back.ip,
                dqpn=QPN_BASE + self.pred_rank * 64 + k, sport=self._sport(k)))
            self.templates.append({})
            for size in set(self.plan[k]):
                self._template(k, size)

    def _template(self, k: int, size: int) -> roce.FrameTemplate:
        """Channel ``k``'s frame template for ``size``-byte payloads (built once)."""
        tmpl = self.templates[k].get(size)
        if tmpl is None:
            ch, peer = self.me[k], self.succ[k]
            tmpl = self.templates[k][size] = roce.FrameTemplate(
                src_mac=ch.mac,
                dst_mac=ch.gw_mac or peer.mac,
                src_ip=ch.ip,
                dst_ip=peer.ip,
                sport=self._sport(k),
                dqpn=0,
                payload_len=size,
                ecn=roce.ECN_ECT0 if self.cfg.ecn else roce.ECN_NOT_ECT,
                dscp=roce.DATA_DSCP,
            )
        return tmpl

    def _choose_channels(self) -> None:
        """Multipath: split the chunk over the channels that have carrier now."""
        alive = live_channels([ch.iface for ch in self.me])
        if alive == self.channels_used:
            return
        self.channels_used = alive
        split = split_chunk(self.chunk, len(alive), self.cfg.payload)
        self.plan = [[] for _ in self.me]
        for k, sizes in zip(alive, split, strict=True):
            self.plan[k] = sizes
        self.expected = [len(p) for p in self.plan]

    def _sport(self, k: int, psn: int = 0) -> int:
        """UDP source port of channel ``k``'s packet ``psn``: with spray it rotates over
        ``spray_ports``, with N queue pairs over the N QPs' ports (round-robin)."""
        ports = self.rotation
        return SPORT_BASE + ((self.rank * 64 + k) * ports + psn % ports) % 16384

    def close(self) -> None:
        for sock in self.rx_socks:
            sock.close()
        for sender in (*self.senders, *self.cnp_senders):
            sender.close()
        self.sel.close()

    # --- receive -------------------------------------------------------------

    def drain(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for traffic and consume all that is queued."""
        for key, _ in self.sel.select(max(timeout, 0.0)):
            sock: socket.socket = key.fileobj  # type: ignore[assignment]
            k: int = key.data
            local = (self.me[k].ip, roce.ROCE_PORT)
            tos = 0
            while True:
                try:
                    if self.cfg.ecn:
                        nbytes, anc, _, addr = sock.recvmsg_into([self._rxbuf], TOS_CMSG_SPACE)
                        tos = anc[0][2][0] if anc else 0
                    else:
                        nbytes, addr = sock.recvfrom_into(self._rxbuf)
                except BlockingIOError:
                    break
                self._on_packet(k, self._rxmv[:nbytes], addr, local, tos)

    def _on_packet(self, k: int, data: memoryview, addr: tuple[str, int], local: tuple,
                   tos: int = 0) -> None:
        st = self.stats
        if len(data) >= roce.BTH_LEN and data[0] == roce.CNP_OPCODE \
                and addr[0] == self.succ_ips[k]:
            self._on_cnp(k)
            return
        if addr[0] != self.pred_ips[k] or len(data) < roce.BTH_LEN + roce.ICRC_LEN:
            st.foreign_packets += 1
            return
        bth = roce.parse(data, addr, local)
        if not bth.icrc_ok:
            st.icrc_errors += 1
            return
        if bth.opcode == END_OPCODE:
            end = self._unwrap(bth.dqpn)
            self.end_seq = end if self.end_seq is None else min(self.end_seq, end)
            return
        if tos & 0b11 == roce.ECN_CE:
            st.ce_received += 1
            if self.pacer.allow(k, time.perf_counter()):
                self.cnp_senders[k].send(self.cnps[k])
                st.cnps_sent += 1
        delta = (bth.dqpn - self.expect_seq) & SEQ_MASK
        if delta >= SEQ_HALF:
            st.stale_packets += 1
            return
        seq = self.expect_seq + delta
        rx = self.pending.get(seq)
        if rx is None:
            rx = self.pending[seq] = [MessageAssembly(e) for e in self.expected]
        rx[k].add(bth.psn, first=bth.opcode in FIRST_OPCODES, last=bth.opcode in LAST_OPCODES,
                  nbytes=len(data) - roce.BTH_LEN - roce.ICRC_LEN)

    def _on_cnp(self, k: int) -> None:
        """A CNP for channel ``k``'s flow: the reaction point cuts that channel's rate."""
        self.stats.cnps_received += 1
        if self.rps:
            now = time.perf_counter()
            self.rps[k].on_cnp(now)
            self._follow_rate(now, force_trace=True)

    def _follow_rate(self, now: float, force_trace: bool = False) -> None:
        """Set every channel's pacing to its reaction point's rate; sample the trace."""
        for rp, bucket in zip(self.rps, self.buckets, strict=True):
            rp.advance(now)
            bucket.refill(now)
            bucket.rate = rp.rate_mbps * 1e6
            bucket.burst = max(self.max_bits, bucket.rate * BURST_S)
        if force_trace or now - self._last_trace >= TRACE_EVERY_S:
            self._last_trace = now
            wall = self.clock0[1] + (now - self.clock0[0])
            self.trace.append([round(wall, 4), *(round(rp.rate_mbps, 3) for rp in self.rps)])

    def _unwrap(self, dqpn: int) -> int:
        """The step number a 24-bit DestQP stands for, the one nearest the expected step."""
        delta = (dqpn - self.expect_seq) & SEQ_MASK
        return self.expect_seq + delta - (SEQ_MASK + 1 if delta >= SEQ_HALF else 0)

    def ended(self, seq: int) -> bool:
        """The predecessor has said it sends no step from ``seq`` on."""
        return self.end_seq is not None and seq >= self.end_seq

    def _complete(self, seq: int) -> bool:
        rx = self.pending.get(seq)
        if rx is None:
            return all(e == 0 for e in self.expected)
        if self.cfg.multipath:  # the sender may have split over other channels than ours
            return sum(m.bytes for m in rx) >= self.chunk
        return all(m.complete for m in rx)

    # --- send ----------------------------------------------------------------

    def _send_step(self, seq: int) -> None:
        """Send this step's chunk on all channels, interleaved and paced per channel."""
        dqpn = seq & SEQ_MASK
        idx = [0] * self.nch
        active = [k for k in range(self.nch) if self.plan[k]]
        clock = time.perf_counter
        st = self.stats
        rps = self.rps
        rotate = self.rotation > 1
        while active and not self.stop_requested:
            now = clock()
            if rps:
                self._follow_rate(now)
            tokens = [b.refill(now) for b in self.buckets]
            progressed = True
            while progressed:
                progressed = False
                for k in active:
                    i = idx[k]
                    sizes = self.plan[k]
                    if i >= len(sizes):
                        continue
                    size = sizes[i]
                    tmpl = self._template(k, size)
                    cost = len(tmpl) * 8
                    if tokens[k] < cost:
                        continue
                    if rotate:
                        tmpl.set_sport(self._sport(k, self.psn[k]))
                    frame = tmpl.frame_into(self.psn[k], opcode_for(i, len(sizes)), dqpn)
                    try:
                        self.senders[k].send(frame)
                    except OSError:  # the NIC went down (ENETDOWN, ENXIO): the rest is lost
                        self.send_errors += len(sizes) - i
                        idx[k] = len(sizes)
                        progressed = True
                        continue
                    self.psn[k] = (self.psn[k] + 1) & roce.PSN_MASK
                    tokens[k] -= cost
                    idx[k] = i + 1
                    st.packets_sent += 1
                    st.bytes_sent += size
                    if rps:
                        rps[k].on_sent(len(tmpl), now)
                    progressed = True
            wait = math.inf
            for k, b in enumerate(self.buckets):
                b.tokens = tokens[k]
            active = [k for k in active if idx[k] < len(self.plan[k])]
            for k in active:
                b = self.buckets[k]
                cost = len(self._template(k, self.plan[k][idx[k]])) * 8
                wait = min(wait, b.wait_for(max(cost, b.burst / 2)))
            self.drain(0.0 if wait == math.inf else wait)

    # --- iterations ------------------------------------------------------------

    def _wait_until(self, deadline: float, seq: int | None = None) -> bool:
        """Drain receives until ``deadline`` (perf_counter) or step ``seq`` completes."""
        while not self.stop_requested:
            if seq is not None and self._complete(seq):
                return True
            if seq is not None and self.ended(seq):
                return False
            left = deadline - time.perf_counter()
            if left <= 0:
                return False
            self.drain(min(left, 0.05))
        return False

    def _account(self, seq: int) -> None:
        rx = self.pending.pop(seq, None) or [MessageAssembly(e) for e in self.expected]
        st = self.stats
        for m in rx:
            st.packets_received += m.packets
            st.bytes_received += m.bytes
            st.reordered_packets += m.reordered
            st.duplicate_packets += m.duplicates
            if not self.cfg.multipath:
                st.packets_lost += m.missing
        if self.cfg.multipath:  # per channel counts depend on the sender's split
            st.packets_lost += max(0, sum(self.expected) - sum(m.packets for m in rx))

    def run_iteration(self, it: int) -> dict[str, Any] | None:
        """Run compute then the ring steps of iteration ``it``; return its record, or None
        when the predecessor ended the run before it (the iteration is not one)."""
        self.stats = IterStats()
        self.trace = []
        self.send_errors = 0
        wall_start = time.time()
        t0 = time.perf_counter()
        self.expect_seq = it * self.steps
        self._wait_until(t0 + self.cfg.compute_ms / 1000)
        if self.ended(self.expect_seq):
            return None
        t1 = time.perf_counter()
        timeout = self.cfg.step_timeout_ms / 1000
        done_steps = 0
        send_s = 0.0  # handing the chunks to the NICs: long when a NIC is slow
        hurt_steps: list[list] = []  # [wall time the step began, packets lost, time-outs]
        for step in range(self.steps):
            if self.stop_requested:
                break
            seq = it * self.steps + step
            self.expect_seq = seq
            if self.cfg.multipath:
                self._choose_channels()
            began = wall_start + (time.perf_counter() - t0)
            lost_before, timeouts_before = self.stats.packets_lost, self.stats.timeouts
            t_send = time.perf_counter()
            self._send_step(seq)
            send_s += time.perf_counter() - t_send
            if not self._wait_until(time.perf_counter() + timeout, seq):
                if self.stop_requested:
                    break
                if self.ended(seq):
                    return None
                self.stats.timeouts += 1
            self._account(seq)
            done_steps += 1
            lost = self.stats.packets_lost - lost_before
            timeouts = self.stats.timeouts - timeouts_before
            if lost or timeouts:
                hurt_steps.append([round(began, 6), lost, timeouts])
        self.expect_seq = (it + 1) * self.steps
        for old in [s for s in self.pending if s < self.expect_seq]:
            self.stats.stale_packets += sum(r.packets for r in self.pending.pop(old))
        t2 = time.perf_counter()
        st = self.stats
        record: dict[str, Any] = {
            "rank": self.rank,
            "iteration": it,
            "start": round(wall_start, 6),
            "end": round(wall_start + (t2 - t0), 6),
            "iteration_ms": round((t2 - t0) * 1000, 3),
            "comm_ms": round((t2 - t1) * 1000, 3),
            "compute_ms": round((t1 - t0) * 1000, 3),
            "send_ms": round(send_s * 1000, 3),
            "bytes_sent": st.bytes_sent,
            "bytes_received": st.bytes_received,
            "packets_sent": st.packets_sent,
            "packets_received": st.packets_received,
            "packets_lost": st.packets_lost,
            "timeouts": st.timeouts,
            "icrc_errors": st.icrc_errors,
            "stale_packets": st.stale_packets,
            "foreign_packets": st.foreign_packets,
            "reordered_packets": st.reordered_packets,
            "duplicate_packets": st.duplicate_packets,
            "ce_received": st.ce_received,
            "cnps_sent": st.cnps_sent,
            "cnps_received": st.cnps_received,
            "send_to": self.succ_rank,
            "steps": done_steps,
            "complete": done_steps == self.steps,
            "channels": len(self.channels_used),
            "send_errors": self.send_errors,
            # when each hurt step began (its packets sent, its time-out started): what a
            # fault analysis attributes to the fault in force then
            "hurt_steps": hurt_steps,
        }
        if self.rps:
            record["rate_mbps"] = [round(rp.rate_mbps, 3) for rp in self.rps]
            record["rate_trace"] = self.trace
        return record

    def run(
        self,
        out: TextIO,
        iterations: int | None,
        duration: float | None,
        start_at: float | None,
        first: int = 0,
    ) -> dict[str, Any]:
        """Run iterations (numbered from ``first``) until a limit or a stop request;
        return the summary.

        With a ``duration`` only the cycle's leader reads the clock; it ends the run with
        an end-of-run message to its successor, and every rank that hears one from its
        predecessor stops before the step named and passes it on. So every rank of a
        cycle runs the same iterations. Should that message never come (every copy lost,
        or the leader gone), a rank past the end stops after an iteration that timed out.
        """
        if start_at is not None:
            lag = time.time() - start_at
            if lag > 0:
                log.warning("rank %d: --start-at is %.3f s in the past", self.rank, lag)
            else:
                self._wait_until(time.perf_counter() - lag)
        begin = time.time() if start_at is None else max(start_at, time.time())
        records: list[dict[str, Any]] = []
        it = first
        while not self.stop_requested:
            if iterations is not None and it - first >= iterations:
                break
            if self.ended(it * self.steps):
                break
            if duration is not None and time.time() >= begin + duration and (
                    self.rank == self.leader or (records and records[-1]["timeouts"])):
                break
            rec = self.run_iteration(it)
            if rec is None:
                break
            out.write(json.dumps(rec) + "\n")
            out.flush()
            records.append(rec)
            it += 1
        if not self.stop_requested:
            self._send_end(it * self.steps)
        return totals(records, rank=self.rank, ranks=self.n, channels=self.nch,
                      expected_bytes_per_iteration=self.steps * self.chunk,
                      enobufs=sum(s.enobufs for s in self.senders))

    def _send_end(self, seq: int) -> None:
        """Tell the successor, on every channel, that no step from ``seq`` on will come.
        Never blocks: a paused or dead NIC loses it (the successor then times out)."""
        for k in range(self.nch):
            # the channel's own frame, without payload: its addresses, port, class, ECN
            frame = self._template(k, 0).frame(self.psn[k], END_OPCODE, seq & SEQ_MASK)
            for _ in range(END_COPIES):
                try:
                    self.senders[k].sock.send(frame, socket.MSG_DONTWAIT)
                except OSError:
                    break


def main(argv: list[str]) -> int:
    """Run one rank; return the process exit code."""
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    try:
        args = build_parser(__doc__).parse_args(argv)
        if args.iterations is not None and args.iterations < 1:
            raise UsageError(f"argument --iterations: must be >= 1, got {args.iterations}")
        if args.duration is not None and args.duration <= 0:
            raise UsageError(f"argument --duration: must be > 0, got {args.duration}")
        if args.first_iteration < 0:
            raise UsageError(f"argument --first-iteration: must be >= 0, got "
                             f"{args.first_iteration}")
        cfg = load_config(args.config)
        out_path = Path(args.out)
        if not out_path.parent.is_dir():
            raise UsageError(f"argument --out: no such directory: {out_path.parent}")
        rank = RingRank(cfg, args.rank)
    except UsageError as exc:
        print(f"training: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as exc:
        print(f"training: error: opening sockets: {exc}", file=sys.stderr)
        return 1

    def request_stop(signum: int, _frame: object) -> None:
        rank.stop_requested = True

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    start_at = args.start_at
    try:
        if args.ready_file:
            Path(args.ready_file).touch()
        if args.start_file:
            start_at = await_start(Path(args.start_file), lambda: rank.stop_requested)
            if start_at is None and not rank.stop_requested:
                print(f"training: error: no start time in {args.start_file}", file=sys.stderr)
                return 1
        with out_path.open("a") as out:
            summary = rank.run(out, args.iterations, args.duration, start_at,
                               args.first_iteration)
    finally:
        rank.close()
    print(json.dumps(summary))
    return 0
