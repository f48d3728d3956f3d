"""``tasks/result`` on the reference v1 server's task store when the work ends between the
handler's read of the task and its wait for the next update (``proxy/demo/servers/v1_sdk_fixes.py``,
"The wake-up fix").

Run in the ``mcp-v1`` peer environment (``proxy/demo/peers.py``) with the store to use::

    python result_wakeup_check.py fixed   # v1_sdk_fixes.FinalStateTaskStore
    python result_wakeup_check.py sdk     # mcp 1.30's own InMemoryTaskStore

It prints one JSON line: ``{"hung": <bool>, "result": <the tasks/result result or null>}``;
``hung`` means ``tasks/result`` was still waiting after HANG_GUARD_S seconds (it would wait
forever: nothing else signals a terminal task).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "proxy" / "demo" / "servers"))

from mcp.server.experimental.task_result_handler import TaskResultHandler  # noqa: E402
from mcp.shared.experimental.tasks.in_memory_task_store import InMemoryTaskStore  # noqa: E402
from mcp.shared.experimental.tasks.message_queue import InMemoryTaskMessageQueue, QueuedMessage  # noqa: E402
from mcp.types import CallToolResult, GetTaskPayloadRequest, GetTaskPayloadRequestParams, TaskMetadata, TextContent  # noqa: E402
from v1_sdk_fixes import FinalStateTaskStore  # noqa: E402

HANG_GUARD_S = 5.0
"""How long a hung ``tasks/result`` is given before the check reports it (a guard, not a bound)."""


class WorkEndsOnDequeue(InMemoryTaskMessageQueue):
    """A queue whose first `dequeue` first ends the task (result, then ``completed``), as the work
    does in a real run: the handler has read the task as ``working`` and has not begun to wait."""

    def __init__(self, store: InMemoryTaskStore) -> None:
        super().__init__()
        self._store = store
        self._ended = False

    async def dequeue(self, task_id: str) -> QueuedMessage | None:
        if not self._ended:
            self._ended = True
            await self._store.store_result(task_id, CallToolResult(content=[TextContent(type="text", text="done")]))
            await self._store.update_task(task_id, status="completed")
        return await super().dequeue(task_id)


async def main(which: str) -> None:
    store = FinalStateTaskStore() if which == "fixed" else InMemoryTaskStore()
    task = await store.create_task(TaskMetadata(ttl=60_000))
    handler = TaskResultHandler(store, WorkEndsOnDequeue(store))
    request = GetTaskPayloadRequest(params=GetTaskPayloadRequestParams(taskId=task.taskId))
    result: dict[str, Any] | None = None
    with anyio.move_on_after(HANG_GUARD_S) as guard:
        # The session is used only to deliver queued messages; this queue never holds any.
        answer = await handler.handle(request, None, 1)  # type: ignore[arg-type]
        result = answer.model_dump(mode="json", by_alias=True, exclude_none=True)
    print(json.dumps({"hung": guard.cancelled_caught, "result": result, "task_id": task.taskId}))


if __name__ == "__main__":
    anyio.run(main, sys.argv[1])
