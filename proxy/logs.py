"""Logging: a request id per HTTP request, and text or JSON lines (config `log_format`).

The application's middleware (`proxy.app`) puts each request's id in `REQUEST_ID` for the time the
request is handled; `RequestIdFilter` copies it onto every log record as `request_id`, so both
formats can show it. JSON lines carry `ts`, `level`, `logger`, `msg`, `request_id` (when set) and
`exc` (a formatted traceback, when there is one).
"""

from __future__ import annotations

import json
import logging
import os
import sys
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Literal, TextIO

from .printable import escaped, json_text, visible_ascii

REQUEST_ID: ContextVar[str | None] = ContextVar("mcp_tasks_proxy_request_id", default=None)
"""The id of the HTTP request being handled (None outside a request)."""

REQUEST_ID_HEADER = "X-Request-Id"
MAX_REQUEST_ID_CHARS = 128

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def request_id_from(header: str | None) -> str:
    """The id of a request: the client's `X-Request-Id` when it is safe to log and echo (1–128
    visible ASCII characters, no spaces or control characters), else a new random one."""
    if header and len(header) <= MAX_REQUEST_ID_CHARS and visible_ascii(header):
        return header
    return os.urandom(16).hex()  # what `secrets.token_hex(16)` returns, three Python calls fewer


class RequestIdFilter(logging.Filter):
    """Adds `request_id` (the current request's id, or None) to every record it sees."""

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "request_id", None) is None:
            record.request_id = REQUEST_ID.get()
        return True


class TextFormatter(logging.Formatter):
    """The classic line, with ` request_id=<id>` appended inside a request. The message is one line
    with its control characters escaped (`proxy/printable.py`: it may quote a client, a backend or a
    stdio server's stderr); a traceback below it keeps its newlines."""

    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)

    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802 - logging's name
        return escaped(super().formatMessage(record))

    def format(self, record: logging.LogRecord) -> str:
        line = escaped(super().format(record), lines=True)
        request_id = getattr(record, "request_id", None)
        return f"{line} request_id={request_id}" if request_id else line


class JsonFormatter(logging.Formatter):
    """One JSON object per line: `ts` (UTC, ISO 8601, milliseconds), `level`, `logger`, `msg`,
    `request_id` when set, `exc` when the record carries an exception."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        request_id = getattr(record, "request_id", None)
        if request_id:
            entry["request_id"] = request_id
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        elif record.stack_info:
            entry["exc"] = self.formatStack(record.stack_info)
        return json_text(json.dumps(entry, ensure_ascii=False))  # C1 and DEL escaped too (C0 JSON escapes itself)


def handler(log_format: Literal["text", "json"], stream: TextIO | None = None) -> logging.Handler:
    """A stream handler (stderr by default) with the request-id filter and the chosen format."""
    result = logging.StreamHandler(stream if stream is not None else sys.stderr)
    result.addFilter(RequestIdFilter())
    result.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    return result


def configure(level: str, log_format: Literal["text", "json"]) -> None:
    """Set up the root logger for `mcp-tasks-proxy serve` (replacing any handlers it had)."""
    logging.basicConfig(level=level.upper(), handlers=[handler(log_format)], force=True)


def announce(log_format: Literal["text", "json"], message: str, stream: TextIO, *, level: int = logging.INFO, **fields: object) -> None:
    """Write one line that is not a log record but is read like one (the `listening on` banner on
    stdout, a refusal to start on stderr): `message` itself in the text format; in the JSON
    format the object a `JsonFormatter` makes of it, under the logger `proxy.cli`, with `fields`
    added (e.g. `url`), so that every line a log shipper reads parses as JSON."""
    if log_format == "json":
        record = logging.LogRecord("proxy.cli", level, __file__, 0, message, None, None)
        entry = {**json.loads(JsonFormatter().format(record)), **fields}
        line = json_text(json.dumps(entry, ensure_ascii=False))
    else:
        line = escaped(message)
    # One write of the whole line: workers of `serve --workers N` share the stream, and an
    # unbuffered one (PYTHONUNBUFFERED) would otherwise get the text and its newline apart.
    stream.write(line + "\n")
    stream.flush()

