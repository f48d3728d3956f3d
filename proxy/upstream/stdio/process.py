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
import shlex
import signal
from asyncio.subprocess import SubprocessStreamProtocol
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from translators import jsonrpc

log = logging.getLogger(__name__)
_SCAN = json.JSONDecoder().scan_once
"""The JSON value at an index of a str and the index after it (raises `JSONDecodeError`, or
`StopIteration` when no value begins there): `json.loads` without its checks of what it is given."""

READ_CHUNK = 64 * 1024
STDERR_TAIL = 5
"""The last stderr lines kept (`StdioProcess.stderr_tail`), each up to `STDERR_TAIL_CHARS`."""
STDERR_TAIL_CHARS = 300
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


class LineSplitter:
    """The lines of a byte stream fed in pieces (sans-IO): `feed(chunk)` returns the lines it
    completed, each as bytes without its newline, a line over `limit` bytes as a `LongLine`;
    `end()` the last line when the stream ended without a newline. Each chunk is searched once
    and the pieces of a line are joined once, when it ends."""

    __slots__ = ("limit", "_pieces", "_size", "_long")

    def __init__(self, limit: int):
        self.limit = limit
        self._pieces: list[bytes] = []
        self._size = 0
        self._long: LongLine | None = None

    def feed(self, chunk: bytes) -> list[bytes | LongLine]:
        done: list[bytes | LongLine] = []
        start = 0
        while True:
            cut = chunk.find(b"\n", start)
            piece = chunk[start:] if cut < 0 else chunk[start:cut]
            if self._long is not None:
                self._long.add(piece)
            elif self._size + len(piece) > self.limit:
                line = b"".join([*self._pieces, piece])
                self._long = LongLine(len(line), line[:KEEP_BYTES], line[-KEEP_BYTES:])
                self._pieces, self._size = [], 0
            elif piece:
                self._pieces.append(piece)
                self._size += len(piece)
            if cut < 0:
                return done
            if self._long is not None:
                done.append(self._long)
            elif len(self._pieces) == 1:
                done.append(self._pieces[0])
            else:
                done.append(b"".join(self._pieces))
            self._pieces, self._size, self._long = [], 0, None
            start = cut + 1

    def end(self) -> list[bytes | LongLine]:
        last: list[bytes | LongLine] = []
        if self._long is not None:
            last.append(self._long)
        elif self._pieces:
            last.append(b"".join(self._pieces))
        self._pieces, self._size, self._long = [], 0, None
        return last


class _Protocol(SubprocessStreamProtocol):
    """asyncio's stream protocol of a subprocess (kept for stdin's writer and its flow control),
    with stdout and stderr taken as lines where the event loop hands their bytes over: no stream
    reader, no task woken per message (issue 25). `on_stdout` / `on_stderr` get each line;
    `closed[fd]` (1, 2) is done when that pipe has closed (its last line given).
    Also says when the process itself has exited: `Process.wait()` returns only once its pipes
    are closed too, which a grandchild holding them (the node server `npx` starts) may never do."""

    def __init__(self, limit: int, loop: asyncio.AbstractEventLoop, max_line_bytes: int,
                 on_stdout: Callable[[bytes | LongLine], None], on_stderr: Callable[[bytes | LongLine], None]):
        super().__init__(limit=limit, loop=loop)
        self.exited = asyncio.Event()
        self._lines = {1: (LineSplitter(max_line_bytes), on_stdout), 2: (LineSplitter(max_line_bytes), on_stderr)}
        self.closed: dict[int, asyncio.Future[None]] = {fd: loop.create_future() for fd in self._lines}

    def pipe_data_received(self, fd: int, data: bytes | str) -> None:
        splitter, deliver = self._lines[fd]
        for line in splitter.feed(data if isinstance(data, bytes) else data.encode()):
            deliver(line)

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        if fd in self._lines:
            splitter, deliver = self._lines[fd]
            for line in splitter.end():
                deliver(line)
            if not self.closed[fd].done():
                self.closed[fd].set_result(None)
        super().pipe_connection_lost(fd, exc)

    def process_exited(self) -> None:
        super().process_exited()
        self.exited.set()

    def read_directly(self, transport: asyncio.SubprocessTransport) -> None:
        """Take stdout's and stderr's bytes from their pipes' transports as they are read, in the
        same callback. asyncio's subprocess transport hands each piece on with `call_soon`, one
        more handle and turn of the loop per message; the pipes' own protocols still get every
        other event (EOF, the pipe's end), so the process's exit is told exactly as before."""
        for fd in self._lines:
            pipe = transport.get_pipe_transport(fd)  # asyncio's or uvloop's read pipe (which need not subclass ReadTransport)
            if pipe is not None and hasattr(pipe, "set_protocol") and not pipe.is_closing():
                pipe.set_protocol(_DirectPipe(pipe.get_protocol(), fd, self.pipe_data_received))


class _DirectPipe(asyncio.Protocol):
    """A read pipe's protocol that gives its data to `deliver(fd, data)` at once and every other
    event to the protocol it stands in for (`inner`, the subprocess transport's own)."""

    __slots__ = ("inner", "fd", "deliver")

    def __init__(self, inner: asyncio.BaseProtocol, fd: int, deliver: Callable[[int, bytes], None]):
        self.inner = inner
        self.fd = fd
        self.deliver = deliver

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        self.deliver(self.fd, data)

    def eof_received(self) -> bool | None:
        eof_received = getattr(self.inner, "eof_received", None)
        return eof_received() if eof_received is not None else None

    def connection_lost(self, exc: Exception | None) -> None:
        self.inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()


def decode_line(line: bytes) -> tuple[Any, bytes | None]:
    """A stripped stdout line decoded as `json.loads` does, and the line again when it is strict
    UTF-8 text that may be passed on as it is (else None: surrogates written as UTF-8, a byte order
    mark, UTF-16 or 32, or not an object). Raises what `json.loads` raises, or `StopIteration`."""
    if line[:1] != b"{":
        return json.loads(line), None
    try:
        text = line.decode()
    except UnicodeDecodeError:
        return json.loads(line), None
    message, end = _SCAN(text, 0)
    if end != len(text):
        raise ValueError("extra data after the JSON object")
    return message, line


@dataclass(frozen=True, slots=True)
class Launch:
    """How a stdio server is run: its backend's `name`, its `argv`, the `env` added to the proxy's
    and its `cwd`, the longest stdout line taken (`max_line_bytes`), and how long a stop waits
    after SIGTERM before SIGKILL (`grace_s`)."""

    name: str
    argv: Sequence[str]
    env: Mapping[str, str] | None = None
    cwd: str | None = None
    max_line_bytes: int = 16 * 1024 * 1024
    grace_s: float = 2.0

    restarts = True
    """A lost process is started again (with backoff): its slot serves every session to come."""
    noun = "the process"
    """What the slot's log lines and errors call the server at the other end."""
    gone = "the process exited"
    """What the slot's log lines and errors say when the channel ended."""

    def open(self, *, on_message: Callable[[dict[str, Any], bytes | None], None], on_exit: Callable[[int | None], None],
             on_long_line: Callable[[LongLine], None] | None = None) -> StdioProcess:
        """The channel to run (not started yet): a process run as this says."""
        return StdioProcess(self, on_message=on_message, on_exit=on_exit, on_long_line=on_long_line)

    def cannot_start(self, exc: OSError) -> str:
        """Why the first start failed for good when starting raised `exc`."""
        return f"its command {shlex.join(self.argv)!r} cannot be run: {exc.strerror or exc}"

    def not_started(self, exc: OSError) -> str:
        """Why an attempt to start failed when starting raised `exc` (each attempt's log line)."""
        return f"cannot start {self.argv[0]!r}: {exc.strerror or exc}"


class StdioProcess:
    """A started server process, run as `launch` says. `on_message(obj, line)` gets each decoded stdout line (a dict,
    and the line's bytes when they are UTF-8 text that may be passed on as they are, else None),
    `on_long_line(line)` each stdout line over `max_line_bytes` (a `LongLine`); `on_exit(returncode)`
    is called once when the process has exited, its group has been ended and its output read."""

    def __init__(self, launch: Launch, *, on_message: Callable[[dict[str, Any], bytes | None], None],
                 on_exit: Callable[[int | None], None], on_long_line: Callable[[LongLine], None] | None = None):
        self.name = launch.name
        self.argv = list(launch.argv)
        self.env = {**os.environ, **(launch.env or {})}
        self.cwd = launch.cwd
        self.max_line_bytes = launch.max_line_bytes
        self.grace_s = launch.grace_s
        self.on_message = on_message
        self.on_long_line = on_long_line
        self.on_exit = on_exit
        self.process: asyncio.subprocess.Process | None = None
        self._transport: asyncio.SubprocessTransport | None = None
        self._stdin: asyncio.WriteTransport | None = None
        """The process's stdin pipe, written directly (`send_line`)."""
        self.pgid: int | None = None
        """The process group the process leads (its pid), None before it started."""
        self._exited = asyncio.Event()
        self._readers: list[asyncio.Future[None]] = []
        """Done when stdout, stderr have closed (their last line given)."""
        self._waiter: asyncio.Task[None] | None = None
        self.stopping = False
        self.stderr_tail: deque[str] = deque(maxlen=STDERR_TAIL)
        """The last lines the process wrote to stderr (for why a process that will not start failed)."""

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def ended(self) -> str:
        """Why the process is gone, for log lines and errors (it has exited)."""
        code = self.process.returncode if self.process is not None else None
        return f"the process exited with status {code}"

    def ended_before_initialize(self) -> str:
        """Why a process that exited before answering `initialize` failed: its command, how it ended
        (its exit status, or the signal that ended it) and its last stderr lines."""
        code = self.process.returncode if self.process is not None else None
        how = f"was ended by signal {-code}" if code is not None and code < 0 else f"exited with status {code}"
        tail = " | ".join(self.stderr_tail)
        return (f"its command {shlex.join(self.argv)!r} {how} before answering initialize"
                + (f"; its last stderr lines: {tail}" if tail else "; it wrote nothing to stderr"))

    async def start(self) -> None:
        """Start the process in a session and group of its own. Raises `OSError` when the
        command cannot be run."""
        loop = asyncio.get_running_loop()

        def protocol_factory() -> _Protocol:
            return _Protocol(READ_CHUNK, loop, self.max_line_bytes, self._stdout_line, self._stderr_line)

        transport, protocol = await loop.subprocess_exec(
            protocol_factory, *self.argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, env=self.env, cwd=self.cwd, start_new_session=True,
        )
        protocol.read_directly(transport)
        self.process = asyncio.subprocess.Process(transport, protocol, loop)
        self._transport = transport
        self._stdin = cast(asyncio.WriteTransport, transport.get_pipe_transport(0))  # (uvloop's need not subclass it)
        self.pgid = self.process.pid  # start_new_session: the leader of a new session and group
        self._exited = protocol.exited
        log.info("backend %s: started %s (pid %d)", self.name, self.argv[0], self.process.pid)
        self._readers = list(protocol.closed.values())
        self._waiter = asyncio.ensure_future(self._wait())

    def send(self, message: dict[str, Any]) -> bool:
        """Write one message as a line to the process's stdin; False when the process is gone."""
        return self.send_line(jsonrpc.dumps(message))

    def send_line(self, line: bytes) -> bool:
        """Write one message's JSON (on one line, without its newline) to the process's stdin;
        False when the process is gone."""
        stdin, transport = self._stdin, self._transport
        if stdin is None or transport is None or stdin.is_closing() or transport.get_returncode() is not None:
            return False
        line += b"\n"
        try:
            stdin.write(line)  # the pipe's transport, as the stream writer would (the proxy never drains it)
        except (ConnectionError, RuntimeError):
            return False
        return True

    def _stdout_line(self, line: bytes | LongLine) -> None:
        """One stdout line: a JSON object goes to `on_message`, a long line to `on_long_line`,
        anything else is logged and skipped. Never raises (a routing bug must not stop the reading)."""
        if isinstance(line, LongLine):
            log.warning("backend %s: stdout line over %d bytes skipped", self.name, self.max_line_bytes)
            if self.on_long_line is not None:
                try:
                    self.on_long_line(line)
                except Exception:
                    log.exception("backend %s: a long line from the process could not be routed", self.name)
            return
        line = line.strip()
        if not line:
            return
        try:
            message, text = decode_line(line)
        except (ValueError, UnicodeDecodeError, StopIteration, RecursionError):  # (nested too deeply)
            log.warning("backend %s: stdout line that is not JSON skipped: %.200r", self.name, line)
            return
        if not isinstance(message, dict):
            log.warning("backend %s: stdout line that is not a JSON-RPC message skipped: %.200r", self.name, line)
            return
        try:
            self.on_message(message, text)
        except Exception:
            log.exception("backend %s: message from the process could not be routed", self.name)

    def _stderr_line(self, line: bytes | LongLine) -> None:
        if isinstance(line, LongLine):
            log.warning("backend %s: stderr line over %d bytes skipped", self.name, self.max_line_bytes)
            return
        text = line.decode("utf-8", "replace").rstrip()
        if text:
            self.stderr_tail.append(text[:STDERR_TAIL_CHARS])
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
        await asyncio.gather(*self._readers, return_exceptions=True)  # given up ones are cancelled
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
