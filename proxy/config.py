"""Configuration: one validated model, read from TOML (`tomllib`) and overridden by CLI flags.

Every setting is documented in `config.example.toml` and `docs/configuration.md`. Errors name the
key and what was expected (`ConfigError`).
"""

from __future__ import annotations

import difflib
import errno
import os
import stat
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator

from .redaction import given_value
from .rollout.settings import Rollout, check_rollout, unknown_key_model

DialectSetting = Literal["auto", "v1", "v2-session", "v2-modern"]
MIN_LIVENESS_TIMEOUT_MS = 100
MAX_LIVENESS_TIMEOUT_MS = 3_600_000
OWN_PREFIX = "x-mcp-tasks-proxy-"
"""The (case-folded) prefix of the headers the proxy sends its stdio connectors (`proxy.upstream.stdio.bridge`)."""
_TCHARS = frozenset("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


def header_fields(fields: Mapping[str, str] | list[str]) -> None:
    """Check header field names (RFC 9110 §5.1: a token, no spaces) and, for a mapping, their values
    (no CR, LF or NUL: RFC 9110 §5.5). Raises `ValueError` naming the first bad one; a name that is
    not a token would never match a client's header, and one with a line break would split a head."""
    for name in fields:
        if not name or not set(name) <= _TCHARS:
            raise ValueError(f"{name!r} is not a header name (letters, digits and !#$%&'*+-.^_`|~ only, no spaces)")
        if isinstance(fields, Mapping) and any(c in fields[name] for c in "\r\n\0"):
            raise ValueError(f"the value of {name} holds a line break or NUL")


def _pair(cert: str | None, key: str | None, cert_key: str, key_key: str) -> None:
    if (cert is None) != (key is None):  # a certificate and its key go together
        raise ValueError(f"{cert_key} and {key_key} go together: give both (the certificate chain and its private key) or neither")


class ConfigError(Exception):
    """A configuration file or flag that cannot be used; the message names the key."""


class Upstream(BaseModel):
    """One backend: `name` (used in logs, errors and sealed ids; unique), `url` of its MCP endpoint,
    `dialect` ("auto" = probe), `weight` (its share of new sessions and calls among the backends;
    0: none), extra `headers` sent on every upstream request (never an `Authorization`), `probe_headers`
    sent on the proxy's probes only (the operator's credentials for a protected backend,
    docs/configuration.md "Servers behind OAuth"), `drain` (no new work; what is bound to
    it runs to its end, docs/decisions.md §84), `plain_ids` (plain ids an older proxy handed out
    for it as the only backend are still routed to it, docs/decisions.md §83), `session_task_ids`
    (how the task ids of a session relayed to it reach its client, decision 190). Instead of `url`, a stdio server the proxy
    runs: `command` (argv, no shell), with `env` (added to the proxy's environment), `cwd`,
    `process_scope`, `max_processes` (in all), `max_processes_per_principal` (started for one
    `Authorization`; docs/decisions.md §71), `max_line_bytes`, `stop_grace_ms` and
    `liveness_timeout_ms`
    (docs/configuration.md "stdio backends")."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(default="main", min_length=1, max_length=64)
    url: str = ""
    transport: Literal["auto", "streamable-http", "sse"] = "auto"
    """How `url` is spoken: Streamable HTTP, the 2024-11-05 HTTP+SSE transport (`sse`), or `auto`
    (the probe tells them apart; docs/decisions.md §171)."""
    command: list[str] | None = Field(default=None, min_length=1)
    env: dict[str, str] = Field(default_factory=dict)
    cwd: str | None = None
    process_scope: Literal["shared", "capabilities", "principal"] = "capabilities"
    max_processes: int = Field(default=4, ge=1, le=64)
    max_processes_per_principal: int = Field(default=2, ge=1, le=64)
    max_line_bytes: int = Field(default=16 * 1024 * 1024, ge=1024)
    stop_grace_ms: int = Field(default=2_000, gt=0)
    liveness_timeout_ms: int = 30_000
    dialect: DialectSetting = "auto"
    weight: int = Field(default=1, ge=0, le=1000)
    headers: dict[str, str] = Field(default_factory=dict)
    drain: bool = False
    plain_ids: bool = False
    session_task_ids: Literal["plain", "sealed"] = "plain"
    """How the task ids of a session relayed to this HTTP backend reach its client, for sessions
    begun from now on: "plain", the backend's own (the session id routes them); "sealed", sealed with
    backend and session as before decision 190 (the proxy then confines them to their session).
    A stdio backend's are always sealed."""
    probe_headers: dict[str, str] = Field(default_factory=dict)
    hold_tasks: Literal["auto", "off"] | None = None
    """Held tasks for this backend's tools without task support (None: the top-level `hold_tasks`;
    docs/behaviour.md §9)."""
    hold_after_ms: int = Field(default=1_000, ge=0, le=3_600_000)
    """How long a call may run before it becomes a held task."""
    hold_tools: list[str] = Field(default_factory=list)
    """Tools of a backend that offers tasks which the proxy holds all the same (each one it declares
    `forbidden`); a backend without tasks has all its tools held (docs/decisions.md §151)."""
    shadow_of: str | None = None
    """This backend is a candidate shadowing the backend named (docs/configuration.md "Shadowing")."""
    shadow_percent: float = Field(default=100.0, ge=0, le=100)
    shadow_tools: list[str] = Field(default_factory=list)
    shadow_ignore: list[str] = Field(default_factory=list)
    shadow_queue: int = Field(default=64, ge=1, le=10_000)
    shadow_concurrency: int = Field(default=4, ge=1, le=64)
    shadow_timeout_ms: int = Field(default=30_000, gt=0)
    shadow_max_body_bytes: int = Field(default=4 * 1024 * 1024, ge=1024, le=32 * 1024 * 1024)
    """The most a comparison reads of one answer: over it, nothing is compared and the comparison is
    counted `too_large` (a candidate's answer is not read on; docs/behaviour.md §8 7.)."""
    tls_ca_file: str | None = None
    tls_client_cert: str | None = None
    tls_client_key: str | None = None
    tls_server_name: str | None = Field(default=None, pattern=r"^[A-Za-z0-9.-]{1,253}$")
    """TLS to an https backend: CA bundle, client certificate and key, name checked (docs/configuration.md "TLS to backends")."""

    @field_validator("hold_tools")
    @classmethod
    def _tool_names(cls, value: list[str]) -> list[str]:
        if any(not name for name in value):
            raise ValueError("a tool name in hold_tools is empty")
        return value

    @field_validator("shadow_ignore")
    @classmethod
    def _ignore_paths(cls, value: list[str]) -> list[str]:
        from translators.shadow import parse_path

        for path in value:
            parse_path(path)  # ValueError naming the path
        return value

    @model_validator(mode="after")
    def _shadow(self) -> Upstream:
        shadow_keys = sorted(k for k in self.model_fields_set if k.startswith("shadow_") and k != "shadow_of")
        if self.shadow_of is None:
            if shadow_keys:
                raise ValueError(f"{', '.join(shadow_keys)}: only for a shadow backend; give shadow_of (the name of the backend "
                                 "this one shadows)")
            return self
        if self.shadow_of == self.name:
            raise ValueError(f"shadow_of names this backend itself ({self.name!r}); name the backend it shadows")
        if "weight" in self.model_fields_set and self.weight != 0:
            raise ValueError(f"a shadow backend (shadow_of = {self.shadow_of!r}) takes no client traffic of its own: "
                             f"leave weight out or set it to 0 (got {self.weight})")
        if self.plain_ids or self.drain:
            raise ValueError("a shadow backend takes no client traffic: plain_ids and drain do not apply to it")
        self.weight = 0
        return self

    @field_validator("headers")
    @classmethod
    def _no_credentials(cls, value: dict[str, str]) -> dict[str, str]:
        header_fields(value)
        if any(name.lower() == "authorization" for name in value):
            raise ValueError("must not hold Authorization: it would be sent for clients that have no credentials of their own "
                             "(a client's request carries its own); give the probe's credentials as probe_headers "
                             "(docs/configuration.md \"Servers behind OAuth\")")
        return value

    @field_validator("probe_headers")
    @classmethod
    def _probe_headers_over_http(cls, value: dict[str, str], info: ValidationInfo) -> dict[str, str]:
        header_fields(value)
        if value and info.data.get("command") is not None:
            raise ValueError("are for a backend with a url; a stdio server takes its credentials from env")
        return value

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if value and not value.startswith(("http://", "https://")):
            raise ValueError("must be an http:// or https:// URL")
        return value

    @field_validator("liveness_timeout_ms")
    @classmethod
    def _liveness(cls, value: int) -> int:
        if value != 0 and not MIN_LIVENESS_TIMEOUT_MS <= value <= MAX_LIVENESS_TIMEOUT_MS:
            raise ValueError(f"must be 0 (off) or {MIN_LIVENESS_TIMEOUT_MS}..{MAX_LIVENESS_TIMEOUT_MS} ms")
        return value

    @model_validator(mode="after")
    def _url_or_command(self) -> Upstream:
        if bool(self.url) == (self.command is not None):
            raise ValueError("give either url (an HTTP backend) or command (a stdio server the proxy runs), not both")
        if self.command is not None and "transport" in self.model_fields_set:
            raise ValueError("transport is for a backend with a url; a command is a stdio server")
        tls = sorted(k for k in self.model_fields_set if k.startswith("tls_") and getattr(self, k) is not None)
        if tls and not self.url.startswith("https://"):
            raise ValueError(f"{', '.join(tls)}: only for a backend whose url is https://")
        _pair(self.tls_client_cert, self.tls_client_key, "tls_client_cert", "tls_client_key")
        if "max_processes_per_principal" in self.model_fields_set and self.max_processes_per_principal > self.max_processes:
            raise ValueError(f"max_processes_per_principal ({self.max_processes_per_principal}) cannot be more than "
                             f"max_processes ({self.max_processes})")
        return self

    @property
    def principal_processes(self) -> int:
        """The most processes started for one principal: `max_processes_per_principal`, at most
        `max_processes` (the default 2 with `max_processes = 1` is 1)."""
        return min(self.max_processes_per_principal, self.max_processes)

    @property
    def address(self) -> str:
        """The URL, or the command of a stdio backend, for log lines."""
        return self.url or "stdio: " + " ".join(self.command or ())


class Settings(BaseModel):
    """All settings. Durations are milliseconds, sizes bytes."""

    model_config = ConfigDict(extra="forbid")

    listen: str = "127.0.0.1:8080"
    path: str = "/mcp"
    upstream: list[Upstream] = Field(default_factory=list)
    max_body_bytes: int = Field(default=4 * 1024 * 1024, gt=0)
    body_timeout_ms: int = Field(default=30_000, gt=0)
    header_timeout_ms: int = Field(default=10_000, gt=0)
    idle_timeout_ms: int = Field(default=75_000, gt=0)
    max_connections: int = Field(default=10_000, gt=0)
    listen_backlog: int = Field(default=1024, gt=0)
    overload_lag_ms: int = Field(default=250, ge=0)
    state_dir: str = Field(default_factory=lambda: default_state_dir())
    key_file: str | None = None
    store: str = "sqlite"
    store_timeout_ms: int = Field(default=2_000, gt=0)
    workers: int = Field(default=1, ge=1)
    replicas: int = Field(default=1, ge=1)
    identity_header: str | None = None
    forward_headers: list[str] = Field(default_factory=list)
    task_ttl_ms: int = Field(default=3_600_000, ge=0)
    optional_tools: Literal["task", "sync"] = "task"
    required_without_extension: Literal["reject", "wait"] = "reject"
    v1_session_scope: Literal["principal", "task"] = "principal"
    input_capture_wait_ms: int = Field(default=250, ge=0)
    request_state_ttl_ms: int = Field(default=300_000, gt=0)
    cache_ttl_ms: int = Field(default=0, ge=0)
    max_task_state_ms: int = Field(default=3_600_000, gt=0)
    max_tasks: int = Field(default=10_000, gt=0)
    probe_interval_ms: int = Field(default=60_000, gt=0)
    upstream_timeout_ms: int = Field(default=300_000, gt=0)
    reconnect_wait_ms: int = Field(default=5_000, ge=0)
    health_interval_ms: int = Field(default=1_000, ge=0)
    wait_poll_ms: int = Field(default=500, gt=0)
    hold_tasks: Literal["auto", "off"] = "auto"
    hold_max_ms: int = Field(default=3_600_000, gt=0)
    max_held_calls: int = Field(default=1_000, ge=0)
    max_held_per_principal: int = Field(default=100, ge=0)
    advertise_task_support: Literal["required", "optional", "forbidden"] = "optional"
    list_page_size: int = Field(default=50, gt=0, le=1000)
    max_sessions: int = Field(default=10_000, gt=0)
    session_idle_ms: int = Field(default=3_600_000, gt=0)
    replay_events: int = Field(default=256, ge=0)
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    log_format: Literal["text", "json"] = "text"
    shutdown_timeout_ms: int = Field(default=30_000, gt=0)
    status_token: str | None = Field(default=None, min_length=16)
    replica_name: str | None = Field(default=None, pattern=r"^[A-Za-z0-9._:-]{1,64}$")
    traces: Literal["off", "otlp"] = "off"
    traces_endpoint: str | None = None
    public_url: str | None = None
    resource_backend: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    """HTTPS on the listening socket: PEM certificate chain and key (docs/configuration.md "HTTPS on the proxy's face")."""

    @model_validator(mode="after")
    def _tls_pair(self) -> Settings:
        _pair(self.tls_cert, self.tls_key, "tls_cert", "tls_key")
        return self

    @field_validator("public_url")
    @classmethod
    def _public_url(cls, value: str | None) -> str | None:
        if value is None:
            return value
        problem = "must be the http:// or https:// URL clients reach the MCP endpoint at, without query or fragment"
        if not value.startswith(("http://", "https://")) or "?" in value or "#" in value:
            raise ValueError(problem)
        if any(ord(c) < 0x21 or ord(c) == 0x7F for c in value):
            raise ValueError("must not hold spaces or control characters (it goes into WWW-Authenticate headers)")
        authority = value.partition("://")[2].partition("/")[0]
        host, colon, port = authority.rpartition(":") if not authority.endswith("]") else (authority, "", "")
        if not colon:
            host = authority
        if not host or "@" in authority or (colon and not (port.isdigit() and 0 < int(port) <= 65535)):
            raise ValueError(problem + ", with a host and, if any, a port from 1 to 65535 (no user or password)")
        return value

    @field_validator("forward_headers")
    @classmethod
    def _not_the_proxys_own(cls, value: list[str]) -> list[str]:
        """The `X-Mcp-Tasks-Proxy-` headers are the proxy's own to its stdio connectors (probe,
        own sessions, the caller a process is for: docs/decisions.md §144): never a client's."""
        header_fields(value)
        own = [name for name in value if name.lower().startswith(OWN_PREFIX)]
        if own:
            raise ValueError(f"{', '.join(own)}: headers named X-Mcp-Tasks-Proxy-* are the proxy's own and are never "
                             "forwarded from a client")
        return value

    @field_validator("identity_header")
    @classmethod
    def _identity_header_name(cls, value: str | None) -> str | None:
        """A header name a client sends (docs/behaviour.md §6 "Principal"), not one of the proxy's own."""
        if value is not None:
            header_fields([value])
            if value.lower().startswith(OWN_PREFIX):
                raise ValueError("headers named X-Mcp-Tasks-Proxy-* are the proxy's own, not a caller's identity")
        return value

    @field_validator("resource_backend")
    @classmethod
    def _resource_backend_named(cls, value: str | None, info: ValidationInfo) -> str | None:
        names = [u.name for u in info.data.get("upstream") or ()]
        if value is not None and value not in names:
            raise ValueError(f"names no configured backend (backends: {', '.join(names) or 'none'})")
        return value
    balance: Literal["picks", "live-sessions"] = "picks"
    """How weights split new sessions (docs/configuration.md "What weights split", docs/decisions.md §84)."""
    remove_with_work: list[str] = Field(default_factory=list)
    """Backends a reload may remove although work is still bound to it (docs/decisions.md §84)."""
    rollout: Rollout | None = None
    """A canary rollout the proxy runs between two backends (docs/configuration.md "Rollout", `proxy/rollout/`)."""

    @field_validator("rollout")
    @classmethod
    def _rollout_backends(cls, value: Rollout | None, info: ValidationInfo) -> Rollout | None:
        if value is not None and "upstream" in info.data:  # a bad [[upstream]] is reported alone
            check_rollout(value, info.data["upstream"])
        return value

    @field_validator("upstream")
    @classmethod
    def _unique_names(cls, value: list[Upstream]) -> list[Upstream]:
        names = [u.name for u in value]
        for name in names:
            if names.count(name) > 1:
                raise ValueError(f"backend names must be unique; {name!r} is given {names.count(name)} times (set name = ... on each)")
        if value and not any(u.weight > 0 and not u.drain for u in value):
            raise ValueError("at least one backend must take new work (weight above 0 and drain = false)")
        for u in value:
            if u.shadow_of is None:
                continue
            primary = next((p for p in value if p.name == u.shadow_of), None)
            if primary is None:
                raise ValueError(f"backend {u.name!r}: shadow_of = {u.shadow_of!r} names no configured backend "
                                 f"(backends: {', '.join(names)})")
            if primary.shadow_of is not None:
                raise ValueError(f"backend {u.name!r}: shadow_of = {u.shadow_of!r} names a shadow backend itself; "
                                 "a candidate shadows a backend that serves clients")
        owners = [u.name for u in value if u.plain_ids]
        if len(owners) > 1:
            raise ValueError(f"plain_ids = true may be set on one backend only; it is set on {', '.join(owners)}")
        return value

    @field_validator("store")
    @classmethod
    def _store(cls, value: str) -> str:
        if value in ("sqlite", "memory") or value.startswith(("redis://", "rediss://", "unix://")):
            return value
        raise ValueError('store must be "sqlite", "memory" or a Redis URL (redis://host:port/db)')

    @field_validator("listen")
    @classmethod
    def _host_port(cls, value: str) -> str:
        host, sep, port = value.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
            raise ValueError("must be HOST:PORT, e.g. 127.0.0.1:8080")
        return value

    @field_validator("path")
    @classmethod
    def _absolute_path(cls, value: str) -> str:
        if not value.startswith("/"):
            raise ValueError("must start with /")
        return value

    @property
    def identity_header_name(self) -> str:
        """The header whose value names a caller (its principal): `identity_header`, else `Authorization`."""
        return self.identity_header or "Authorization"

    def upstream_headers(self, headers: Mapping[str, str]) -> dict[str, str]:
        """The client's request headers that go upstream unchanged: `Authorization` and the
        configured `forward_headers` (docs/behaviour.md §6 "Headers upstream")."""
        return {h: headers[h] for h in ("Authorization", *self.forward_headers) if h in headers}

    @property
    def endpoint_paths(self) -> set[str]:
        """The MCP endpoint's paths: `path`, with and without a trailing slash."""
        path = self.path.rstrip("/") or "/"
        return {path, path + "/"} if path != "/" else {"/"}

    @property
    def host(self) -> str:
        return self.listen.rpartition(":")[0].strip("[]")

    @property
    def port(self) -> int:
        return int(self.listen.rpartition(":")[2])


STATE_DIR_ENV = "MCP_TASKS_PROXY_STATE_DIR"
DEFAULT_STATE_DIR = "~/.local/state/mcp-tasks-proxy"


def default_state_dir(environ: Mapping[str, str] = os.environ) -> str:
    """`state_dir` when the configuration gives none: `$MCP_TASKS_PROXY_STATE_DIR` when set and not
    empty, else `~/.local/state/mcp-tasks-proxy` (docs/decisions.md §79)."""
    return environ.get(STATE_DIR_ENV) or DEFAULT_STATE_DIR


def _unknown_key(loc: tuple[int | str, ...]) -> str:
    """`unknown key 'x'`, with the closest known key of that table when one is near enough:
    `unknown key 'reconect_wait_ms' (did you mean 'reconnect_wait_ms'?)`; a key inside an
    `[[upstream]]` table is prefixed with its place (`upstream.0: ...`)."""
    name, where = str(loc[-1]), ".".join(str(p) for p in loc[:-1])
    model: type[BaseModel] = unknown_key_model(loc) or (Upstream if loc[0] == "upstream" else Settings)
    if model is Settings and len(loc) == 1 and name in Upstream.model_fields:
        return f"unknown key {name!r} (it is a key of each backend: put it in an [[upstream]] table)"
    close = difflib.get_close_matches(name, list(model.model_fields), n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"{where + ': ' if where else ''}unknown key {name!r}{hint}"


def _describe(exc: ValidationError) -> str:
    lines = []
    for err in exc.errors():
        key = ".".join(str(p) for p in err["loc"]) or "(top level)"
        given = err.get("input")
        if err["type"] == "extra_forbidden" and err["loc"]:
            lines.append(_unknown_key(err["loc"]))
        elif err["type"] == "missing":
            lines.append(f"{key}: required")
        else:
            lines.append(f"{key}: {err['msg']} (got {given_value(err['loc'], given)})")
    return "; ".join(lines)


MAX_CONFIG_BYTES = 1024 * 1024
"""A configuration file is read whole, up to this (1 MiB); a larger one is refused."""


def _regular_file(name: str, flags: int) -> int:
    """Open `name` without blocking (a FIFO would hang the reader) and refuse what is not a regular
    file (a directory, a device such as /dev/zero, a FIFO): `OSError` naming why."""
    fd = os.open(name, flags | os.O_NONBLOCK)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(errno.EINVAL, "not a regular file")
    return fd


def load(path: str | Path | None = None, overrides: dict[str, Any] | None = None) -> Settings:
    """Settings from a TOML file (optional) with `overrides` (CLI flags) applied on top.

    Raises `ConfigError` naming the file and key for unreadable TOML, unknown keys and bad values.
    """
    data: dict[str, Any] = {}
    if path is not None:
        try:
            with open(path, "rb", opener=_regular_file) as fh:
                raw = fh.read(MAX_CONFIG_BYTES + 1)
        except OSError as exc:
            raise ConfigError(f"{path}: cannot read: {exc.strerror}") from None
        if len(raw) > MAX_CONFIG_BYTES:
            raise ConfigError(f"{path}: larger than {MAX_CONFIG_BYTES} bytes: not a configuration file")
        try:
            data = tomllib.loads(raw.decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise ConfigError(f"{path}: not UTF-8 text (byte {exc.start})") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    data.update({k: v for k, v in (overrides or {}).items() if v is not None})
    try:
        return Settings.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"{path or 'configuration'}: {_describe(exc)}") from None
