"""The operator's hand on a rollout (docs/configuration.md "Rollout"): `GET /rollout` (its status)
and `POST /rollout` with `{"action": "pause" | "resume" | "promote" | "abort"}` on the proxy,
served as `/status.json` is (loopback peers, or anyone with the `status_token`), and the command
`mcp-tasks-proxy rollout ACTION URL` that calls them and prints the state the action left.
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.error
from typing import Any

from aiohttp import web

from ..observe.status import allowed, refused
from ..observe.terminal import ProxyRefused, ask_proxy, proxy_url
from ..printable import escaped
from .driver import RolloutDriver
from .state import ACTIONS

MAX_BODY = 1024


async def handle(request: web.Request, driver: RolloutDriver | None, token: str | None) -> web.Response:
    """`GET /rollout` or `POST /rollout` (module docstring)."""
    if not allowed(request, token):
        return refused(token)
    action = "status"
    if request.method == "POST":
        raw = b""
        while len(raw) <= MAX_BODY and not request.content.at_eof():  # a body may come in several reads
            chunk = await request.content.read(MAX_BODY + 1 - len(raw))
            if not chunk:
                break
            raw += chunk
        try:
            body = json.loads(raw) if len(raw) <= MAX_BODY else None
        except ValueError:
            body = None
        if not isinstance(body, dict) or not isinstance(body.get("action"), str):
            return web.json_response({"error": f'the body is {{"action": "{" | ".join(("status", *ACTIONS))}"}} (at most {MAX_BODY} bytes)'},
                                     status=400)
        action = body["action"]
    if driver is None:
        return web.json_response({"error": "no rollout is configured (add a [rollout] table and reload)"}, status=404)
    status, answer = await driver.act(action)
    return web.json_response(answer, status=status)


def rollout_url(url: str) -> str:
    """The `/rollout` of the proxy at `url`."""
    return proxy_url(url, "/rollout")


def render(answer: dict[str, Any]) -> str:
    """A rollout's state in a few lines."""
    steps = ", ".join(f"{s:g}" for s in answer["steps"])
    lines = [f"rollout {answer['from']} -> {answer['to']}: {answer['state'].replace('_', ' ')}, step {answer['step'] + 1} of "
             f"{len(answer['steps'])} ({answer['percent']:g} % of new work on {answer['to']}; steps {steps})",
             f"done: {answer['done']}"]
    gates = answer.get("gates")
    if gates:
        lines.append(f"last check: {gates['outcome']}: {gates['reason']}")
    lines += [f"  {event['event']} at step {event['step'] + 1} ({event['percent']:g} %): {event['reason']}" for event in answer["history"][-10:]]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    """Exit 0 with the state printed, 1 when the proxy cannot be reached or refuses (the reason printed)."""
    try:
        answer = ask_proxy(rollout_url(args.url), args.token, None if args.action == "status" else {"action": args.action}, 30)
    except ProxyRefused as exc:
        print(escaped(f"mcp-tasks-proxy rollout {args.action}: {exc.reason}"), file=sys.stderr)
        return 1
    except (urllib.error.URLError, OSError, ValueError) as exc:
        print(escaped(f"mcp-tasks-proxy rollout: cannot reach {rollout_url(args.url)}: {exc}"), file=sys.stderr)
        return 1
    print(json.dumps(answer, indent=2) if args.json else escaped(render(answer), lines=True))
    return 0


def add_parser(commands: Any) -> None:
    rollout = commands.add_parser("rollout", help="show, pause, resume, promote or abort the rollout a running proxy runs")
    rollout.add_argument("action", choices=["status", *ACTIONS])
    rollout.add_argument("url", metavar="URL", nargs="?", default="http://127.0.0.1:8080", help="the proxy (default: %(default)s)")
    rollout.add_argument("--json", action="store_true", help="print the JSON answer")
    rollout.add_argument("--token", help="the proxy's status_token (default: $MCP_TASKS_PROXY_STATUS_TOKEN)")
    rollout.set_defaults(run=run)
