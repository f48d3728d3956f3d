"""`proxy.lean_face`: which requests the lean face takes, as aiohttp's parser read them, and
everything else left to aiohttp's request loop (docs/decisions.md §175, §182)."""

from __future__ import annotations

import pytest
from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.http_writer import HttpVersion11
from support import read_by_aiohttp

from proxy.lean_face import MAX_BODY, LeanTarget, finish_head, head_bytes, plain_body, prepare_now, whole_post

TARGET = LeanTarget("/mcp", None, None)
TARGETS = {"/mcp": TARGET}
BODY = b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}'


def post(*fields: str, body: bytes = BODY, target: str = "/mcp", version: str = "HTTP/1.1", length: bool = True) -> bytes:
    lines = [f"POST {target} {version}", "Host: 127.0.0.1:8080", *fields]
    if length:
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def lean(data: bytes, targets: dict[str, LeanTarget] = TARGETS) -> tuple[LeanTarget, object, bytes] | None:
    """What the lean face takes of `data` read whole by a fresh connection: (target, message, body)."""
    found = whole_post(read_by_aiohttp(data), targets)
    if found is None:
        return None
    target, message, payload = found
    return target, message, payload.read_nowait()


def test_a_plain_post_is_taken_with_the_message_and_body_aiohttps_parser_made() -> None:
    found = lean(post("Content-Type: application/json", "Mcp-Session-Id: s-1", "Accept:  application/json ,text/event-stream\t"))
    assert found is not None
    target, message, body = found
    assert (target, body) == (TARGET, BODY)
    assert (message.method, message.path, message.version, str(message.url)) == ("POST", "/mcp", HttpVersion11, "/mcp")
    assert (message.should_close, message.compression, message.upgrade, message.chunked) == (False, None, False, False)
    assert list(message.headers.items()) == [
        ("Host", "127.0.0.1:8080"),
        ("Content-Type", "application/json"),
        ("Mcp-Session-Id", "s-1"),
        ("Accept", "application/json ,text/event-stream"),
        ("Content-Length", str(len(BODY))),
    ]


def test_repeated_fields_keep_their_order_and_connection_close_ends_the_connection() -> None:
    found = lean(post("Authorization: Bearer a", "authorization: Bearer b", "Connection: keep-alive, Close"))
    assert found is not None
    message = found[1]
    assert (message.headers.getall("Authorization"), message.should_close) == (["Bearer a", "Bearer b"], True)


def test_an_empty_body_of_length_zero_is_plain() -> None:
    found = lean(post(body=b""))
    assert found is not None and found[2] == b""


def test_a_body_up_to_max_body_is_plain_and_a_longer_one_is_aiohttps() -> None:
    """The request's body stream holds `MAX_BODY` bytes without pausing the connection; a longer
    one read whole goes to aiohttp's loop (a 140,000-byte body read whole left the connection
    stuck without an answer when the lean face took it: found by review)."""
    found = lean(post(body=b"x" * MAX_BODY))
    assert found is not None and len(found[2]) == MAX_BODY == 65536
    assert lean(post(body=b"x" * (MAX_BODY + 1))) is None


def test_every_split_of_a_request_is_left_to_aiohttp() -> None:
    """A head or body still arriving is aiohttp's to read (with its header deadline and body timeout)."""
    request = post("Content-Type: application/json")
    assert [cut for cut in range(len(request)) if lean(request[:cut]) is not None] == []
    assert lean(request) is not None


@pytest.mark.parametrize(
    ("request_bytes", "why"),
    [
        (post() + post(), "two requests in one read (pipelined)"),
        (post("Transfer-Encoding: chunked", length=False, body=b"%x\r\n%s\r\n0\r\n\r\n" % (len(BODY), BODY)), "a chunked body"),
        (post("Expect: 100-continue"), "Expect"),
        (post("Upgrade: websocket", "Connection: Upgrade"), "an upgrade"),
        (post("Content-Encoding: gzip"), "a compressed body"),
        (post(version="HTTP/1.0"), "HTTP/1.0"),
        (post(target="/mcp?x=1"), "a query string"),
        (post(target="/other"), "another path"),
        (post(target="/mcp/"), "a path not served lean here"),
        (post(target="http://127.0.0.1:8080/mcp"), "the absolute form"),
        (post().replace(b"POST", b"PUT ", 1), "another method"),
        (b"GET /mcp HTTP/1.1\r\nHost: x\r\n\r\n", "a GET"),
    ],
)
def test_anything_unusual_is_left_to_aiohttp(request_bytes: bytes, why: str) -> None:
    assert lean(request_bytes, {**TARGETS, "/other/": TARGET}) is None, why


@pytest.mark.parametrize(
    ("request_bytes", "why"),
    [
        (post() + b"x", "bytes beyond the body"),
        (post("Transfer-Encoding: chunked"), "chunked beside a length"),
        (post(f"Content-Length: {len(BODY)}"), "Content-Length twice"),
        (post("Content-Length: +7", length=False, body=b"1234567"), "a signed length"),
        (post("X-Folded: a", " b"), "an obsolete line folding"),
        (post("X-Space : a"), "a space before the colon"),
        (post("X(bad): a"), "a name that is no token"),
        (post("X-Control: a\x01b"), "a control character in a value"),
        (post("X-Long: " + "a" * 8191), "a field over aiohttp's limit"),
    ],
)
def test_what_aiohttps_parser_refuses_never_reaches_the_lean_face(request_bytes: bytes, why: str) -> None:
    """The connection answers these 400 as aiohttp does (tests/operations/test_connections.py):
    the parser refuses them before the lean face is asked."""
    with pytest.raises(HttpProcessingError):
        lean(request_bytes)
    assert why


def test_a_whole_json_answer_gets_the_head_aiohttp_would_write() -> None:
    response = web.Response(body=b'{"ok":1}', content_type="application/json", headers={"X-Mine": "1"})
    assert plain_body(response) == b'{"ok":1}'
    finish_head(response, b'{"ok":1}', keep_alive=False)
    date = response.headers["Date"]
    server = response.headers["Server"]
    assert (
        head_bytes(response)
        == (
            "HTTP/1.1 200 OK\r\nX-Mine: 1\r\nContent-Type: application/json\r\nContent-Length: 8\r\n"
            f"Date: {date}\r\nServer: {server}\r\nConnection: close\r\n\r\n"
        ).encode()
    )
    assert server.startswith("Python/3.") and " aiohttp/" in server


def test_streams_and_bodiless_answers_are_written_by_aiohttp() -> None:
    assert plain_body(web.StreamResponse()) is None
    assert plain_body(web.Response(status=204)) is None
    assert plain_body(web.Response(body=b"x", status=304)) is None
    compressed = web.Response(body=b"x")
    compressed.enable_compression()
    assert plain_body(compressed) is None
    with_cookie = web.Response(body=b"x")
    with_cookie.set_cookie("a", "b")
    assert plain_body(with_cookie) is None


def test_a_header_value_holding_a_line_break_is_refused_when_written() -> None:
    response = web.Response(body=b"{}", headers={"X-Evil": "a\r\nInjected: 1"})
    finish_head(response, b"{}", keep_alive=True)
    with pytest.raises(ValueError):
        head_bytes(response)


def test_prepare_hooks_run_as_plain_functions_only_when_every_receiver_has_one() -> None:
    from proxy.request_ids import echo_request_id

    async def plain_coroutine(request: object, response: object) -> None:
        pass

    assert prepare_now([echo_request_id]) == (echo_request_id.now,)
    assert prepare_now([]) == ()
    assert prepare_now([echo_request_id, plain_coroutine]) is None
