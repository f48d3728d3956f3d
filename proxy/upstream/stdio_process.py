"""One stdio server process: started, read line by line, stopped without leaving a zombie.

The 2025-11-25 stdio transport: the client writes JSON-RPC messages to the server's stdin and
reads them from its stdout, one per line (newline-delimited, no embedded newlines); the server
may write anything to stderr. Here: each stdout line that is a JSON object goes to `on_message`;
a line that is not JSON, or longer than `max_line_bytes`, is logged and skipped (never fatal);
each stderr line goes to the proxy's log with the backend's name. `stop()` closes stdin (EOF),
then sends SIGTERM, then SIGKILL, each after `grace_s`, and always waits for the exit
(docs/behaviour.md §7 "stdio backends"; docs/decisions.md §59).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

log = logging.getLogger(__name__)

READ_CHUNK = 64 * 1024


class StdioProcess:
    """A started server process. `on_message(obj)` gets each decoded stdout line (a dict);
    `on_exit(returncode)` is called once when the process has exited and its output is read."""

    def __init__(self, name: str, argv: Sequence[str], *, env: Mapping[str, str] | None = None, cwd: str | None = None,
                 max_line_bytes: int = 16 * 1024 * 1024, grace_s: float = 2.0,
                 on_message: Callable[[dict[str, Any]], None], on_exit: Callable[[int | None], None]):
        self.name = name
        self.argv = list(argv)
        self.env = {**os.environ, **(env or {})}
        self.cwd = cwd
        self.max_line_bytes = max_line_bytes
        self.grace_s = grace_s
        self.on_message = on_message
        self.on_exit = on_exit
        self.process: asyncio.subprocess.Process | None = None
        self._readers: list[asyncio.Task[None]] = []
        self._waiter: asyncio.Task[None] | None = None
        self.stopping = False

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    async def start(self) -> None:
        """Start the process. Raises `OSError` when the command cannot be run."""
        self.process = await asyncio.create_subprocess_exec(
            *self.argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            env=self.env, cwd=self.cwd, start_new_session=True,
        )
        log.info("backend %s: started %s (pid %d)", self.name, self.argv[0], self.process.pid)
        assert self.process.stdout is not None and self.process.stderr is not None
        self._readers = [asyncio.ensure_future(self._read_stdout(self.process.stdout)),
                         asyncio.ensure_future(self._read_stderr(self.process.stderr))]
        self._waiter = asyncio.ensure_future(self._wait())

    def send(self, message: dict[str, Any]) -> bool:
        """Write one message as a line to the process's stdin; False when the process is gone."""
        process = self.process
        if process is None or process.stdin is None or process.stdin.is_closing() or process.returncode is not None:
            return False
        line = json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode("utf-8") + b"\n"
        try:
            process.stdin.write(line)
        except (ConnectionError, RuntimeError):
            return False
        return True

    async def _lines(self, stream: asyncio.StreamReader, what: str) -> Any:
        """Complete lines of `stream`; a line over the limit is dropped whole (logged once)."""
        pending = b""
        skipping = False
        while True:
            chunk = await stream.read(READ_CHUNK)
            if not chunk:
                if pending and not skipping:
                    yield pending
                return
            pending += chunk
            while True:
                cut = pending.find(b"\n")
                if cut < 0:
                    if len(pending) > self.max_line_bytes:
                        if not skipping:
                            log.warning("backend %s: %s line over %d bytes skipped", self.name, what, self.max_line_bytes)
                        skipping, pending = True, b""
                    break
                line, pending = pending[:cut], pending[cut + 1:]
                if skipping:
                    skipping = False
                    continue
                if len(line) > self.max_line_bytes:
                    log.warning("backend %s: %s line over %d bytes skipped", self.name, what, self.max_line_bytes)
                    continue
                yield line

    async def _read_stdout(self, stream: asyncio.StreamReader) -> None:
        async for line in self._lines(stream, "stdout"):
            line = line.strip()
            if not line:
                continue
            try:
                message = json.loads(line)
            except (ValueError, UnicodeDecodeError):
                log.warning("backend %s: stdout line that is not JSON skipped: %.200r", self.name, line)
                continue
            if not isinstance(message, dict):
                log.warning("backend %s: stdout line that is not a JSON-RPC message skipped: %.200r", self.name, line)
                continue
            try:
                self.on_message(message)
            except Exception:  # a routing bug must not stop the reading
                log.exception("backend %s: message from the process could not be routed", self.name)

    async def _read_stderr(self, stream: asyncio.StreamReader) -> None:
        async for line in self._lines(stream, "stderr"):
            text = line.decode("utf-8", "replace").rstrip()
            if text:
                log.info("backend %s stderr: %s", self.name, text)

    async def _wait(self) -> None:
        assert self.process is not None
        returncode = await self.process.wait()
        with contextlib.suppress(Exception):
            await asyncio.gather(*self._readers)
        if not self.stopping:
            log.warning("backend %s: process %d exited with status %s", self.name, self.process.pid, returncode)
        self.on_exit(returncode)

    async def stop(self) -> None:
        """EOF on stdin, then SIGTERM, then SIGKILL, `grace_s` apart; returns once the process has
        exited and been reaped."""
        self.stopping = True
        process = self.process
        if process is None:
            return
        if process.returncode is None and process.stdin is not None:
            with contextlib.suppress(Exception):
                process.stdin.close()
        for signal_to_send in (None, "terminate", "kill"):
            if signal_to_send is not None and process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    getattr(process, signal_to_send)()
            try:
                await asyncio.wait_for(asyncio.shield(process.wait()), self.grace_s)
                break
            except TimeoutError:
                continue
        if self._waiter is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._waiter
