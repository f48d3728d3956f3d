"""`mcp-tasks-proxy check`: is a configuration usable, without starting the proxy (docs/configuration.md "Checking a file").

Like `nginx -t` before a reload: it reads the file and the flags as `serve` would and checks, in
order, without creating or changing anything:

1. the keys and values (`config.load`: unknown keys with the closest known one, bad values);
2. `workers` > 1: what worker processes need (`workers_refusal`);
3. each backend: an HTTPS URL's TLS files (`tls_ca_file`, `tls_client_cert`, `tls_client_key`)
   load, the key matching the certificate (`request_options`, as `serve` builds them); a stdio
   `command` is found (on the `PATH` of its `env`, else the proxy's) and is executable, and its
   `cwd` is a directory; then HTTPS on the proxy's face: `tls_cert` and `tls_key` load and match;
4. the sealing key: `MCP_TASKS_PROXY_KEY` or `key_file` holds a valid key, or the key in
   `state_dir` does, or `state_dir` is where one can be created (`keys.load_master_key`'s order);
5. the store: SQLite's file passes the checks of its opening, read-only (`inspect_store`), or
   can be created in `state_dir`; a Redis URL answers `PING` within `REDIS_WAIT_S`;
6. the event loop `MCP_TASKS_PROXY_EVENT_LOOP` asks for (`eventloop.loop_factory`).

`serve` runs the same checks before it starts anything (`refusal`; all but the Redis `PING`: it
reaches the store itself when it starts), so what `check` passes `serve` does not refuse at start
for these reasons, and each reason is worded once: `check` prints `error: <reason>`, `serve`
`mcp-tasks-proxy: refusing to start: <reason>` (docs/troubleshooting.md). Not checked unless
`--probe` asks (`probed`): whether another proxy holds the SQLite file now (`check` takes no lock),
whether something listens on the address, and the backends themselves (one that is down when the
file is checked is no fault of the file: the running proxy waits for it). Returns the lines to
print and whether everything held.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import shutil
import socket
import ssl
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from .config import ConfigError, Settings, Upstream, load
from .eventloop import loop_factory
from .keys import ENV_KEY, decode_key
from .redaction import shown_url
from .state.health import display_url
from .state.opening import inspect_store, sqlite_path
from .state.sqlite_faults import StoreInUse, lock_holder
from .upstream.stdio.process import Launch
from .upstream.tls import TlsProblem, load_pair, request_options

REDIS_WAIT_S = 3.0
"""How long a Redis store has to answer `PING` (connecting included)."""
NO_BACKEND = "upstream: at least one backend is required (give --upstream URL, or [[upstream]] tables in the config file)"
"""`create_app`'s words for a configuration without a backend (proxy/app.py)."""


class Problem(Exception):
    """One thing that does not hold; the message is the reason, naming its key or file. `serve_says`:
    `serve`'s line after `mcp-tasks-proxy: ` (by default `refusing to start: <reason>`)."""

    def __init__(self, reason: str, serve_says: str | None = None):
        super().__init__(reason)
        self.serve_says = serve_says or f"refusing to start: {reason}"


def check(path: str | None, overrides: Mapping[str, Any], environ: Mapping[str, str] = os.environ, *,
          probe: bool = False) -> tuple[list[str], bool]:
    """The report of `mcp-tasks-proxy check`: one line per check (`ok: <what>: ...` or `error: <reason>`)
    and whether all held. A configuration that does not load is one error line and nothing else.
    `probe` (`check --probe`): once every check held, the backends are asked as `serve` asks them
    at start (`probed`)."""
    try:
        settings = load(path, dict(overrides))
    except ConfigError as exc:
        return [f"error: {exc}"], False
    lines = [f"ok: {path or 'the flags'}: keys and values ({len(settings.upstream)} backend(s))"]
    held = True
    for name, run in checks(settings, environ):
        try:
            lines.append(f"ok: {name}: {run()}")
        except Problem as exc:
            lines.append(f"error: {exc}")
            held = False
    if probe and held:
        try:
            lines += [f"ok: {line}" for line in asyncio.run(probed(settings))]
        except Problem as exc:
            lines.append(f"error: {exc}")
            held = False
    return lines, held


async def probed(settings: Settings) -> list[str]:
    """What `serve` meets when it starts now, in its order, one line each: the SQLite store not
    held by another process (`_store_free`), the backends asked (`Fleet.refresh_all`, then the
    protected-resource metadata's agreement: a line per backend), the address free to listen on
    (`_listen_free`; first, with workers, as their supervisor binds before they start). Raises
    `Problem` with `serve`'s reason at the first that would make it
    refuse: a store another proxy holds, a stdio command whose first process exits before it
    answers, backends that name different authorization servers, an address in use. A backend that
    does not answer now is no refusal: `serve` starts and waits for it (docs/decisions.md §180)."""
    # One process opens the store, asks the backends, then listens; `serve --workers` binds first (its supervisor).
    lines = [_store_free(settings), *([_listen_free(settings)] if settings.workers > 1 else [])]
    logging.disable(logging.WARNING)  # what the backends' handles log is in the lines returned (or the refusal)
    try:
        lines += await _probed(settings)
    finally:
        logging.disable(logging.NOTSET)
    return lines if settings.workers > 1 else [*lines, _listen_free(settings)]


def _store_free(settings: Settings) -> str:
    """The SQLite file's lock is free (asked without taking it: `lock_holder`)."""
    if settings.store != "sqlite":
        return f"store: {display_url(settings.store)} (shared: no lock)"
    path = sqlite_path(settings)
    holder = lock_holder(path)
    if holder is not None:
        raise Problem(f"store: {StoreInUse.of(path)}")
    return f"store: {path} is not in use by another process"


def _listen_free(settings: Settings) -> str:
    """Nothing listens on the address (`listening.nothing_listens`, which `shared_sockets` asks too)."""
    if settings.port == 0:
        return f"listen: {settings.listen} (an ephemeral port)"
    from .listening import nothing_listens

    try:
        nothing_listens(settings.host, settings.port, first_only=settings.workers > 1)  # as shared_sockets, as asyncio
    except OSError as exc:
        said = cannot_listen(settings, exc)
        raise Problem(said, said) from None
    return f"listen: nothing listens on {settings.listen} now"


def cannot_listen(settings: Settings, exc: OSError) -> str:
    """`serve`'s words (and `check --probe`'s) for an address it cannot listen on (`listen_reason`)."""
    return f"cannot listen on {settings.listen}: {listen_reason(exc)}"


def listen_reason(exc: OSError) -> str:
    """Why an address cannot be listened on: the system's words for the error, or the resolver's
    for a host name that does not resolve (whose negative code the system does not know)."""
    if isinstance(exc, socket.gaierror) or not exc.errno or exc.errno < 0:
        return exc.strerror or str(exc)
    return os.strerror(exc.errno)


async def _probed(settings: Settings) -> list[str]:
    import aiohttp

    from translators.sealing import KEY_BYTES, Keyring

    from .fleet import Fleet
    from .metrics import NO_METRICS
    from .upstream.backend import UnsupportedBackend
    from .upstream.resource_metadata import ResourceMetadata

    async with aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar()) as http:
        fleet = Fleet.build(settings, http, Keyring(os.urandom(KEY_BYTES)), NO_METRICS)  # seals nothing that outlives it
        try:
            await fleet.refresh_all()
            await ResourceMetadata(settings, http, fleet.request_options).check_agreement()
        except (UnsupportedBackend, ConfigError) as exc:
            raise Problem(str(exc)) from None
        finally:
            await fleet.close()
        lines = []
        for member in fleet.members:
            backend = member.backend
            if backend.profile is not None:
                lines.append(f"backend {member.name!r} answers: {backend.profile.summary()}")
            elif backend.challenge is not None:
                lines.append(f"backend {member.name!r} answers: it asks for authorization (a Bearer challenge)")
            else:
                lines.append(f"backend {member.name!r} does not answer now ({backend.down or 'no answer'}): serve starts and waits for it")
        return lines


def checks(settings: Settings, environ: Mapping[str, str], *, serving: bool = False) -> list[tuple[str, Callable[[], str]]]:
    """The checks of `check` and of `serve` before it starts (`refusal`), in order: what each is
    called and what runs it (returns what it found, or raises `Problem`). `serving`: `serve`'s,
    which leave the Redis store's `PING` to the start (it reaches the store then)."""
    return [*((("workers", lambda: _workers(settings)),) if settings.workers > 1 else ()),
            *((("upstream", _no_backend),) if not settings.upstream else ()),
            *((f"backend {u.name!r}", lambda u=u: _backend(u)) for u in settings.upstream),
            *((("tls", lambda: _face(settings)),) if settings.tls_cert is not None else ()),
            ("key", lambda: _key(settings, environ)), ("store", lambda: _store(settings, ping=not serving)),
            ("event loop", lambda: _event_loop(environ)),
            *((("rollout", lambda: _rollout(settings)),) if settings.rollout is not None else ())]


def refusal(settings: Settings, environ: Mapping[str, str] = os.environ) -> str | None:
    """Why `serve` refuses to start with `settings` (its line after `mcp-tasks-proxy: `): the first
    of `checks` that does not hold, in `check`'s words; None when they all hold."""
    for _, run in checks(settings, environ, serving=True):
        try:
            run()
        except Problem as exc:
            return exc.serve_says
    return None


def workers_refusal(settings: Settings) -> str | None:
    """Why `workers` > 1 cannot run with these settings, or None (docs/decisions.md, "Worker processes")."""
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
    reason = workers_refusal(settings)
    if reason is not None:
        raise Problem(f"workers: {reason}", f"configuration error: {reason}")
    return f"{settings.workers} worker processes on {settings.listen}, store {display_url(settings.store)}"


def _event_loop(environ: Mapping[str, str]) -> str:
    try:
        name, _ = loop_factory(environ)
    except (RuntimeError, ValueError) as exc:
        raise Problem(str(exc)) from None
    return name


def _rollout(settings: Settings) -> str:
    """The rollout the file runs (checked with the keys: its backends exist and can take part)."""
    rollout = settings.rollout
    assert rollout is not None
    steps = ", ".join(f"{step:g}" for step in rollout.steps)
    return (f"{rollout.from_} -> {rollout.to}, steps {steps} % of new work, each at least {rollout.step_ms} ms and "
            f"{rollout.min_calls} calls; then {rollout.then}")


def _no_backend() -> str:
    raise Problem(NO_BACKEND)


def _backend(upstream: Upstream) -> str:
    if upstream.url:
        return _http_backend(upstream)
    argv = upstream.command or []
    launch = Launch(upstream.name, argv, upstream.env, upstream.cwd)  # as the proxy runs it, its words for what fails
    if upstream.cwd is not None and not Path(upstream.cwd).is_dir():
        raise Problem(f"backend {upstream.name!r}: its cwd {upstream.cwd!r} is not a directory")
    search = upstream.env.get("PATH", os.environ.get("PATH", os.defpath))
    program = argv[0]
    if os.sep in program:
        where = Path(upstream.cwd or ".") / program if not os.path.isabs(program) else Path(program)
        if not where.exists():
            raise Problem(f"backend {upstream.name!r}: {launch.cannot_start(OSError(errno.ENOENT, os.strerror(errno.ENOENT)))}")
        if not where.is_file() or not os.access(where, os.X_OK):
            raise Problem(f"backend {upstream.name!r}: {launch.cannot_start(OSError(errno.EACCES, os.strerror(errno.EACCES)))}")
        found = str(where)
    else:
        found = shutil.which(program, path=search) or ""
        if not found:
            raise Problem(f"backend {upstream.name!r}: {launch.cannot_start(OSError(errno.ENOENT, os.strerror(errno.ENOENT)))}")
    return "stdio: " + " ".join([found, *argv[1:]])


def _http_backend(upstream: Upstream) -> str:
    parts = urlsplit(upstream.url)
    if not parts.hostname:
        raise Problem(f"backend {upstream.name!r}: url {upstream.url!r} names no host")
    try:
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number in range
    except ValueError:
        raise Problem(f"backend {upstream.name!r}: url {upstream.url!r} has a port that is not a number from 0 to 65535") from None
    try:
        request_options(upstream)  # what `serve` builds at start (`checked_at_start`)
    except ConfigError as exc:
        raise Problem(str(exc)) from None
    if not upstream.url.startswith("https://") or (upstream.tls_ca_file is None and upstream.tls_client_cert is None):
        return shown_url(upstream.url)
    trusted = f"trusts {upstream.tls_ca_file}" if upstream.tls_ca_file else "trusts the system's CAs"
    client = f", client certificate {upstream.tls_client_cert}" if upstream.tls_client_cert else ""
    return f"{shown_url(upstream.url)} (TLS: {trusted}{client})"


def _face(settings: Settings) -> str:
    """HTTPS on the listening socket: `tls_cert` and `tls_key` load and match (docs/configuration.md "HTTPS on the proxy's face")."""
    assert settings.tls_cert is not None and settings.tls_key is not None
    try:
        leaf = load_pair(ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER), ("tls_cert", settings.tls_cert), ("tls_key", settings.tls_key))
    except TlsProblem as exc:
        raise Problem(f"tls: {exc}") from None
    return (f"tls_cert {settings.tls_cert} with tls_key {settings.tls_key} ({leaf.subject.rfc4514_string()}, "
            f"valid until {leaf.not_valid_after_utc:%Y-%m-%d %H:%M} UTC)")


def _key(settings: Settings, environ: Mapping[str, str]) -> str:
    """`keys.load_master_key`'s checks in its order and words, reading only."""
    try:
        if environ.get(ENV_KEY):
            decode_key(environ[ENV_KEY], ENV_KEY)
            return f"from {ENV_KEY}"
        if settings.replicas > 1 and not settings.key_file:
            raise Problem(f"replicas: {settings.replicas} replicas must share one sealing key: set {ENV_KEY} or key_file "
                          "(an auto-created key would differ on each replica)")
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


def _store(settings: Settings, *, ping: bool) -> str:
    """The store's checks at open (`inspect_store`, in `open_store`'s words), then a Redis URL's `PING` when `ping`."""
    try:
        exists = inspect_store(settings)
    except ConfigError as exc:
        raise Problem(str(exc)) from None
    if settings.store == "memory":
        return "memory (task state lives in the process)"
    if settings.store == "sqlite":
        path = sqlite_path(settings)
        return f"sqlite {path}" if exists else f"sqlite {path} (created at the first start: {_creatable(path.parent)})"
    return asyncio.run(_redis(settings.store)) if ping else display_url(settings.store)


async def _redis(url: str) -> str:
    from redis import asyncio as aioredis  # there: `inspect_store`
    from redis.exceptions import RedisError

    client = aioredis.Redis.from_url(url, socket_connect_timeout=REDIS_WAIT_S, socket_timeout=REDIS_WAIT_S)
    try:
        async with asyncio.timeout(REDIS_WAIT_S):
            await client.ping()
    except (RedisError, OSError, TimeoutError) as exc:
        raise Problem(f"store: {display_url(url)} does not answer PING within {REDIS_WAIT_S:g} s: {exc or type(exc).__name__}") from None
    finally:
        await client.aclose()
    return f"{display_url(url)} answers PING"
