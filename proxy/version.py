"""What this serving process is: the installed package's version, and whether it took over from
another process by a restart (`proxy/restart.py`); the status page says both."""

from __future__ import annotations

from typing import Any

TAKEN_OVER: dict[str, Any] = {}
"""Set in a process that took over from another: `from_pid`, `at_ms`."""


def version() -> str:
    """The installed package's version (what a restart brought in)."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("mcp-tasks-proxy")
    except PackageNotFoundError:
        return "unknown"
