"""Caller-controlled strings on the operator's terminal (issue 37, defect 4): a client whose
`clientInfo.name` holds terminal escape sequences must not clear the screen or retitle the window
of whoever runs `mcp-tasks-proxy status`: every control character is printed as a visible escape."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import sys

import pytest
from support import running_proxy

from proxy.demo.peers import ensure_peer_env
from proxy.logs import JsonFormatter, TextFormatter, announce
from proxy.printable import escaped, json_text

HOSTILE = "\u001b[2J\u001b]0;OWNED\u0007evil\u009b31m\u007f"
"""Clear the screen, set the window title, then a C1 CSI and a DEL."""
SHOWN = "\\x1b[2J\\x1b]0;OWNED\\x07evil\\x9b31m\\x7f"

# The official v1 client (mcp 1.30, in its peer environment) initializing with that name.
CLIENT = """
import asyncio, sys
import mcp.types as types
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamablehttp_client

async def main(url, name):
    async with streamablehttp_client(url) as (read, write, _):
        async with ClientSession(read, write, client_info=types.Implementation(name=name, version="6.6.6")) as session:
            await session.initialize()
            tools = await session.list_tools()
            print(len(tools.tools))

asyncio.run(main(sys.argv[1], sys.argv[2]))
"""


def _control(text: str) -> list[str]:
    """The control characters (C0 but newline, DEL, C1) in `text`."""
    return [c for c in text if (ord(c) < 0x20 and c != "\n") or 0x7F <= ord(c) <= 0x9F]


@pytest.mark.peers
async def test_status_escapes_a_client_name_holding_terminal_escapes(reference_v1_server, tmp_path):
    async with running_proxy(reference_v1_server.url, tmp_path, store="memory", probe_interval_ms=3_600_000) as proxy:
        client = await asyncio.create_subprocess_exec(
            str(ensure_peer_env("mcp-v1")), "-c", CLIENT, proxy.url, HOSTILE, stdout=asyncio.subprocess.PIPE
        )
        listed, _ = await client.communicate()
        assert (client.returncode, listed) == (0, b"8\n")
        status = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "proxy", "status", proxy.base_url, stdout=asyncio.subprocess.PIPE
        )
        out, _ = await status.communicate()
        as_json = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "proxy", "status", "--json", proxy.base_url, stdout=asyncio.subprocess.PIPE
        )
        raw, _ = await as_json.communicate()
    assert (status.returncode, as_json.returncode) == (0, 0)
    text = out.decode()
    assert _control(text) == []
    lines = text.splitlines()
    start = lines.index("All clients")
    row = lines[start + 3].split()  # initialize, notifications/initialized, tools/list
    assert (row[:5], row[-1]) == (["v1", SHOWN, "6.6.6", "3", "0"], "main")
    # The JSON keeps the name exactly (escaped as JSON escapes it), with no raw control character either.
    assert _control(raw.decode()) == []
    assert [c["name"] for c in json.loads(raw)["clients"]] == [HOSTILE]


def test_escaped_shows_every_control_character_and_keeps_the_rest():
    assert escaped(HOSTILE) == SHOWN
    assert escaped("a\nb\r\tc\x00") == "a\\x0ab\\x0d\\x09c\\x00"
    assert escaped("a\nb\rc", lines=True) == "a\nb\\x0dc"
    assert escaped("caf\u00e9 \u00a0 \u2603 \\x1b") == "caf\u00e9 \u00a0 \u2603 \\x1b"  # printable, NBSP and beyond kept
    assert json_text(json.dumps({"n": HOSTILE}, ensure_ascii=False)) == (
        '{"n": "\\u001b[2J\\u001b]0;OWNED\\u0007evil\\u009b31m\\u007f"}'
    )
    assert json.loads(json_text(json.dumps({"n": HOSTILE}, ensure_ascii=False))) == {"n": HOSTILE}


def test_log_lines_show_a_backends_control_characters_escaped():
    """A stdio server's stderr, a client's name in a message: the text log and the JSON log show
    them escaped; a traceback keeps its lines."""
    record = logging.LogRecord(
        "proxy.x", logging.INFO, __file__, 1, "backend %s stderr: %s", ("main", HOSTILE + "\nforged"), None
    )
    text = TextFormatter().format(record)
    assert text.endswith(f"INFO proxy.x: backend main stderr: {SHOWN}\\x0aforged")
    entry = JsonFormatter().format(record)
    assert _control(entry) == [] and json.loads(entry)["msg"] == f"backend main stderr: {HOSTILE}\nforged"
    try:
        raise ValueError(HOSTILE)
    except ValueError:
        failed = logging.LogRecord("proxy.x", logging.ERROR, __file__, 1, "failed", (), sys.exc_info())
    lines = TextFormatter().format(failed).split("\n")
    assert (lines[0].endswith("ERROR proxy.x: failed"), lines[1], lines[-1]) == (
        True,
        "Traceback (most recent call last):",
        f"ValueError: {SHOWN}",
    )
    out = io.StringIO()
    announce("text", f"mcp-tasks-proxy: refusing to start: {HOSTILE}", out)
    assert out.getvalue() == f"mcp-tasks-proxy: refusing to start: {SHOWN}\n"
