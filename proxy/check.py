"""`mcp-tasks-proxy check`: is a configuration usable, without starting the proxy (docs/configuration.md "Checking a file").

Like `nginx -t` before a reload: it reads the file and the flags as `serve` would and checks, in
order, without creating or changing anything:

1. the keys and values (`config.load`: unknown keys with the closest known one, bad values);
2. each backend: an HTTP URL has a host, and its TLS files (`tls_ca_file`, `tls_client_cert`,
   `tls_client_key`) load, the key matching the certificate; a stdio `command` is found (on the
   `PATH` of its `env`, else the proxy's) and is executable, and its `cwd` is a directory;
   then HTTPS on the proxy's face: `tls_cert` and `tls_key` load and the key matches;
3. the sealing key: `MCP_TASKS_PROXY_KEY` or `key_file` holds a valid key, or the key in
   `state_dir` does, or `state_dir` is where one can be created;
4. the store: SQLite's file opens (or can be created) in `state_dir`; a Redis URL answers `PING`
   within `REDIS_WAIT_S`.

Backends are not contacted: one that is down when the file is checked is no fault of the file
(the running proxy waits for it). Returns the lines to print and whether everything held.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sqlite3
import ssl
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from .config import ConfigError, Settings, Upstream, load
from .keys import ENV_KEY, decode_key
from .redaction import shown_url
from .state.health import display_url
from .upstream.tls import TlsProblem, client_context, load_pair

REDIS_WAIT_S = 3.0
"""How long a Redis store has to answer `PING` (connecting included)."""


class Problem(Exception):
    """One thing that does not hold; the message names the key."""


def check(path: str | None, overrides: Mapping[str, Any], environ: Mapping[str, str] = os.environ) -> tuple[list[str], bool]:
    """The report of `mcp-tasks-proxy check`: one line per check (`ok: ...` or `error: ...`) and
    whether all held. A configuration that does not load is one error line and nothing else."""
    try:
        settings = load(path, dict(overrides))
    except ConfigError as exc:
        return [f"error: {exc}"], False
    lines = [f"ok: {path or 'the flags'}: keys and values ({len(settings.upstream)} backend(s))"]
    checks = [*((f"upstream {u.name!r}", lambda u=u: _backend(u)) for u in settings.upstream),
              *((("tls", lambda: _face(settings)),) if settings.tls_cert is not None else ()),
              ("key", lambda: _key(settings, environ)), ("store", lambda: _store(settings)),
              *((("workers", lambda: _workers(settings)),) if settings.workers > 1 else ()),
              *((("rollout", lambda: _rollout(settings)),) if settings.rollout is not None else ())]
    if not settings.upstream:
        checks.insert(0, ("upstream", lambda: _no_backend()))
    held = True
    for name, run in checks:
        try:
            lines.append(f"ok: {name}: {run()}")
        except Problem as exc:
            lines.append(f"error: {name}: {exc}")
            held = False
    return lines, held


def workers_refusal(settings: Settings) -> str | None:
    """Why `workers` > 1 cannot run with these settings, or None (docs/decisions.md, "Worker processes"):
    `serve` refuses to start with it, and `check` says the same."""
    if settings.workers <= 1:
        return None
    if settings.store in ("sqlite", "memory"):
        return (f"workers = {settings.workers} needs a store the processes share: store = \"redis://host:port/db\" "
                f"(the SQLite store belongs to one process, and memory to each)")
    if settings.port == 0:
        return "workers > 1 need a fixed port to share (listen = \"host:port\", not port 0)"
    stdio = [u.name for u in settings.upstream if u.command is not None]
    if stdio:  # docs/decisions.md §139
        return (f"workers > 1 cannot serve a stdio backend ({', '.join(stdio)}): each worker would run its own processes, "
                "and a session opened on one would be unknown to the others; run one worker")
    return None


def _workers(settings: Settings) -> str:
    refusal = workers_refusal(settings)
    if refusal is not None:
        raise Problem(refusal)
    return f"{settings.workers} worker processes on {settings.listen}, store {display_url(settings.store)}"


def _rollout(settings: Settings) -> str:
    """The rollout the file runs (checked with the keys: its backends exist and can take part)."""
    rollout = settings.rollout
    assert rollout is not None
    steps = ", ".join(f"{step:g}" for step in rollout.steps)
    return (f"{rollout.from_} -> {rollout.to}, steps {steps} % of new work, each at least {rollout.step_ms} ms and "
            f"{rollout.min_calls} calls; then {rollout.then}")


def _no_backend() -> str:
    raise Problem("no backend: give --upstream URL or an [[upstream]] table")


def _backend(upstream: Upstream) -> str:
    if upstream.url:
        parts = urlsplit(upstream.url)
        if not parts.hostname:
            raise Problem(f"url {upstream.url!r} names no host")
        try:
            parts.port  # noqa: B018 - raises ValueError for a port that is not a number in range
        except ValueError:
            raise Problem(f"url {upstream.url!r} has a port that is not a number from 0 to 65535") from None
        try:
            context = client_context(upstream)
        except TlsProblem as exc:
            raise Problem(str(exc)) from None
        if context is None:
            return shown_url(upstream.url)
        trusted = f"trusts {upstream.tls_ca_file}" if upstream.tls_ca_file else "trusts the system's CAs"
        client = f", client certificate {upstream.tls_client_cert}" if upstream.tls_client_cert else ""
        return f"{shown_url(upstream.url)} (TLS: {trusted}{client})"
    argv = upstream.command or []
    if upstream.cwd is not None and not Path(upstream.cwd).expanduser().is_dir():
        raise Problem(f"cwd {upstream.cwd!r} is not a directory")
    search = upstream.env.get("PATH", os.environ.get("PATH", os.defpath))
    program = argv[0]
    if os.sep in program:
        where = Path(upstream.cwd or ".").expanduser() / program if not os.path.isabs(program) else Path(program)
        if not where.is_file() or not os.access(where, os.X_OK):
            raise Problem(f"command {program!r} is not an executable file")
        found = str(where)
    else:
        found = shutil.which(program, path=search) or ""
        if not found:
            raise Problem(f"command {program!r} is not found on PATH")
    return "stdio: " + " ".join([found, *argv[1:]])


def _face(settings: Settings) -> str:
    """HTTPS on the listening socket: `tls_cert` and `tls_key` load and match (docs/configuration.md "HTTPS on the proxy's face")."""
    assert settings.tls_cert is not None and settings.tls_key is not None
    try:
        leaf = load_pair(ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER), ("tls_cert", settings.tls_cert), ("tls_key", settings.tls_key))
    except TlsProblem as exc:
        raise Problem(str(exc)) from None
    return (f"tls_cert {settings.tls_cert} with tls_key {settings.tls_key} ({leaf.subject.rfc4514_string()}, "
            f"valid until {leaf.not_valid_after_utc:%Y-%m-%d %H:%M} UTC)")


def _key(settings: Settings, environ: Mapping[str, str]) -> str:
    try:
        if environ.get(ENV_KEY):
            decode_key(environ[ENV_KEY], ENV_KEY)
            return f"from {ENV_KEY}"
        if settings.key_file:
            path = Path(settings.key_file).expanduser()
            try:
                decode_key(path.read_text(), f"key_file {path}")
            except OSError as exc:
                raise Problem(f"key_file: cannot read {path}: {exc.strerror}") from None
            return f"key_file {path}"
        path = Path(settings.state_dir).expanduser() / "key"
        if path.exists():
            try:
                decode_key(path.read_text(), str(path))
            except OSError as exc:
                raise Problem(f"cannot read {path}: {exc.strerror}") from None
            return str(path)
    except ConfigError as exc:
        raise Problem(str(exc)) from None
    if settings.replicas > 1:
        raise Problem(f"replicas: {settings.replicas} replicas must share one sealing key: set {ENV_KEY} or key_file")
    return f"{path} (created at the first start: {_creatable(path.parent)})"


def _creatable(directory: Path) -> str:
    """Where a file in `directory` would be created from (the directory, or its nearest existing
    parent); raises `Problem` when that is not a writable directory."""
    existing = directory
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        raise Problem(f"{directory} cannot be created: {existing} is not a writable directory")
    return f"{existing} is writable"


def _store(settings: Settings) -> str:
    if settings.store == "memory":
        return "memory (task state lives in the process)"
    if settings.store == "sqlite":
        path = Path(settings.state_dir).expanduser() / "tasks.sqlite3"
        if not path.exists():
            return f"sqlite {path} (created at the first start: {_creatable(path.parent)})"
        try:
            with sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=1) as db:
                db.execute("PRAGMA schema_version").fetchone()
        except sqlite3.Error as exc:
            raise Problem(f"sqlite {path} cannot be read: {exc}") from None
        return f"sqlite {path}"
    return asyncio.run(_redis(settings.store))


async def _redis(url: str) -> str:
    try:
        from redis import asyncio as aioredis
        from redis.exceptions import RedisError
    except ImportError:
        raise Problem("a Redis URL needs the redis client: pip install 'mcp-tasks-proxy[redis]'") from None
    client = aioredis.Redis.from_url(url, socket_connect_timeout=REDIS_WAIT_S, socket_timeout=REDIS_WAIT_S)
    try:
        async with asyncio.timeout(REDIS_WAIT_S):
            await client.ping()
    except (RedisError, OSError, TimeoutError) as exc:
        raise Problem(f"{display_url(url)} does not answer PING within {REDIS_WAIT_S:g} s: {exc or type(exc).__name__}") from None
    finally:
        await client.aclose()
    return f"{display_url(url)} answers PING"
