"""Each shadow log line names the request it mirrored (issue 37 defect 5; docs/behaviour.md §8): the
comparisons run in workers and a reader of the shadow process that outlive the request that
started them, so they must not keep its `request_id`. A real proxy, the benchmark's fast upstream
as primary and a candidate whose `echo` answers "other", so that each comparison logs one
difference line; each client request carries its own `X-Request-Id`."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import time

import aiohttp
from aiohttp import web
from support import Caller, running_proxy

from proxy.app import STATE
from proxy.bench.upstream import FastUpstream, create_app
from proxy.logs import handler

KEYS = ("match", "differ", "candidate_error", "primary_error", "timeout", "dropped", "too_large")


class OtherEcho:
    """The fast upstream on `wire` ("modern" or "v1"), except that every `echo` it is asked (only the
    shadow asks a candidate) answers "other"."""

    def __init__(self, wire: str) -> None:
        self.server = FastUpstream(poll_interval_ms=20)
        self.wire = wire

    async def post(self, request: web.Request) -> web.StreamResponse:
        message = json.loads(await request.read())
        if message.get("method") == "tools/call" and (message.get("params") or {}).get("name") == "echo":
            result = {"content": [{"type": "text", "text": "other"}], "isError": False}
            if self.wire == "modern":
                result["resultType"] = "complete"
            return web.json_response({"jsonrpc": "2.0", "id": message["id"], "result": result})
        return await (self.server.post_modern if self.wire == "modern" else self.server.post_v1)(request)

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/mcp", self.post)
        if self.wire == "v1":
            app.router.add_get("/mcp", self.server.get_v1, allow_head=False)
            app.router.add_delete("/mcp", self.server.delete_v1)
        return app


async def _counted(http: aiohttp.ClientSession, base_url: str, total: int) -> None:
    deadline = time.monotonic() + 20
    while True:
        async with http.get(base_url + "/status.json") as response:
            shadow = (await response.json())["shadow"][0]
        if sum(row.get(k, 0) for row in shadow["rows"] for k in KEYS) >= total:
            return
        assert time.monotonic() < deadline, shadow
        await asyncio.sleep(0.05)


class _Lines:
    """The JSON log lines of `proxy.shadow` while in use, formatted as `serve --log-format json` does."""

    def __enter__(self) -> _Lines:
        self.stream = io.StringIO()
        self.handler = handler("json", self.stream)
        logging.getLogger("proxy.shadow").addHandler(self.handler)
        return self

    def __exit__(self, *_exc: object) -> None:
        logging.getLogger("proxy.shadow").removeHandler(self.handler)

    def differences(self) -> list[tuple[str | None, str]]:
        """(request_id, message) of each difference line, sorted."""
        entries = [json.loads(line) for line in self.stream.getvalue().splitlines()]
        return sorted((e.get("request_id"), e["msg"]) for e in entries if " differs from " in e["msg"])


def _expected(ids: list[str]) -> list[tuple[str, str]]:
    return sorted((i, f'shadow next differs from legacy on tools/call echo: result.content.0.text: "{i}" → "other"') for i in ids)


async def _echo(caller: Caller, request_id: str) -> None:
    answer = await caller.call(
        "tools/call", {"name": "echo", "arguments": {"text": request_id}}, headers={"X-Request-Id": request_id}
    )
    assert (answer.status, answer.headers["X-Request-ID"], answer.result["content"]) == (
        200,
        request_id,
        [{"type": "text", "text": request_id}],
    )


async def test_each_line_of_the_shadow_process_names_its_own_request(aiohttp_server, tmp_path):
    primary = await aiohttp_server(create_app("modern", poll_interval_ms=20))
    served = await aiohttp_server(OtherEcho("modern").app())
    upstream = [
        {"name": "legacy", "url": str(primary.make_url("/mcp"))},
        {"name": "next", "url": str(served.make_url("/mcp")), "shadow_of": "legacy", "shadow_tools": ["echo"]},
    ]
    with _Lines() as lines:
        async with running_proxy("", tmp_path, upstream=upstream, store="memory") as proxy, aiohttp.ClientSession() as http:
            shadowing = proxy.runner.app[STATE].fleet.shadow
            caller = Caller(http, proxy.url)
            await _echo(caller, "first-request")  # starts the shadow process; compared in the event loop
            await _counted(http, proxy.base_url, 1)
            deadline = time.monotonic() + 30
            while not shadowing.process.running:
                assert time.monotonic() < deadline, shadowing.process.state
                await asyncio.sleep(0.05)
            submitted = shadowing.process.submitted
            later = [f"request-{n}" for n in range(1, 5)]
            for request_id in later:
                await _echo(caller, request_id)
            await _counted(http, proxy.base_url, 5)
            assert shadowing.process.submitted - submitted == 4  # compared in the shadow process
    assert lines.differences() == _expected(["first-request", *later])


async def test_each_line_of_the_event_loop_s_workers_names_its_own_request(aiohttp_server, tmp_path):
    primary = await aiohttp_server(create_app("modern", poll_interval_ms=20))
    served = await aiohttp_server(OtherEcho("v1").app())  # reached through its pairing: compared in the event loop
    upstream = [
        {"name": "legacy", "url": str(primary.make_url("/mcp"))},
        {
            "name": "next",
            "url": str(served.make_url("/mcp")),
            "shadow_of": "legacy",
            "shadow_tools": ["echo"],
            "shadow_concurrency": 2,
        },
    ]
    ids = [f"request-{n}" for n in range(1, 6)]
    with _Lines() as lines:
        async with running_proxy("", tmp_path, upstream=upstream, store="memory") as proxy, aiohttp.ClientSession() as http:
            caller = Caller(http, proxy.url)
            for request_id in ids:
                await _echo(caller, request_id)
            await _counted(http, proxy.base_url, len(ids))
            assert proxy.runner.app[STATE].fleet.shadow.process.submitted == 0
    assert lines.differences() == _expected(ids)
