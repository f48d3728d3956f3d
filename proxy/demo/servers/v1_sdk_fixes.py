"""Workarounds for defects of the official SDK ``mcp==1.30.0`` that the reference v1 server needs.

Imported by ``v1_server.py`` (it runs in the ``mcp-v1`` peer environment, never in the proxy's).
:func:`enable_fixed_tasks` turns the tasks support on for a low-level ``Server`` with every fix
below in place.

The cancel fix. In mcp 1.30, ``tasks/cancel`` (``mcp/shared/experimental/tasks/helpers.py:cancel_task``)
only flips the stored status. The work keeps running, and when it returns, the wrapper ``execute()``
inside ``Experimental.run_task`` (``server/experimental/request_context.py``) checks the work's own,
stale copy of the task (``ServerTaskContext.task``, still ``working``), calls
``ServerTaskContext.complete()``, whose ``InMemoryTaskStore.update_task`` raises ``ValueError``
("Cannot transition from terminal status 'cancelled'"); the ``except`` branch then calls
``fail()``, which raises the same ``ValueError`` outside any handler, out of the per-session task
group opened by ``TaskSupport.run()``, and that ends the whole session. Three layers prevent it:

* :class:`FinalStateTaskStore` keeps terminal records frozen: a later status change, status
  message or result for a terminal task is ignored instead of raising, and a task whose work still
  runs is never purged by TTL (a purge would make ``complete()`` raise "not found" the same way).
* :func:`stop_when_cancelled` wraps every work function: a watcher re-reads the task from the
  store and, once it is ``cancelled``, cancels the work, drops its undelivered queued questions,
  and re-syncs the context's copy of the task, so ``execute()`` sees a terminal status and neither
  completes nor fails it (no stray status notification either).
* :class:`SessionBoundTaskSupport` starts ``execute()`` through a spawner that logs anything still
  escaping it instead of letting it end the session. It also fixes a second SDK defect: the task
  group is shared by all sessions, so ending any session broke task creation in the others.

The wake-up fix. ``tasks/result`` (``TaskResultHandler.handle`` in
``server/experimental/task_result_handler.py``) reads the task, delivers its queued messages and,
while the task is not terminal, waits for the next store update or queued message.
``InMemoryTaskStore.wait_for_update`` installs a fresh event and waits for the *next* update only,
and the handler installs it a few event-loop turns after its read (the waiters start in a new task
group). When the work ends in that gap (right after the client answered the task's question, the
handler wakes on the ``working`` update and reads the task before the work marks it ``completed``),
the completion signals nobody, and ``tasks/result`` waits forever although ``tasks/get`` says
``completed``. :meth:`FinalStateTaskStore.wait_for_update` returns at once for a terminal task,
which in that store never changes again; the handler reads it afresh and answers.

And one more:

* :func:`unique_task_request_ids`: mcp 1.30 builds the JSON-RPC id of a task's server→client
  request as ``f"task-{taskId}-{id(params)}"`` (``ServerSession._build_elicit_form_request`` and
  its siblings). ``id()`` of a short-lived object is reused, so two questions a task asks at the
  same time (``multi_input``'s ``asyncio.gather``) can get the same id; the SDK then keys both
  pending answers by that id and one question is lost. The fix numbers them from a counter.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import itertools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, cast

import anyio
from anyio.abc import TaskGroup
from mcp.server.experimental.task_context import ServerTaskContext
from mcp.server.experimental.task_support import TaskSupport
from mcp.server.lowlevel import Server
from mcp.server.lowlevel.server import request_ctx
from mcp.server.session import ServerSession
from mcp.shared.experimental.tasks.helpers import is_terminal
from mcp.shared.experimental.tasks.in_memory_task_store import InMemoryTaskStore, StoredTask
from mcp.shared.experimental.tasks.message_queue import InMemoryTaskMessageQueue
from mcp.types import TASK_STATUS_CANCELLED, CallToolResult, Result, Task, TaskStatus

#: How often a running task's work re-reads its task to notice ``tasks/cancel``.
CANCEL_POLL_S = 0.1

# The reference server's logger: what these fixes log reads as the server's own lines.
log = logging.getLogger("mcp_tasks_proxy.v1_server")

Work = Callable[[ServerTaskContext], Awaitable[Result]]

_BUILDERS = ("_build_elicit_form_request", "_build_elicit_url_request", "_build_create_message_request")


def unique_task_request_ids() -> None:
    """Patch the three request builders so task-related request ids are unique (idempotent)."""
    counter = itertools.count(1)
    for name in _BUILDERS:
        original = getattr(ServerSession, name)
        if getattr(original, "_unique_ids", False):
            continue

        @functools.wraps(original)
        def build(self: ServerSession, *args: Any, __original: Any = original, **kwargs: Any) -> Any:
            request = __original(self, *args, **kwargs)
            if isinstance(request.id, str) and request.id.startswith("task-"):
                request.id = f"{request.id.rsplit('-', 1)[0]}-{next(counter)}"
            return request

        build._unique_ids = True  # type: ignore[attr-defined]
        setattr(ServerSession, name, build)


# --------------------------------------------------------------------------------------------
# Task store: terminal means final
# --------------------------------------------------------------------------------------------


class FinalStateTaskStore(InMemoryTaskStore):
    """``InMemoryTaskStore`` in which a terminal task never changes and a running one never expires.

    * ``update_task`` on a terminal task returns the stored record unchanged (no status, message
      or ``lastUpdatedAt`` change) instead of raising ``ValueError``.
    * ``store_result`` on a terminal task is ignored, so a cancelled task keeps no payload.
    * TTL purging applies only to terminal tasks (the SDK restarts the TTL clock when a task ends).
    * ``wait_for_update`` on a terminal task returns at once (see "The wake-up fix" above).

    Unknown task ids still raise ``ValueError`` as in the SDK.
    """

    def _is_expired(self, stored: StoredTask) -> bool:
        # Overrides a private hook of InMemoryTaskStore (mcp==1.30.0 is pinned exactly).
        if not is_terminal(stored.task.status):
            return False
        return super()._is_expired(stored)

    async def update_task(
        self,
        task_id: str,
        status: TaskStatus | None = None,
        status_message: str | None = None,
    ) -> Task:
        stored = self._tasks.get(task_id)
        if stored is not None and is_terminal(stored.task.status):
            if status is not None and status != stored.task.status:
                log.debug("ignoring %s -> %s for terminal task %s", stored.task.status, status, task_id)
            return Task(**stored.task.model_dump())
        return await super().update_task(task_id, status=status, status_message=status_message)

    async def store_result(self, task_id: str, result: Result) -> None:
        stored = self._tasks.get(task_id)
        if stored is not None and is_terminal(stored.task.status):
            log.debug("dropping result for terminal task %s", task_id)
            return
        await super().store_result(task_id, result)

    async def wait_for_update(self, task_id: str) -> None:
        # The check and the SDK's registration of its event run without an await between them,
        # so an update after the check always reaches the waiter.
        stored = self._tasks.get(task_id)
        if stored is not None and is_terminal(stored.task.status):
            return
        await super().wait_for_update(task_id)


# --------------------------------------------------------------------------------------------
# Task support: one task group per session
# --------------------------------------------------------------------------------------------

#: The session whose ``Server.run()`` is setting up task support (set and read in its own task).
_configuring_session: contextvars.ContextVar[ServerSession] = contextvars.ContextVar("configuring_session")
#: Task group of each live session, for the work of the tasks that session creates.
_session_groups: dict[ServerSession, TaskGroup] = {}


class _CatchAllSpawner:
    """The ``task_group`` that ``run_task`` sees: ``start_soon`` into the caller's session group.

    An exception escaping a task's wrapper is logged instead of ending the session.
    """

    def __init__(self, group: TaskGroup) -> None:
        self._group = group

    def start_soon(self, func: Callable[..., Awaitable[Any]], *args: Any, name: object = None) -> None:
        async def contained() -> None:
            try:
                await func(*args)
            except Exception:
                log.exception("task work wrapper raised; the task's session stays up")

        self._group.start_soon(contained, name=name)


class SessionBoundTaskSupport(TaskSupport):
    """``TaskSupport`` that runs each task's work in the task group of the session creating it.

    The SDK's ``TaskSupport.run()`` (entered once per session by ``Server.run()``) stores each new
    session's task group in one shared attribute and resets it to ``None`` when *any* session
    ends: later ``run_task`` calls in every other live session then fail with "TaskSupport not
    running", and work lands in, and delays the teardown of, whichever session opened last.
    Here ``configure_session()`` (called just before ``run()``, in the same asyncio task) names
    the session, ``run()`` registers that session's own group and cancels the work still running
    in it when the session ends, and ``task_group`` resolves the requesting session's group.
    """

    def configure_session(self, session: ServerSession, *, stateless: bool = False) -> None:
        super().configure_session(session, stateless=stateless)
        _configuring_session.set(session)

    @contextlib.asynccontextmanager
    async def run(self) -> AsyncIterator[None]:
        session = _configuring_session.get()
        async with anyio.create_task_group() as group:
            _session_groups[session] = group
            try:
                yield
            finally:
                del _session_groups[session]
                group.cancel_scope.cancel()  # the session is gone; so are its tasks

    @property
    def task_group(self) -> TaskGroup:
        # request_ctx is what Server.request_context reads: the request being handled.
        group = _session_groups.get(request_ctx.get().session)
        if group is None:
            raise RuntimeError("the requesting session has no task group (it is shutting down)")
        return cast(TaskGroup, _CatchAllSpawner(group))


def enable_fixed_tasks(server: Server[Any, Any]) -> tuple[FinalStateTaskStore, InMemoryTaskMessageQueue]:
    """Enable tasks on ``server`` with every fix of this module; return its store and queue.

    Call it where the SDK's ``DeprecationWarning`` for the tasks API is silenced.
    """
    unique_task_request_ids()
    task_store = FinalStateTaskStore()
    task_queue = InMemoryTaskMessageQueue()
    support = server.experimental.enable_tasks(store=task_store, queue=task_queue)
    # enable_tasks() builds a plain TaskSupport and its default handlers keep that very object;
    # give it the session-bound behaviour in place (same fields, three methods overridden).
    support.__class__ = SessionBoundTaskSupport
    return task_store, task_queue


# --------------------------------------------------------------------------------------------
# Work that stops when its task is cancelled
# --------------------------------------------------------------------------------------------


async def _is_cancelled(task_store: InMemoryTaskStore, task_id: str) -> bool:
    current = await task_store.get_task(task_id)
    return current is None or current.status == TASK_STATUS_CANCELLED


def stop_when_cancelled(work: Work, task_store: InMemoryTaskStore, task_queue: InMemoryTaskMessageQueue) -> Work:
    """Wrap ``work`` so that it stops, without completing or failing, once its task is cancelled.

    The returned coroutine function runs ``work`` beside a watcher that re-reads the task from
    ``task_store`` every :data:`CANCEL_POLL_S` seconds. On ``cancelled`` it cancels ``work``, clears
    the task's queued (undelivered) messages in ``task_queue`` and re-syncs ``task.task`` with the
    store, then returns a placeholder that ``run_task`` discards because the task is already
    terminal. Otherwise ``work``'s result is returned and its exception re-raised unchanged (so
    ``run_task`` fails the task with it).
    """

    async def guarded(task: ServerTaskContext) -> Result:
        outcome: dict[str, Any] = {}

        async with anyio.create_task_group() as group:

            async def run_work() -> None:
                try:
                    outcome["result"] = await work(task)
                except Exception as exc:  # re-raised below, outside the task group
                    outcome["error"] = exc
                finally:
                    group.cancel_scope.cancel()

            async def watch() -> None:
                while not await _is_cancelled(task_store, task.task_id):
                    await anyio.sleep(CANCEL_POLL_S)
                group.cancel_scope.cancel()

            group.start_soon(run_work)
            group.start_soon(watch)

        if await _is_cancelled(task_store, task.task_id):
            await task_queue.clear(task.task_id)
            # With FinalStateTaskStore this changes nothing in the store; it only refreshes the
            # context's own copy, which run_task's wrapper consults before completing.
            with contextlib.suppress(ValueError):  # only if the record vanished
                await task.update_status("cancelled", notify=False)
            log.info("task %s was cancelled; its work stopped", task.task_id)
            return CallToolResult(content=[], isError=True)
        if "error" in outcome:
            raise outcome["error"]
        result: Result = outcome["result"]
        return result

    return guarded
