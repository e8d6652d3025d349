"""Mininet's own CLI, served by the supervisor (which holds the Mininet object) over the
lab's Unix socket; ``testbed cli LAB`` relays a terminal to it.

The session is Mininet's :class:`mininet.cli.CLI` with the socket as its input and
output: ``pingall``, ``n0 ping -c1 n3``, ``iperf n0 n3``, ``link p0l0 p0s0 down``,
``dpctl dump-flows``, ``py net`` work as in ``mn``. Nodes answer to their short names
(``n0``, ``p0l0``) as well as their full ones (``tb1a2bn0``). One session at a time:
the CLI drives the nodes' shells, which take one command at a time. A byte ``0x03``
from the client (its Ctrl-C) reaches a running command as an interrupt, as Mininet
forwards typed keys to the node's terminal; when the client goes away, a running
command is interrupted and the session ends.
"""

from __future__ import annotations

import re
import socket
import threading
import time
from pathlib import Path

INTERRUPT = "\x03"


class SocketIO:
    r"""A socket as the file Mininet's CLI reads and writes (unbuffered, so that the
    ``poll`` on its descriptor says the truth).

    What it writes speaks of the nodes by their short names, as the user types them and
    every other command shows them: the run prefix goes (``tb1a2bn0 -> tb1a2bn3`` reads
    ``n0 -> n3``).

    >>> a, b = socket.socketpair()
    >>> SocketIO(a, "tb1a2b").write("tb1a2bn0 -> tb1a2bn3 X\n")
    23
    >>> b.recv(100)
    b'n0 -> n3 X\n'
    """

    def __init__(self, conn: socket.socket, prefix: str = "") -> None:
        self.conn = conn
        self.closed = False
        self.short = re.compile(rf"\b{re.escape(prefix)}(?=[a-z0-9])") if prefix else None

    def fileno(self) -> int:
        return self.conn.fileno()

    def read(self, n: int = 1) -> str:
        """One key for a running command; an interrupt once the client has gone."""
        try:
            data = self.conn.recv(n)
        except OSError:
            data = b""
        if not data:
            self.closed = True
            return INTERRUPT
        return data.decode(errors="replace")

    def readline(self) -> str:
        """A command line ("" at the end of the session); interrupts typed at the prompt
        are dropped."""
        if self.closed:
            return ""
        line = bytearray()
        while not line.endswith(b"\n"):
            try:
                byte = self.conn.recv(1)
            except OSError:
                byte = b""
            if not byte:
                self.closed = True
                break
            line += byte
        text = line.decode(errors="replace").replace(INTERRUPT, "")
        if self.closed and not text.strip():
            return ""
        return text or "\n"

    def write(self, text: str) -> int:
        shown = self.short.sub("", text) if self.short else text
        try:
            self.conn.sendall(shown.encode())
        except OSError:
            self.closed = True
        return len(text)

    def flush(self) -> None:
        return None


def add_short_names(net, prefix: str) -> None:
    """Let the CLI find every node by its short name too (``n0`` for ``tb1a2bn0``).

    Only the name lookup learns them: listing the nodes (``nodes``, ``pingall``) still
    goes over each node once, by its full name (which :class:`SocketIO` shows short).
    """
    for node in list(net.hosts) + list(net.switches):
        if node.name.startswith(prefix):
            net.nameToNode.setdefault(node.name[len(prefix):], node)


def sync_addresses(net, spec) -> None:
    """Tell Mininet's interface objects the addresses the fabric configured (it set them
    with its own commands), so ``pingall`` and ``iperf`` know where to send."""
    for host in spec.hosts:
        node = net.nameToNode.get(host.name)
        if node is None:  # on another machine (a lab over several)
            continue
        for intf in host.interfaces:
            mn_intf = node.intf(intf.name)
            mn_intf.ip, mn_intf.prefixLen = intf.ip, intf.prefixlen


def listening(pid: int, port: int, udp: bool) -> bool:
    """Whether a socket listens on ``port`` in the network namespace of process ``pid``
    (its ``/proc/PID/net`` tables are that namespace's: no shell of the node is needed,
    and the node's one shell is busy with the server)."""
    state = "07" if udp else "0A"  # UDP unconnected, TCP LISTEN
    for table in ("udp", "udp6") if udp else ("tcp", "tcp6"):
        try:
            lines = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[3] == state and int(fields[1].rsplit(":", 1)[1], 16) == port:
                return True
    return False


def iperf(net, hosts=None, l4Type: str = "TCP", udpBw: str = "10M", fmt=None,
          seconds: int = 5, port: int = 5001) -> list[str]:
    """Mininet's ``iperf``/``iperfudp`` (the CLI calls ``net.iperf`` with these arguments),
    made to finish with iperf 2.1 (Debian 12, Ubuntu 24.04).

    Mininet 2.3 waits for the server's port with a telnet connection and then for two
    ``/sec`` reports from the server, one of them for the telnet connection; iperf since
    2.0.14 reports no empty connection, so the wait never ends (mininet/mininet#1060).
    Here the port is awaited with ``ss`` in the server, one report is enough, and the
    wait is bounded. Nor does it ``killall -9 iperf`` first as Mininet does: its hosts
    share the machine's process table, so that would kill every iperf on the host.
    """
    from mininet.log import output

    client, server = hosts or (net.hosts[0], net.hosts[-1])
    output(f"*** Iperf: testing {l4Type} bandwidth between {client} and {server}\n")
    if l4Type not in ("TCP", "UDP"):
        raise ValueError(f"Unexpected l4 type: {l4Type}")
    udp = l4Type == "UDP"
    args = f"iperf -p {port} " + ("-u " if udp else "") + (f"-f {fmt} " if fmt else "")
    server.sendCmd(args + "-s")
    servout = ""
    try:
        deadline = time.monotonic() + 5
        while not listening(server.pid, port, udp):
            if time.monotonic() > deadline:
                raise RuntimeError(f"iperf did not listen on port {port} of {server}")
            time.sleep(0.1)
        cliout = client.cmd(args + f"-t {seconds} -c {server.IP()} "
                            + (f"-b {udpBw}" if udp else ""))
        deadline = time.monotonic() + 10
        while "/sec" not in servout and time.monotonic() < deadline:
            servout += server.monitor(timeoutms=500)
    finally:
        server.sendInt()
        servout += server.waitOutput()
    result = [net._parseIperf(servout), net._parseIperf(cliout)]
    if udp:
        result.insert(0, udpBw)
    output(f"*** Results: {result}\n")
    return result


class Sessions:
    """Serves one CLI session at a time on a Mininet object."""

    def __init__(self, net, name: str, prefix: str = "") -> None:
        self.net = net
        self.name = name
        self.prefix = prefix
        self.lock = threading.Lock()
        net.iperf = lambda *args, **kwargs: iperf(net, *args, **kwargs)

    def serve(self, conn: socket.socket, banner: str) -> None:
        io = SocketIO(conn, self.prefix)
        if not self.lock.acquire(blocking=False):
            io.write("testbed: another CLI session is open on this lab; one at a time\n")
            return
        try:
            self._run(io, banner)
        finally:
            self.lock.release()

    def _run(self, io: SocketIO, banner: str) -> None:
        from mininet.cli import CLI
        from mininet.log import lg, setLogLevel

        class LabCLI(CLI):
            prompt = f"mininet:{self.name}> "
            use_rawinput = False  # read the socket, not the supervisor's stdin
            readlineInited = True  # no ~/.mininet_history in the supervisor

        stream, level = lg.ch.stream, lg.getEffectiveLevel()
        lg.ch.stream = io
        setLogLevel("output")
        try:
            io.write(banner)
            LabCLI(self.net, stdin=io, stdout=io)
        finally:
            lg.ch.stream = stream
            lg.setLevel(level)
            lg.ch.setLevel(level)
