"""`mcp-tasks-proxy bench --instructions --parts`: what the parts of a relayed call cost, each
counted alone under valgrind's callgrind (docs/performance.md "Where a relayed call's
instructions go").

`bench --instructions` counts a whole call in the proxy process; this says where some of it goes.
Each part is one step every relayed `tools/call` of the relay row takes, run on bytes of the shape
that row's calls have (the bench's session client to the fast upstream: a sealed session id, the
headers aiohttp's client sends, a short JSON-RPC body and answer): `python -m proxy.bench.parts
PART N` runs it N times, and the part's figure is the difference between N = `REPEAT` and N = 0,
divided by `REPEAT` (the interpreter's start and the imports cancel out). Parts run alone are
warm in the caches, so each figure is at most what the part costs inside a call, and the parts
do not add up to the call: the rest is the entry, routing, the relay's own steps, the observer,
the event loop and the transports, spread over many smaller steps.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

REPEAT = 2000
"""Runs of a part counted (against none)."""

_BODY = json.dumps({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                    "params": {"name": "echo", "arguments": {"text": "hello"}}}, separators=(",", ":")).encode()
_SESSION = "v1." + "A" * 118  # a sealed session id's length
_REQUEST = (b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nAccept: application/json, text/event-stream\r\n"
            b"Content-Type: application/json\r\nMCP-Protocol-Version: 2025-11-25\r\nMcp-Session-Id: %s\r\n"
            b"Accept-Encoding: gzip, deflate\r\nUser-Agent: Python/3.11 aiohttp/3.14.5\r\nContent-Length: %d\r\n\r\n"
            % (_SESSION.encode(), len(_BODY))) + _BODY
_ANSWER = b'{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"hello"}]}}'
_UPSTREAM_ANSWER = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nMcp-Session-Id: 3f6c2a9e41d84b0c9a7e5d1f2b8c4e60\r\n"
                    b"Content-Length: %d\r\nDate: Sun, 06 Dec 2026 22:00:00 GMT\r\nServer: Python/3.11 aiohttp/3.14.5\r\n\r\n"
                    % len(_ANSWER)) + _ANSWER


def _request_head() -> Callable[[], object]:
    import asyncio

    from aiohttp.base_protocol import BaseProtocol
    from aiohttp.http_parser import HttpRequestParser
    from aiohttp.web_protocol import RequestPayloadError

    from proxy.lean_face import LeanTarget, whole_post

    targets = {"/mcp": LeanTarget("/mcp", None, None)}
    loop = asyncio.new_event_loop()
    parser = HttpRequestParser(BaseProtocol(loop), loop, 2**16, max_line_size=8190, max_field_size=8190, max_headers=128,
                               payload_exception=RequestPayloadError, auto_decompress=True)  # as a connection's (web_protocol)
    assert whole_post(parser.feed_data(_REQUEST), targets) is not None
    return lambda: whole_post(parser.feed_data(_REQUEST), targets)


def _json() -> Callable[[], object]:
    from translators import jsonrpc

    return lambda: jsonrpc.parse(_BODY)


def _upstream_head() -> Callable[[], object]:
    from proxy.upstream.lean import LeanPool

    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json",
               "MCP-Protocol-Version": "2025-11-25", "Mcp-Session-Id": "3f6c2a9e41d84b0c9a7e5d1f2b8c4e60"}
    pool = LeanPool()
    return lambda: pool.head("POST", "http://127.0.0.1:3000/mcp", dict(headers), len(_BODY))


def _upstream_answer() -> Callable[[], object]:
    from proxy.upstream.http1 import ResponseParser

    return lambda: ResponseParser().feed(_UPSTREAM_ANSWER)


def _answer() -> Callable[[], object]:
    from aiohttp import web

    from proxy.lean_face import finish_head, head_bytes

    def answer() -> bytes:
        response = web.Response(body=_ANSWER, content_type="application/json")
        finish_head(response, _ANSWER, True)
        return head_bytes(response)

    return answer


def _request_id() -> Callable[[], object]:
    from proxy.logs import request_id_from

    return lambda: request_id_from(None)


PARTS: dict[str, tuple[str, Callable[[], Callable[[], object]]]] = {
    "request-head": ("the client's request read by aiohttp's parser, its body stream included, and taken by the lean face "
                     "(proxy/lean_face.py whole_post)", _request_head),
    "json": ("its body parsed (translators.jsonrpc.parse)", _json),
    "upstream-head": ("the request head to the backend written, as the relay's pool keeps it (proxy/upstream/lean.py LeanPool.head): "
                      "a new headers dict each call, as the endpoint makes", _upstream_head),
    "upstream-answer": ("the backend's answer read (proxy/upstream/http1.py ResponseParser.feed)", _upstream_answer),
    "answer": ("the client's answer made: web.Response, its head completed and written (proxy/lean_face.py)", _answer),
    "request-id": ("a request id made (proxy/logs.py request_id_from)", _request_id),
}
"""Part → (what it is, what makes the function run `REPEAT` times)."""


def count(part: str, valgrind: str) -> float:
    """Instructions one run of `part` takes (module docstring). Raises `RuntimeError` when callgrind fails."""
    totals = []
    with tempfile.TemporaryDirectory(prefix="mcp-tasks-proxy-parts-") as workdir:
        for runs in (0, REPEAT):
            out = Path(workdir) / f"callgrind.{runs}"
            done = subprocess.run([valgrind, "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable, "-m",
                                   "proxy.bench.parts", part, str(runs)], stdin=subprocess.DEVNULL, capture_output=True, text=True)
            total = next((int(line.split()[1]) for line in (out.read_text().splitlines() if out.exists() else [])
                          if line.startswith(("summary:", "totals:"))), None)
            if done.returncode != 0 or total is None:
                raise RuntimeError(f"callgrind could not count the part {part!r}: {done.stderr[-500:]}")
            totals.append(total)
    return (totals[1] - totals[0]) / REPEAT


def table(valgrind: str, log: Callable[[str], None], names: list[str]) -> list[tuple[str, float, str]]:
    """Each part's of `names` (name, instructions per run, what it is), in their order."""
    rows = []
    for name in names:
        log(f"counting the part {name}")
        rows.append((name, count(name, valgrind), PARTS[name][0]))
    return rows


if __name__ == "__main__":  # python -m proxy.bench.parts PART N: PART's function run N times
    run = PARTS[sys.argv[1]][1]()
    for _ in range(int(sys.argv[2])):
        run()
