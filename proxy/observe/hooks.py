"""The one place the request path looks for a trace: `TRACE` holds the current request's
`proxy.observe.tracing.RequestTrace`, or None (always None while traces are off, so the cost on
the relay path is one context-variable read; opentelemetry is never imported then)."""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any

TRACE: ContextVar[Any] = ContextVar("mcp_tasks_proxy_trace", default=None)
