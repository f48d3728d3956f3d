"""A protected server on the official ``mcp==1.30.0`` SDK, as the MCP authorization profile has
deployments run it: ``FastMCP`` with a ``TokenVerifier`` and ``AuthSettings`` (a resource server
only; its authorization server is ``--issuer``, where nothing has to run). Its low-level server has
tasks enabled (``server.experimental.enable_tasks()``) for one task tool beside FastMCP's own.

Run in the ``mcp-v1`` peer environment (``proxy/demo/peers.py``)::

    python protected_mcp1_server.py --issuer http://127.0.0.1:9/ --host 127.0.0.1 --port 0

It prints ``LISTENING http://127.0.0.1:<port>/mcp`` once it accepts connections, serves its
protected-resource metadata at ``/.well-known/oauth-protected-resource/mcp`` (scope ``mcp:tools``,
the ``--issuer`` as its one authorization server) and answers requests without a valid token 401
with ``WWW-Authenticate: Bearer error="invalid_token", …, resource_metadata="…"``, and tokens
without the scope 403 ``insufficient_scope``.

token              identity   scopes       answered
``alice-token``    alice      mcp:tools    served
``bob-token``      bob        mcp:tools    served
``service-token``  service    mcp:tools    served (the operator's probe credentials in tests)
``reader-token``   reader     (none)       403 insufficient_scope
``expired-token``  expired    mcp:tools    401 (expired)
anything else      —          —            401

tool                          taskSupport   behaviour
``whoami()``                  (none)        answers the token's identity (its ``client_id``)
``slow_echo(text, seconds)``  optional      sleeps ``seconds`` (default 0.2), then answers ``echo <text>``
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path
from typing import Any

import anyio
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.experimental.task_context import ServerTaskContext
from mcp.server.fastmcp import FastMCP
from mcp.types import CallToolResult, CreateTaskResult, TextContent, Tool, ToolExecution

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "proxy" / "demo" / "servers"))
import loopback_serve  # noqa: E402  (the serve-and-announce entry point the reference servers share)

SCOPE = "mcp:tools"
TOKENS = {
    "alice-token": ("alice", [SCOPE], None),
    "bob-token": ("bob", [SCOPE], None),
    "service-token": ("service", [SCOPE], None),
    "reader-token": ("reader", [], None),
    "expired-token": ("expired", [SCOPE], 1),
}
"""token → (client id, scopes, expires_at in Unix s or None)."""

SLOW_ECHO = Tool(
    name="slow_echo",
    description="Sleeps for `seconds`, then answers `echo <text>`.",
    inputSchema={
        "type": "object",
        "properties": {"text": {"type": "string"}, "seconds": {"type": "number"}},
        "required": ["text"],
    },
    execution=ToolExecution(taskSupport="optional"),
)


class TableVerifier:
    """A `TokenVerifier` over the fixed table `TOKENS`."""

    async def verify_token(self, token: str) -> AccessToken | None:
        entry = TOKENS.get(token)
        if entry is None:
            return None
        client_id, scopes, expires_at = entry
        return AccessToken(token=token, client_id=client_id, scopes=scopes, expires_at=expires_at, subject=client_id)


def _issuer() -> str:
    if "--issuer" in sys.argv:
        at = sys.argv.index("--issuer")
        issuer = sys.argv[at + 1]
        del sys.argv[at : at + 2]
        return issuer
    return "http://127.0.0.1:9/"


ISSUER = _issuer()


def build_app() -> Any:
    url = loopback_serve.bound_url
    mcp = FastMCP(
        "protected-mcp1",
        token_verifier=TableVerifier(),
        auth=AuthSettings(issuer_url=ISSUER, resource_server_url=url, required_scopes=[SCOPE], validate_token_resource=False),
    )

    @mcp.tool()
    def whoami() -> str:
        """The identity of the token this request carries."""
        token = get_access_token()
        return token.client_id if token is not None else "anonymous"

    server = mcp._mcp_server
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        server.experimental.enable_tasks()

    @server.list_tools()
    async def list_tools() -> list[Tool]:
        return [*await mcp.list_tools(), SLOW_ECHO]

    @server.call_tool(validate_input=False)
    async def call_tool(name: str, arguments: dict[str, Any]) -> Any:
        if name != SLOW_ECHO.name:
            return await mcp.call_tool(name, arguments)
        ctx = server.request_context
        ctx.experimental.validate_for_tool(SLOW_ECHO)
        text, seconds = arguments["text"], float(arguments.get("seconds", 0.2))

        async def slow_echo() -> CallToolResult:
            await anyio.sleep(seconds)
            return CallToolResult(content=[TextContent(type="text", text=f"echo {text}")])

        if not ctx.experimental.is_task:
            return await slow_echo()

        async def work(task: ServerTaskContext) -> CallToolResult:
            return await slow_echo()

        result: CreateTaskResult = await ctx.experimental.run_task(work)
        return result

    return mcp.streamable_http_app()


if __name__ == "__main__":
    loopback_serve.main(__doc__, build_app)
