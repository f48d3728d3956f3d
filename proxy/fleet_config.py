"""Reloading the configuration of a running proxy (`SIGHUP`, `mcp-tasks-proxy reload`;
docs/operations.md "Reload and drain", docs/decisions.md §84, §85).

A reload re-reads the file the proxy was started with and applies its `[[upstream]]` tables to the
fleet in place: backends that stay keep their member (the same `FleetMember`: pools, upstream
sessions, followed tasks, held exchanges and GET streams go on), and take the new `weight`,
`drain`, `plain_ids` and `session_task_ids`; new backends are added and probed; removed ones are dropped. Nothing is
applied unless all of it can be: a file that does not validate, a changed address of a backend
that stays, or the removal of a backend that still holds work (not drained, and not listed in
`remove_with_work`) raises `ConfigError` naming the key, and the running configuration stays.
Other keys are read at start only: a changed one is logged as waiting for a restart.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import aiohttp

from translators.errors import McpError
from translators.sealing import Keyring

from .config import ConfigError, Settings, Upstream, load
from .fleet import Fleet, FleetMember, start_failure
from .metrics import Metrics
from .state.store import TaskStateStore
from .upstream.backend import UnsupportedBackend
from .upstream.tls import request_options

log = logging.getLogger(__name__)

RELOADED_KEYS = ("upstream", "remove_with_work", "balance", "rollout", "tls_cert", "tls_key")
"""The top-level keys a reload applies (`tls_cert` and `tls_key` by `RunningProxy.reload`: the files
are read again into the serving context); every other key is read at start only."""

RELOADED_BACKEND_KEYS = ("name", "weight", "drain", "plain_ids", "session_task_ids")
"""The keys of a backend a reload applies to a backend that stays (docs/decisions.md §85)."""
ADDRESS_KEYS = tuple(key for key in Upstream.model_fields if key not in RELOADED_BACKEND_KEYS)
"""Every other key of a backend (where and how it is reached: url, command, headers, probe_headers,
the stdio process's bounds and liveness, …): read once, when the backend is set up, so it cannot
change by reload; a change is refused rather than ignored (give the new settings another name,
drain the old one, then remove it)."""


def remaining(member: FleetMember, fleet: Fleet) -> dict[str, int]:
    """The work still bound to `member` (docs/decisions.md §84), as shown on the status page:
    `sessions` (the proxy's own sessions on it plus relayed sessions opened on it), `requests`
    (bound requests in flight, GET streams included), `tasks` (its v1 tasks followed for modern
    clients: from their creation through the proxy until the proxy sees them end, or their ttl)
    and `held` (held calls running on it in this process: a client polls their task, issue 39)."""
    return {
        "sessions": fleet.proxy_sessions(member.name) + member.work.relayed_sessions(),
        "requests": member.work.in_flight,
        "tasks": len(member.follower.inputs),
        "held": member.held.live(),
    }


def drain_state(member: FleetMember, fleet: Fleet) -> str | None:
    """"draining" while a backend with `drain = true` still holds work, "drained" once it holds
    none (it may then be removed), None for a backend that is not draining."""
    if not member.draining:
        return None
    return "drained" if not any(remaining(member, fleet).values()) else "draining"


def read(path: str | Path | None, overrides: dict[str, Any]) -> Settings:
    """The settings a reload would apply: the file with the start's command-line flags on top.
    Raises `ConfigError` naming the file and key (`proxy.config.load`)."""
    return load(path, overrides)


def _plan(fleet: Fleet, running: Settings, new: Settings) -> tuple[list[Upstream], list[FleetMember]]:
    """(backends to add, members to remove) for `new`; raises `ConfigError` naming the key when
    `new` changes a staying backend's address or removes one that still holds work."""
    old = {upstream.name: upstream for upstream in running.upstream}
    for index, upstream in enumerate(new.upstream):
        before = old.get(upstream.name)
        if before is None:
            continue
        promoted = before.shadow_of is not None and upstream.shadow_of is None  # a candidate that serves from now on
        for key in ADDRESS_KEYS:
            if getattr(before, key) != getattr(upstream, key) and not (promoted and key.startswith("shadow_")):
                raise ConfigError(f"upstream.{index}.{key}: backend {upstream.name!r} is running; its {key} cannot change by "
                                  f"reload (add the new address under another name, drain {upstream.name!r}, then remove it)")
    names = {upstream.name for upstream in new.upstream}
    removed = [member for member in fleet.members if member.name not in names]
    for member in removed:
        if member.name in new.remove_with_work or (member.backend.config.shadow_of is not None and not any(remaining(member, fleet).values())):
            continue  # a shadow backend holds no client work (docs/decisions.md §89), unless a rollout gave it some
        if not member.draining:
            raise ConfigError(f"upstream: backend {member.name!r} is removed but was not drained: set drain = true on it, reload, "
                              f"wait for the status page to say drained, then remove it (or list it in remove_with_work)")
        left = remaining(member, fleet)
        if any(left.values()):
            counts = ", ".join(f"{count} {what}" for what, count in left.items() if count)
            raise ConfigError(f"upstream: backend {member.name!r} is removed but still holds work ({counts}): wait for the status "
                              f"page to say drained (or list it in remove_with_work)")
    added = [upstream for upstream in new.upstream if upstream.name not in old]
    return added, removed


async def reconfigure(fleet: Fleet, running: Settings, new: Settings, http: aiohttp.ClientSession, keyring: Keyring,
                      metrics: Metrics, store: TaskStateStore | None = None) -> list[str]:
    """Apply `new`'s backends to `fleet` and `running` in place (module docstring); returns what
    changed, one line each (also logged). Raises `ConfigError` (nothing applied) as `_plan` does,
    and for a new backend that speaks no dialect the proxy serves."""
    added, removed = _plan(fleet, running, new)
    # Every backend's TLS files are read again (a renewed certificate under the same path): one that
    # does not load refuses the reload before anything is applied (docs/decisions.md §172).
    options = {upstream.name: request_options(upstream) for upstream in new.upstream}
    members = {member.name: member for member in fleet.members}
    fresh = [FleetMember(upstream, http, running, keyring, metrics, store, options[upstream.name]) for upstream in added]
    for member in fresh:
        try:
            await member.backend.refresh(force=True)
        except UnsupportedBackend as exc:
            for one in fresh:
                await one.close()
            raise ConfigError(f"upstream: backend {member.name!r}: {exc}") from None
        except McpError as exc:  # unreachable now: probed again by requests and the timer, as at start
            failure = start_failure(member)
            if failure is not None:  # a stdio command that cannot start: refused, as at start
                for one in fresh:
                    await one.close()
                raise ConfigError(f"upstream: backend {member.name!r}: {failure}") from None
            log.info("backend %s not reachable yet: %s", member.name, exc.message)
        handover = fleet.first.exchanges.handover
        if handover is not None:
            member.exchanges.handover = handover
            member.held.handover = handover
    changes: list[str] = []
    by_name = {member.name: member for member in fresh}
    for upstream in new.upstream:
        member = members.get(upstream.name)
        if member is None:
            changes.append(f"backend {upstream.name} added ({upstream.address}, weight {upstream.weight})")
            continue
        before = member.backend.config  # as configured: a rollout moves the weights it runs (proxy/rollout/)
        if (before.weight, before.drain, before.plain_ids) != (upstream.weight, upstream.drain, upstream.plain_ids):
            changes.append(f"backend {upstream.name}: weight {before.weight} -> {upstream.weight}"
                           + (f", drain {str(upstream.drain).lower()}" if upstream.drain != before.drain else ""))
        member.weight, member.draining = upstream.weight, upstream.drain
        if before.session_task_ids != upstream.session_task_ids:
            changes.append(f"backend {upstream.name}: session_task_ids {before.session_task_ids} -> {upstream.session_task_ids} "
                           "(for sessions begun from now on)")
        member.backend.config = upstream  # the same address (checked): weight, drain, plain_ids and session_task_ids change
        member.backend.connector.use_options(options[upstream.name])
        files = [key for key in ("tls_ca_file", "tls_client_cert", "tls_client_key") if getattr(upstream, key) is not None]
        if files:
            changes.append(f"backend {upstream.name}: TLS files read again ({', '.join(files)})")
        by_name[upstream.name] = member
    fleet.arrange([by_name[upstream.name] for upstream in new.upstream])
    await fleet.remember_plain_issuer()
    for member in removed:
        changes.append(f"backend {member.name} removed")
        abandoned = member.work.abandon(member.name)  # remove_with_work: its requests in flight are answered now
        if abandoned:
            log.info("reload: backend %s removed with %d request(s) in flight: each answered that it was removed", member.name, abandoned)
        await member.close()
    waiting = [key for key in Settings.model_fields if key not in RELOADED_KEYS and getattr(running, key) != getattr(new, key)]
    running.upstream = list(new.upstream)
    running.remove_with_work = list(new.remove_with_work)
    if new.rollout != running.rollout:
        changes.append(f"rollout {new.rollout.from_} -> {new.rollout.to} set" if new.rollout is not None else "rollout removed")
        running.rollout = new.rollout  # run, resumed or forgotten by the rollout's driver (`proxy/rollout/driver.py`)
    if new.balance != running.balance:
        changes.append(f"balance {running.balance} -> {new.balance}")
    running.balance = fleet.balance = new.balance
    for line in changes:
        log.info("reload: %s", line)
    for key in waiting:
        log.warning("reload: %s changed in the file; it takes effect at the next restart", key)
    if not changes:
        log.info("reload: no backend changed")
    return changes
