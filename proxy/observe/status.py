"""`GET /status.json` and `GET /status` (docs/operations.md "Status page"): what each backend
speaks and how it does, the migration matrix, the clients still on v1 and the recent errors,
from the fleet, and from the figures: this process's `StatusRecorder`, or with a store the figures
every process flushed to it (`proxy/observe/lasting.py`), with what they cover (`counting`).

Access (docs/decisions.md §48): with `status_token` set, a request must carry
`Authorization: Bearer <status_token>`; without it only loopback peers are answered. Others get 403.
"""

from __future__ import annotations

import hmac
import ipaddress
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from aiohttp import web

from translators.failures import REASONS, REPAIRS

from ..version import TAKEN_OVER, version
from .figures import Figures
from .lasting import process_view
from .page import render
from .recorder import StatusRecorder
from .tool_verdicts import WINDOW_MINUTES, tool_rows

if TYPE_CHECKING:
    from ..fleet import Fleet

HOUR = 60
DAY = 1440
REFRESH_S = 10
"""The page reloads itself this often (`<meta http-equiv="refresh">`)."""


def snapshot(fleet: Fleet, recorder: StatusRecorder, view: tuple[Figures, dict[str, Any]] | None = None) -> dict[str, Any]:
    """The status as JSON-ready data (shape: docs/operations.md "Status page"). Times are Unix
    milliseconds, latencies milliseconds. `view`: the figures and what they cover (`Lasting.view`);
    by default this process's own."""
    from ..fleet_config import drain_state, remaining

    figures, counting = view if view is not None else process_view(recorder)

    backends = []
    taking = sum(member.weight for member in fleet.members if not member.draining)
    for member in fleet.members:
        backend = member.backend
        profile = backend.profile
        hour = figures.backend_counts(member.name, HOUR)
        minute = figures.backend_counts(member.name, 1)
        # A failure is the backend's error, or a refusal of the proxy's (translators.failures).
        hour_failures = figures.backend_failures(member.name, HOUR)
        minute_failures = figures.backend_failures(member.name, 1)
        known = profile is not None or backend.challenge is not None  # a challenged probe: up and protected
        health = "unknown" if not known and backend.down is None else ("down" if backend.down is not None else "up")
        backends.append({
            "name": member.name,
            "transport": urlsplit(backend.config.url).scheme.lower() if backend.config.url else "stdio",
            "dialect": backend.dialect,
            "pinned": backend.config.dialect != "auto",
            "protocol_versions": list(profile.protocol_versions) if profile is not None else [],
            "health": health,
            "down_reason": backend.down,
            "last_probe_ms": profile.probed_at_ms if profile is not None else None,
            "dialect_since_ms": backend.dialect_since_ms,
            "live_tasks": backend.metrics.live_tasks(member.name),
            "held_tasks": member.held.events.summary(),
            "weight": member.weight,
            "new_work_share": round(member.weight / taking, 3) if taking and not member.draining else 0.0,
            "drain": drain_state(member, fleet),
            "remaining": remaining(member, fleet),
            "requests_last_minute": minute[0],
            "errors_last_minute": minute_failures[0],
            "refusals_last_minute": minute_failures[1],
            "requests_last_hour": hour[0],
            "errors_last_hour": hour_failures[0],
            "refusals_last_hour": hour_failures[1],
            "requests_per_minute": round(hour[0] / HOUR, 3),
            "errors_per_minute": round(hour_failures[0] / HOUR, 3),
            "upstream_latency_ms": recorder.latency_ms(member.name),
        })
    clients = figures.clients()
    return {
        "now_ms": figures.now_ms,
        "started_ms": recorder.started_ms,
        "counting": counting,
        "backends": backends,
        "matrix": {"last_hour": figures.matrix(HOUR), "last_day": figures.matrix(DAY)},
        "matrix_by_backend": {"last_hour": figures.matrix(HOUR, by_backend=True), "last_day": figures.matrix(DAY, by_backend=True)},
        "clients": clients,
        "v1_clients": [row for row in clients if row["dialect"] == "v1"],
        "last_v1_ms": figures.last_v1_ms(),
        "timeline": figures.timeline(HOUR),
        "recent_errors": list(reversed(figures.errors)),
        "failures": {"last_hour": figures.failures(HOUR), "last_day": figures.failures(DAY)},
        "tools": tool_rows(figures, [member.name for member in fleet.members]),
        "tools_window_minutes": WINDOW_MINUTES,
        "leaning": figures.leaning(),
        "reasons": REASONS,
        "repairs": REPAIRS,
        "shadow": _shadow(fleet, figures),
        "rollout": fleet.rollout.snapshot() if fleet.rollout is not None else None,
        "reloads": list(reversed(fleet.reloads)),
        "version": version(),
        "restarted": {**TAKEN_OVER, "version": version()} if TAKEN_OVER else None,
    }


def _shadow(fleet: Fleet, figures: Figures) -> list[dict[str, Any]]:
    """Each shadow backend's comparisons (`proxy.shadow.mirror.Shadowing.snapshot`): with `--workers`,
    every worker's of this replica (`figures.counters`), else this process's, since its start; []
    without any (docs/decisions.md §181)."""
    shadowing = getattr(fleet, "shadow", None)
    if shadowing is None:
        return []
    counted_by = "workers" if figures.counters is not None else "process"
    return [{**entry, "counted_by": counted_by} for entry in shadowing.snapshot(figures.counters)]


async def read_view(recorder: StatusRecorder, lasting: Any) -> tuple[Figures, dict[str, Any]]:
    """The figures a read shows: from the store through `lasting` (`proxy/observe/lasting.py`),
    or this process's own without one, or when the store cannot be read (`counting.error` says why)."""
    if lasting is None:
        return process_view(recorder)
    try:
        view: tuple[Figures, dict[str, Any]] = await lasting.view()
        return view
    except Exception as exc:
        figures, counting = process_view(recorder)
        return figures, {**counting, "store": lasting.store_name, "replica": lasting.replica,
                         "error": f"the store could not be read ({type(exc).__name__}: {exc}); this process's figures since its start"}


def allowed(request: web.Request, token: str | None) -> bool:
    """Whether `request` may read the status (see the module docstring)."""
    if token:
        given = request.headers.get("Authorization", "")
        return hmac.compare_digest(given.encode("utf-8", "surrogateescape"), f"Bearer {token}".encode())
    try:
        return ipaddress.ip_address((request.remote or "").split("%")[0]).is_loopback
    except ValueError:
        return False


def refused(token: str | None = None) -> web.Response:
    """403, saying what would be served: with a `status_token` set, only requests carrying it (from loopback too)."""
    said = "give Authorization: Bearer <status_token>" if token else "served to loopback peers only (or set status_token)"
    return web.json_response({"error": f"forbidden: {said}"}, status=403)


async def status_json(request: web.Request, fleet: Fleet | None, recorder: StatusRecorder, token: str | None,
                      lasting: Any = None) -> web.Response:
    if not allowed(request, token):
        return refused(token)
    if fleet is None:
        return web.json_response({"error": "starting"}, status=503)
    view = await read_view(recorder, lasting)
    return web.json_response(snapshot(fleet, recorder, view), headers={"Cache-Control": "no-store"})


async def status_page(request: web.Request, fleet: Fleet | None, recorder: StatusRecorder, token: str | None,
                      lasting: Any = None) -> web.Response:
    if not allowed(request, token):
        return refused(token)
    if fleet is None:
        return web.Response(text="starting", status=503)
    view = await read_view(recorder, lasting)
    html = render(snapshot(fleet, recorder, view), REFRESH_S)
    # "replace": a string no UTF-8 can carry (the parser refuses them; this is the page's own guard)
    # shows as "?" rather than failing the page for a day.
    return web.Response(body=html.encode("utf-8", "replace"), content_type="text/html", charset="utf-8",
                        headers={"Cache-Control": "no-store", "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'"})
