"""A connection accepted in the moment a restart's old process stops accepting is answered, not
dropped (proxy/connections.py `BoundedSite.stop`, docs/decisions.md §179).

asyncio accepts a connection in one loop turn and makes its transport in a task that runs a turn
later; `Server.close()` in between makes that task fail (CPython gh-109564, open in every
version), and the accepted socket, its client's request unread, closes when it is collected: the
client gets a reset. The old process of a restart meets that window when the new process's "ready"
and a connection arrive in the same turn: the ready pipe's callback runs first and the stop is
queued before the accepted connection's task. Here both arrive that way for certain (epoll reports
descriptors in the order they became ready), with the listening socket held open elsewhere as the
new process holds it, and the client must get its answer.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import socket

from support import TEST_KEY

from proxy.app import start
from proxy.config import load
from translators.sealing import Keyring

REQUEST = b"GET /healthz HTTP/1.1\r\nHost: proxy\r\n\r\n"


async def test_a_connection_accepted_in_the_turn_the_new_process_says_ready_gets_its_answer(fast_modern_upstream_url, tmp_path):
    settings = load(
        None,
        {"listen": "127.0.0.1:0", "upstream": [{"name": "main", "url": fast_modern_upstream_url}], "state_dir": str(tmp_path)},
    )
    running = await start(settings, keyring=Keyring(TEST_KEY))
    loop = asyncio.get_running_loop()
    ready_read, ready_write = os.pipe()
    told = asyncio.Event()
    loop.add_reader(ready_read, told.set)  # as `Restarter._heard` on the new process's "ready"

    async def old_process() -> None:
        await told.wait()
        await running.hand_over(0.5)

    stopping = asyncio.ensure_future(old_process())
    await asyncio.sleep(0)  # waiting for the word
    held = os.dup(running.listening_fd())  # the new process's copy of the listening socket
    client = socket.socket()
    try:
        os.write(ready_write, b"ready\n")  # ready first, then the connection and its request: one turn
        client.connect(("127.0.0.1", running.runner.addresses[0][1]))
        client.sendall(REQUEST)
        client.setblocking(False)
        await stopping
        gc.collect()  # a socket dropped by a failed task closes now, not at some later collection
        answer = b""
        async with asyncio.timeout(10):
            while chunk := await loop.sock_recv(client, 65536):
                answer += chunk
    finally:
        loop.remove_reader(ready_read)
        for fd in (ready_read, ready_write, held):
            os.close(fd)
        client.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    assert (head.split(b"\r\n")[0], json.loads(body)) == (b"HTTP/1.1 200 OK", {"status": "ok"})
