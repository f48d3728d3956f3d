"""`proxy.bench.ports`: the ports handed to servers told their port come from below the kernel's
ephemeral range, and one something is bound to is skipped (docs/decisions.md §184)."""

from __future__ import annotations

import itertools
import socket
from pathlib import Path

from proxy.bench import ports


def _first_ephemeral() -> int:
    return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])


def test_ports_are_the_ten_thousand_below_the_kernels_ephemeral_range():
    first = _first_ephemeral()
    assert ports._BLOCK == range(first - 10_000, first)


def test_a_port_something_is_bound_to_is_skipped(monkeypatch):
    block = ports._BLOCK
    assert block is not None
    start = next(i for i in range(ports.SPAN - 1) if ports._bindable(block[i]) and ports._bindable(block[i + 1]))
    monkeypatch.setattr(ports, "_walk", itertools.count(start))
    with socket.socket() as held:
        held.bind(("127.0.0.1", block[start]))
        assert ports.free_port() == block[start + 1]
