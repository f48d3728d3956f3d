"""Virtual environments for peer packages, built on demand outside the checkout.

The proxy's own environment carries no MCP SDK. Every peer it is tested against (the official
``mcp`` SDK, FastMCP 3, FastMCP 4 + fastmcp-tasks) needs its own interpreter environment, because
their ``mcp`` major versions clash. This module builds one virtual environment per peer, caches it
and hands back its python executable.

Layout::

    cache_root()/peers/<name>-<hash12>/          the virtual environment
    cache_root()/peers/<name>-<hash12>/.peer-ready   marker written after a successful install
    cache_root()/peers/<name>-<hash12>.lock      fcntl lock file serialising concurrent builders

``<hash12>`` is the first 12 hex digits of the SHA-256 of the interpreter version and the pinned
requirement list, so a new pin or a new python builds a fresh environment beside the old one.

Stdlib only: this module runs inside the proxy's own environment.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["PEERS", "cache_root", "ensure_peer_env", "peer_env_dir"]

#: Exact requirement pins for each peer environment, by peer name.
#: ``mcp==1.30.0`` needs starlette and uvicorn but does not pin them; the versions below are the
#: ones it resolves to and was checked with. The FastMCP entries pin the meta package, the
#: ``fastmcp-slim`` package it wraps, and the MCP SDK, Docket and server stack they resolved to
#: when these pins were checked (FastMCP 3 runs on ``mcp`` 1.x, FastMCP 4 on ``mcp`` 2.x, hence
#: two environments). ``fastmcp`` and ``fastmcp-tasks`` 4.2.x cannot be installed together: keep
#: both at 4.1.4. Add a peer by adding an entry.
PEERS: dict[str, tuple[str, ...]] = {
    "mcp-v1": (
        "mcp==1.30.0",
        "starlette==1.10.0",
        "uvicorn==0.54.0",
    ),
    # v1 server (and v1 client): background tasks on Docket, in-memory backend.
    "fastmcp3": (
        "fastmcp[tasks]==3.4.11",
        "fastmcp-slim==3.4.11",
        "mcp==1.30.0",
        "pydocket==0.27.0",
        "redis==8.1.0",
        "burner-redis==0.1.7",
        "starlette==1.10.0",
        "uvicorn==0.54.0",
    ),
    # v2-modern server and client: the SEP-2663 tasks extension.
    "fastmcp4": (
        "fastmcp==4.1.4",
        "fastmcp-tasks==4.1.4",
        "fastmcp-slim==4.1.4",
        "mcp==2.3.0",
        "mcp-types==2.3.0",
        "httpx2==2.16.2",
        "pydocket==0.27.0",
        "redis==8.0.1",
        "starlette==1.10.0",
        "uvicorn==0.54.0",
    ),
}

_MARKER_NAME = ".peer-ready"
_PIP_TAIL_LINES = 40
#: Upper bound for one ``pip install``; a registry that stops answering must not hang a test run.
_PIP_TIMEOUT_S = 1800.0


def _stderr_log(message: str) -> None:
    print(f"[peers] {message}", file=sys.stderr, flush=True)


def cache_root() -> Path:
    """Return the cache directory: ``$MCP_TASKS_PROXY_CACHE`` if set, else ``~/.cache/mcp-tasks-proxy``."""
    configured = os.environ.get("MCP_TASKS_PROXY_CACHE")
    if configured:
        return Path(configured).expanduser()
    return Path.home() / ".cache" / "mcp-tasks-proxy"


def _python_version() -> str:
    return f"{sys.implementation.name}-{platform.python_version()}"


def _env_fingerprint(requirements: tuple[str, ...]) -> str:
    spec = json.dumps({"python": _python_version(), "requirements": list(requirements)})
    return hashlib.sha256(spec.encode("utf-8")).hexdigest()[:12]


def _requirements(name: str) -> tuple[str, ...]:
    try:
        return PEERS[name]
    except KeyError:
        known = ", ".join(sorted(PEERS))
        raise ValueError(f"unknown peer {name!r}; known peers: {known}") from None


def peer_env_dir(name: str) -> Path:
    """Return the directory the environment of peer ``name`` lives in (it may not exist yet).

    Raises:
        ValueError: ``name`` is not a key of :data:`PEERS`.
    """
    requirements = _requirements(name)
    return cache_root() / "peers" / f"{name}-{_env_fingerprint(requirements)}"


def _env_python(env_dir: Path) -> Path:
    return env_dir / "bin" / "python"


def _is_ready(env_dir: Path) -> bool:
    return (env_dir / _MARKER_NAME).is_file() and _env_python(env_dir).exists()


@contextmanager
def _exclusive_lock(lock_path: Path) -> Iterator[None]:
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "a+b") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def _tail(text: str, lines: int = _PIP_TAIL_LINES) -> str:
    kept = text.strip().splitlines()[-lines:]
    return "\n".join(kept) if kept else "(no output)"


def _run_step(name: str, what: str, argv: list[str], timeout_s: float) -> None:
    try:
        completed = subprocess.run(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        output = exc.output if isinstance(exc.output, str) else (exc.output or b"").decode("utf-8", "replace")
        raise RuntimeError(
            f"peer {name!r}: {what} timed out after {timeout_s:.0f} s; output tail:\n{_tail(output)}"
        ) from None
    if completed.returncode != 0:
        raise RuntimeError(
            f"peer {name!r}: {what} failed with exit status {completed.returncode}; "
            f"output tail:\n{_tail(completed.stdout or '')}"
        )


def _build(name: str, requirements: tuple[str, ...], env_dir: Path, log: Callable[[str], None]) -> None:
    if env_dir.exists():
        log(f"removing incomplete environment {env_dir}")
        shutil.rmtree(env_dir)
    log(f"creating environment for {name} in {env_dir}")
    try:
        _run_step(name, "venv creation", [sys.executable, "-m", "venv", str(env_dir)], timeout_s=300.0)
        log(f"installing {' '.join(requirements)}")
        _run_step(
            name,
            "pip install",
            [
                str(_env_python(env_dir)),
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                *requirements,
            ],
            timeout_s=_PIP_TIMEOUT_S,
        )
    except BaseException:
        shutil.rmtree(env_dir, ignore_errors=True)
        raise
    marker = {"python": _python_version(), "requirements": list(requirements)}
    (env_dir / _MARKER_NAME).write_text(json.dumps(marker, indent=2) + "\n", encoding="utf-8")
    log(f"environment for {name} ready")


def ensure_peer_env(name: str, *, log: Callable[[str], None] = _stderr_log) -> Path:
    """Return the python executable of peer ``name``'s environment, building it first if needed.

    A ready environment (its marker file exists) is reused without touching the network. Otherwise
    any partial directory is removed and the environment is rebuilt with ``sys.executable -m venv``
    and ``pip install`` of the pinned requirements. Concurrent callers, in this or other processes,
    are serialised with ``fcntl.flock`` on the environment's lock file; the loser of the race reuses
    the winner's environment.

    Args:
        name: a key of :data:`PEERS`.
        log: receives one-line progress messages (only when something is built).

    Returns:
        Path of ``<env>/bin/python``.

    Raises:
        ValueError: ``name`` is not a key of :data:`PEERS`.
        RuntimeError: creating the environment or installing into it failed or timed out; the
            message names the peer and ends with the tail of the tool's output.
    """
    requirements = _requirements(name)
    env_dir = peer_env_dir(name)
    if _is_ready(env_dir):
        return _env_python(env_dir)
    with _exclusive_lock(env_dir.with_name(env_dir.name + ".lock")):
        if not _is_ready(env_dir):
            _build(name, requirements, env_dir, log)
    return _env_python(env_dir)
