"""The official v1 client (``mcp==1.30.0``) as ``mcp1_client_checks.py`` drives it: one session
with recording callbacks, and the helpers its checks share.

Imported by plain name by ``mcp1_client_checks.py``, which runs as a script in the ``mcp-v1`` peer
environment (``proxy/demo/peers.py``).

* :func:`open_session`: an initialised ``ClientSession`` over ``streamablehttp_client`` and its
  :class:`Recorder` (elicitation and sampling callbacks, message handler).
* Task helpers: :func:`create_task`, :func:`raw_get` (``tasks/get`` with every key kept, via
  :class:`RawResult`), :func:`wait_status`, :func:`task_result`, :func:`expect_error`.
* Details for the JSON lines: :func:`result_detail`, :func:`dump`, :func:`exc_detail`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from check_lines import CheckFailed, Detail, expect, form_answer, texts  # beside this file
from pydantic import ConfigDict

warnings.simplefilter("ignore", DeprecationWarning)  # the experimental tasks API warns on every use

import mcp.types as types  # noqa: E402
from mcp.client.session import ClientSession  # noqa: E402
from mcp.client.streamable_http import streamablehttp_client  # noqa: E402
from mcp.shared._httpx_utils import create_mcp_http_client  # noqa: E402
from mcp.shared.exceptions import McpError  # noqa: E402

#: Bound for waiting on one task status by fast polling, seconds.
WAIT_S = 15.0
#: Fast polling interval of :func:`wait_status` (the checks' own loop, not the server's hint).
FAST_POLL_S = 0.1
#: HTTP timeouts given to ``streamablehttp_client``.
HTTP_TIMEOUT_S = 30.0
SSE_READ_TIMEOUT_S = 60.0

RELATED_TASK = "io.modelcontextprotocol/related-task"
TERMINAL = ("completed", "failed", "cancelled")
#: What the sampling callback answers; ``summarize`` returns it as its result.
SAMPLED_TEXT = "A short summary."


class RawResult(types.Result):
    """Any result, every key kept as received (``Result`` allows extra keys)."""

    model_config = ConfigDict(extra="allow")

    def raw(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, mode="json", exclude_unset=True)


# --------------------------------------------------------------------------------------------
# The session and what it records
# --------------------------------------------------------------------------------------------


class RejectedMessages(logging.Handler):
    """Collects the SDK's warnings about server messages it could not validate (and dropped)."""

    def __init__(self) -> None:
        super().__init__(level=logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if text.startswith(("Failed to validate notification", "Failed to validate request")):
            self.messages.append(text[:500])


class Recorder:
    """The client's callbacks: answers questions and records everything the server sent.

    Elicitation: a boolean property is answered ``True``, a number ``1``, anything else
    ``"Ada"``. Sampling: :data:`SAMPLED_TEXT`. ``in_result`` is set by :func:`task_result` while a
    ``tasks/result`` is pending, so each question records whether it came during one.
    """

    def __init__(self) -> None:
        self.elicitations: list[Detail] = []
        self.samplings: list[Detail] = []
        self.progress: list[Detail] = []
        self.task_statuses: list[Detail] = []
        """The params of every ``notifications/tasks/status``, in arrival order."""
        self.logs: list[Detail] = []
        """The params of every ``notifications/message``, in arrival order."""
        self.updates: list[Detail] = []
        """The params of every ``notifications/resources/updated``, in arrival order."""
        self.notifications: list[str] = []
        self.in_result = 0
        self.initialized: Detail = {}
        """The ``InitializeResult`` the server answered."""
        self.get_stream_open = asyncio.Event()
        """Set once the session's GET stream has been answered 200 (its headers arrived)."""

    @staticmethod
    def _related(context: Any) -> Any:
        meta = getattr(context, "meta", None)
        if meta is None:
            return None
        return meta.model_dump(by_alias=True, mode="json", exclude_none=True).get(RELATED_TASK)

    async def elicit(self, context: Any, params: Any) -> types.ElicitResult:
        schema = getattr(params, "requestedSchema", None) or {}
        self.elicitations.append(
            {
                "message": getattr(params, "message", None),
                "mode": getattr(params, "mode", None),
                "requestedSchema": schema,
                "related_task": self._related(context),
                "during_tasks_result": self.in_result > 0,
            }
        )
        return types.ElicitResult(action="accept", content=form_answer(schema, "Ada"))

    async def sample(self, context: Any, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
        said: list[str] = []
        for message in params.messages:
            blocks = message.content if isinstance(message.content, list) else [message.content]
            said.extend(block.text for block in blocks if getattr(block, "type", None) == "text")
        self.samplings.append(
            {
                "texts": said,
                "maxTokens": params.maxTokens,
                "related_task": self._related(context),
                "during_tasks_result": self.in_result > 0,
            }
        )
        return types.CreateMessageResult(
            role="assistant",
            content=types.TextContent(type="text", text=SAMPLED_TEXT),
            model="mcp1-client-checks-model",
            stopReason="endTurn",
        )

    async def on_message(self, message: Any) -> None:
        if isinstance(message, types.ServerNotification):
            root = message.root
            self.notifications.append(getattr(root, "method", type(root).__name__))
            if isinstance(root, types.ProgressNotification):
                self.progress.append(root.params.model_dump(by_alias=True, mode="json", exclude_none=True))
            elif isinstance(root, types.TaskStatusNotification):
                self.task_statuses.append(root.params.model_dump(by_alias=True, mode="json", exclude_none=True))
            elif isinstance(root, types.LoggingMessageNotification):
                self.logs.append(root.params.model_dump(by_alias=True, mode="json", exclude_none=True))
            elif isinstance(root, types.ResourceUpdatedNotification):
                self.updates.append(root.params.model_dump(by_alias=True, mode="json", exclude_none=True))

    def http_client(self, headers: Any = None, timeout: Any = None, auth: Any = None) -> Any:
        """The SDK's own HTTP client, telling :attr:`get_stream_open` when the GET stream is answered."""

        async def on_response(response: Any) -> None:
            if response.request.method == "GET" and response.status_code == 200:
                self.get_stream_open.set()

        client = create_mcp_http_client(headers, timeout, auth)
        client.event_hooks["response"].append(on_response)
        return client


STDIO_PREFIX = "stdio:"
"""A "URL" ``stdio:CMD ARGS`` makes a check launch ``CMD ARGS`` and speak to it on stdin/stdout
(the SDK's ``stdio_client``), as a desktop host launches a stdio server."""


def _transport(url: str, authorization: str | None, recorder: Recorder) -> Any:
    if url.startswith(STDIO_PREFIX):
        import os
        import shlex

        from mcp.client.stdio import StdioServerParameters, stdio_client

        argv = shlex.split(url[len(STDIO_PREFIX) :])
        return stdio_client(StdioServerParameters(command=argv[0], args=argv[1:], env=dict(os.environ)))
    headers = {"Authorization": authorization} if authorization else None
    return streamablehttp_client(
        url,
        headers=headers,
        timeout=HTTP_TIMEOUT_S,
        sse_read_timeout=SSE_READ_TIMEOUT_S,
        httpx_client_factory=recorder.http_client,
    )


@contextlib.asynccontextmanager
async def open_session(url: str, *, authorization: str | None = None) -> AsyncIterator[tuple[ClientSession, Recorder]]:
    """An initialised ``ClientSession`` on ``url`` (with ``Authorization`` if given) and its
    recorder; ``stdio:CMD ARGS`` launches a stdio server instead (``Authorization`` unused)."""
    recorder = Recorder()
    async with _transport(url, authorization, recorder) as streams:
        read, write = streams[0], streams[1]
        async with ClientSession(
            read,
            write,
            elicitation_callback=recorder.elicit,
            sampling_callback=recorder.sample,
            message_handler=recorder.on_message,
            client_info=types.Implementation(name="mcp1-client-checks", version="1"),
        ) as session:
            recorder.initialized = dump(await session.initialize())
            yield session, recorder


# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------


def result_detail(result: types.CallToolResult) -> Detail:
    return {
        "is_error": bool(result.isError),
        "texts": texts(result.content),
        "meta": result.meta,
    }


def dump(model: Any) -> Detail:
    return model.model_dump(by_alias=True, mode="json", exclude_none=True)


def exc_detail(exc: BaseException) -> Detail:
    if isinstance(exc, McpError):
        return {"type": "McpError", "code": exc.error.code, "message": exc.error.message}
    return {"type": type(exc).__name__, "message": str(exc)[:500]}


async def create_task(session: ClientSession, name: str, arguments: dict[str, Any], **kw: Any) -> types.Task:
    created = await session.experimental.call_tool_as_task(name, arguments, ttl=60000, **kw)
    return created.task


async def raw_get(session: ClientSession, task_id: str) -> dict[str, Any]:
    request = types.ClientRequest(types.GetTaskRequest(params=types.GetTaskRequestParams(taskId=task_id)))
    result = await session.send_request(request, RawResult)
    return result.raw()


async def wait_status(
    session: ClientSession, task_id: str, statuses: tuple[str, ...] = TERMINAL, timeout_s: float = WAIT_S
) -> types.GetTaskResult:
    """Poll ``tasks/get`` every :data:`FAST_POLL_S` until the status is one of ``statuses``."""
    deadline = time.monotonic() + timeout_s
    seen: list[str] = []
    while True:
        task = await session.experimental.get_task(task_id)
        if not seen or seen[-1] != task.status:
            seen.append(task.status)
        if task.status in statuses:
            return task
        if time.monotonic() >= deadline:
            raise CheckFailed(f"task stayed {task.status!r} for {timeout_s:g} s", {"statuses_seen": seen})
        await asyncio.sleep(FAST_POLL_S)


async def task_result(session: ClientSession, recorder: Recorder, task_id: str) -> types.CallToolResult:
    recorder.in_result += 1
    try:
        return await session.experimental.get_task_result(task_id, types.CallToolResult)
    finally:
        recorder.in_result -= 1


async def expect_error(awaitable: Awaitable[Any], code: int, what: str, detail: Detail) -> Detail:
    """Await ``awaitable``; it must raise ``McpError`` with ``code``. Returns the error detail."""
    try:
        answer = await awaitable
    except McpError as exc:
        seen = exc_detail(exc)
        detail[what] = seen
        expect(exc.error.code == code, f"{what}: error {exc.error.code}, not {code}", detail)
        return seen
    except Exception as exc:
        detail[what] = exc_detail(exc)
        raise CheckFailed(f"{what}: raised {type(exc).__name__}, not an error {code}", detail) from exc
    detail[what] = {"answered": dump(answer) if hasattr(answer, "model_dump") else repr(answer)}
    raise CheckFailed(f"{what}: answered instead of error {code}", detail)


#: Bound for waiting on what the proxy pushes (a GET stream answered, a notification on it), seconds.
PUSH_WAIT_S = 15.0


async def get_stream_answered(recorder: Recorder) -> None:
    """Until the session's GET stream is answered; else `CheckFailed`."""
    try:
        await asyncio.wait_for(recorder.get_stream_open.wait(), PUSH_WAIT_S)
    except TimeoutError:
        raise CheckFailed(f"the GET stream was not answered within {PUSH_WAIT_S:g} s", {}) from None


async def until_pushed(arrived: Callable[[], bool], missing: str, detail: Callable[[], Detail]) -> None:
    """Until `arrived()` (checked every 50 ms); else `CheckFailed("<missing> within 15 s", detail())`."""
    deadline = time.monotonic() + PUSH_WAIT_S
    while not arrived():
        if time.monotonic() >= deadline:
            raise CheckFailed(f"{missing} within {PUSH_WAIT_S:g} s", detail())
        await asyncio.sleep(0.05)
