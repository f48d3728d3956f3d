"""One stdio server process: started, read line by line, stopped with its process group.

The 2025-11-25 stdio transport: the client writes JSON-RPC messages to the server's stdin and
reads them from its stdout, one per line (newline-delimited, no embedded newlines); the server
may write anything to stderr. Here: each stdout line that is a JSON object goes to `on_message`;
a line that is not JSON is logged and skipped; a line longer than `max_line_bytes` is logged and
not kept, only its first and last `KEEP_BYTES` go to `on_long_line` (so that the request it
answers can be answered, docs/decisions.md §72); each stderr line goes to the proxy's log with
the backend's name.

The process is started in a session and process group of its own (`start_new_session`: its
group id is its pid). A launcher such as `npx` runs the server as a grandchild that holds the
pipes: when the launched process exits, the group is ended (SIGTERM, then SIGKILL `grace_s`
later) and the pipes are given up once closed, or `grace_s` after that (docs/decisions.md §72).
`stop()` closes stdin (EOF), then sends SIGTERM, then SIGKILL to the group, each after `grace_s`,
and always waits for the exit (docs/behaviour.md §7 "stdio backends"; docs/decisions.md §59).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
from asyncio.subprocess import SubprocessStreamProtocol
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

READ_CHUNK = 64 * 1024
KEEP_BYTES = 4096
"""Bytes kept of each end of a line over `max_line_bytes`."""


@dataclass
class LongLine:
    """A line over the limit: its length in bytes and its first and last `KEEP_BYTES` (which may
    overlap, or be the whole line)."""

    size: int
    head: bytes
    tail: bytes

    def add(self, piece: bytes) -> None:
        self.size += len(piece)
        if len(self.head) < KEEP_BYTES:
            self.head += piece[: KEEP_BYTES - len(self.head)]
        self.tail = piece[-KEEP_BYTES:] if len(piece) >= KEEP_BYTES else (self.tail + piece)[-KEEP_BYTES:]


class _Protocol(SubprocessStreamProtocol):
    """asyncio's stream protocol of a subprocess, which also says when the process itself has
    exited: `Process.wait()` returns only once its pipes are closed too, which a grandchild
    holding them (the node server `npx` starts) may never do."""

    def __init__(self, limit: int, loop: asyncio.AbstractEventLoop):
        super().__init__(limit=limit, loop=loop)
        self.exited = asyncio.Event()

    def process_exited(self) -> None:
        super().process_exited()
        self.exited.set()


class StdioProcess:
    """A started server process. `on_message(obj)` gets each decoded stdout line (a dict),
    `on_long_line(line)` each stdout line over `max_line_bytes` (a `LongLine`); `on_exit(returncode)`
    is called once when the process has exited, its group has been ended and its output read."""

    def __init__(self, name: str, argv: Sequence[str], *, env: Mapping[str, str] | None = None, cwd: str | None = None,
                 max_line_bytes: int = 16 * 1024 * 1024, grace_s: float = 2.0,
                 on_message: Callable[[dict[str, Any]], None], on_exit: Callable[[int | None], None],
                 on_long_line: Callable[[LongLine], None] | None = None):
        self.name = name
        self.argv = list(argv)
        self.env = {**os.environ, **(env or {})}
        self.cwd = cwd
        self.max_line_bytes = max_line_bytes
        self.grace_s = grace_s
        self.on_message = on_message
        self.on_long_line = on_long_line
        self.on_exit = on_exit
        self.process: asyncio.subprocess.Process | None = None
        self.pgid: int | None = None
        """The process group the process leads (its pid), None before it started."""
        self._exited = asyncio.Event()
        self._readers: list[asyncio.Task[None]] = []
        self._waiter: asyncio.Task[None] | None = None
        self.stopping = False

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    async def start(self) -> None:
        """Start the process in a session and group of its own. Raises `OSError` when the
        command cannot be run."""
        loop = asyncio.get_running_loop()
        transport, protocol = await loop.subprocess_exec(
            lambda: _Protocol(READ_CHUNK, loop), *self.argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, env=self.env, cwd=self.cwd, start_new_session=True,
        )
        self.process = asyncio.subprocess.Process(transport, protocol, loop)
        self.pgid = self.process.pid  # start_new_session: the leader of a new session and group
        self._exited = protocol.exited
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

    async def _lines(self, stream: asyncio.StreamReader) -> AsyncIterator[bytes | LongLine]:
        """Complete lines of `stream` (bytes), a line over the limit as a `LongLine`; the last line
        may end at EOF instead of a newline. The pieces of a line are joined once, when it ends."""
        pieces: list[bytes] = []
        size = 0
        long: LongLine | None = None
        while True:
            chunk = await stream.read(READ_CHUNK)
            if not chunk:
                if long is not None:
                    yield long
                elif pieces:
                    yield b"".join(pieces)
                return
            start = 0
            while True:
                cut = chunk.find(b"\n", start)
                piece = chunk[start:] if cut < 0 else chunk[start:cut]
                if long is not None:
                    long.add(piece)
                elif size + len(piece) > self.max_line_bytes:
                    line = b"".join([*pieces, piece])
                    long = LongLine(len(line), line[:KEEP_BYTES], line[-KEEP_BYTES:])
                    pieces, size = [], 0
                elif piece:
                    pieces.append(piece)
                    size += len(piece)
                if cut < 0:
                    break
                if long is not None:
                    yield long
                else:
                    yield b"".join(pieces)
                pieces, size, long = [], 0, None
                start = cut + 1

    async def _read_stdout(self, stream: asyncio.StreamReader) -> None:
        async for line in self._lines(stream):
            if isinstance(line, LongLine):
                log.warning("backend %s: stdout line over %d bytes skipped", self.name, self.max_line_bytes)
                if self.on_long_line is not None:
                    try:
                        self.on_long_line(line)
                    except Exception:  # a routing bug must not stop the reading
                        log.exception("backend %s: a long line from the process could not be routed", self.name)
                continue
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
        async for line in self._lines(stream):
            if isinstance(line, LongLine):
                log.warning("backend %s: stderr line over %d bytes skipped", self.name, self.max_line_bytes)
                continue
            text = line.decode("utf-8", "replace").rstrip()
            if text:
                log.info("backend %s stderr: %s", self.name, text)

    def _signal_group(self, signal_to_send: int) -> None:
        """Send a signal to the process group the proxy created for the process (never to anything else)."""
        if self.pgid is None:
            return
        try:
            os.killpg(self.pgid, signal_to_send)
        except ProcessLookupError:
            pass  # the group is empty
        except PermissionError:  # a member that changed its user: the leader at least
            if self.process is not None and self.process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    self.process.send_signal(signal_to_send)

    async def _end_group(self) -> None:
        """The launched process has exited; what it started in its group may live on and hold its
        pipes. SIGTERM to the group, SIGKILL `grace_s` later while the pipes are still open, and
        the pipes are given up `grace_s` after that (a process outside the group holds them)."""
        self._signal_group(signal.SIGTERM)
        _, open_pipes = await asyncio.wait(self._readers, timeout=self.grace_s)
        if open_pipes:
            log.warning("backend %s: process group %s still holds the process's output after SIGTERM; SIGKILL", self.name, self.pgid)
            self._signal_group(signal.SIGKILL)
            _, open_pipes = await asyncio.wait(self._readers, timeout=self.grace_s)
        if open_pipes:
            log.warning("backend %s: the process's output is still held after SIGKILL to group %s; given up", self.name, self.pgid)
            for reader in open_pipes:
                reader.cancel()
            await asyncio.gather(*open_pipes, return_exceptions=True)

    async def _wait(self) -> None:
        assert self.process is not None
        await self._exited.wait()
        returncode = self.process.returncode
        if not self.stopping:
            log.warning("backend %s: process %d exited with status %s", self.name, self.process.pid, returncode)
        await self._end_group()
        with contextlib.suppress(Exception):
            await asyncio.gather(*self._readers)
        self.on_exit(returncode)

    async def stop(self) -> None:
        """EOF on stdin, then SIGTERM, then SIGKILL to the process group, `grace_s` apart;
        returns once the process has exited and been reaped and its group has been ended."""
        self.stopping = True
        process = self.process
        if process is None:
            return
        if process.returncode is None and process.stdin is not None:
            with contextlib.suppress(Exception):
                process.stdin.close()
        for signal_to_send in (None, signal.SIGTERM, signal.SIGKILL):
            if signal_to_send is not None and not self._exited.is_set():
                self._signal_group(signal_to_send)
            try:
                await asyncio.wait_for(self._exited.wait(), self.grace_s)
                break
            except TimeoutError:
                continue
        if self._waiter is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._waiter

    async def kill(self) -> None:
        """SIGKILL to the process group at once (a process found hung: a stopped process takes no
        other signal), then wait as `stop()` does."""
        self.stopping = True
        if self.process is None or (self._waiter is not None and self._waiter.done()):
            return
        self._signal_group(signal.SIGKILL)
        if self._waiter is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._waiter
