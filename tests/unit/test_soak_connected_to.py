"""`proxy.bench.targets.connected_to`: the soak counts a failure as "after the kill" only once no
connection to the killed replica is left open on the side that did not close it (nginx's
kept-alive connections), read from the kernel's own table."""

from __future__ import annotations

import socket

from proxy.bench.targets import connected_to


def test_a_connection_counts_until_the_side_left_open_closes_it_too():
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    client = socket.create_connection(("127.0.0.1", port))
    accepted, _ = server.accept()
    seen = [connected_to(port)]  # established
    accepted.close()
    server.close()  # the replica gone: its sockets closed, the client's end left open (CLOSE_WAIT)
    seen.append(connected_to(port))
    client.close()  # the balancer saw it end
    seen.append(connected_to(port))
    assert seen == [True, True, False]
