"""Loopback ports for servers that are told their port rather than binding port 0 themselves
(redis-server, nginx, `serve --workers`, a server that must come back on the same port), handed
out so that nothing else takes one before the server binds it (docs/decisions.md §184).

A port the kernel picked for a bind to port 0 and that was then closed is back in the kernel's
ephemeral range: any outgoing connection or bind to port 0, of any process, may take it before the
server binds it. The server then fails to start, or a client reaches another process's server.
Ports are therefore taken from just below that range (Linux: `net.ipv4.ip_local_port_range`,
32768-60999 by default), where the kernel never picks one. Each process walks the block from its
own starting point (from its PID) and skips a port something is bound to.
"""

from __future__ import annotations

import itertools
import os
import socket
from pathlib import Path

SPAN = 10_000
"""How many ports below the ephemeral range are handed out."""
LOWEST = 10_000
"""No port below this is handed out (where the ephemeral range starts lower, port 0 is used)."""
EPHEMERAL = Path("/proc/sys/net/ipv4/ip_local_port_range")


def _block() -> range | None:
    try:
        first_ephemeral = int(EPHEMERAL.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    if first_ephemeral - SPAN < LOWEST:
        return None
    return range(first_ephemeral - SPAN, first_ephemeral)


_BLOCK = _block()
_walk = itertools.count((os.getpid() * 7919) % SPAN)


def _bindable(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A loopback port nothing is bound to now, and that the kernel never hands out by itself
    (below its ephemeral range); a port the kernel chose where it keeps no such range."""
    if _BLOCK is not None:
        for _ in range(SPAN):
            port = _BLOCK[next(_walk) % SPAN]
            if _bindable(port):
                return port
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
