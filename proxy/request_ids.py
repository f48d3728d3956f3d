"""`X-Request-Id`: each request's id, set for its log lines (`proxy.logs.REQUEST_ID`) and kept on
the request (`REQUEST_ID_KEY`), and echoed on every response (`echo_request_id`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web

from .logs import REQUEST_ID, REQUEST_ID_HEADER, request_id_from

REQUEST_ID_KEY = web.RequestKey("request_id", str)


def with_request_id(handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """`handler` with the request's id (see `proxy.logs.request_id_from`) for log lines and the
    response (`proxy.app._post` does the same inline: one coroutine less on the relay's path)."""

    async def identified(request: web.Request) -> web.StreamResponse:
        request_id = request[REQUEST_ID_KEY] = request_id_from(request.headers.get(REQUEST_ID_HEADER))
        token = REQUEST_ID.set(request_id)
        try:
            return await handler(request)
        finally:
            REQUEST_ID.reset(token)

    return identified


class EchoRequestId:
    """`X-Request-Id` on every response, streamed ones included (set as headers are sent); an
    answer no handler of ours gave (aiohttp's 404 or 405 for another path) gets one here. An
    `on_response_prepare` receiver with a plain twin, `now`, that the lean face calls
    (`proxy.lean_face.prepare_now`)."""

    async def __call__(self, request: web.Request, response: web.StreamResponse) -> None:
        self.now(request, response)

    @staticmethod
    def now(request: web.Request, response: web.StreamResponse) -> None:
        try:  # not `request.get`: the request's mapping is written in Python, and its `get` is one call more
            request_id = request[REQUEST_ID_KEY]
        except KeyError:
            request_id = request_id_from(request.headers.get(REQUEST_ID_HEADER))
        response.headers[REQUEST_ID_HEADER] = request_id


echo_request_id = EchoRequestId()
"""The application's `on_response_prepare` receiver (`proxy/app.py`)."""
