"""The printed report of `mcp-tasks-proxy bench --soak` (`proxy/bench/soak.py` measures; this
module only formats its figures)."""

from __future__ import annotations

from typing import Any

from .soak import RECOVERED_MS, RECOVERY_S, SETTLE_SHARE


def _mib(value: float) -> str:
    return f"{value / 2**20:.1f} MiB"


def format_soak(soak: dict[str, Any]) -> str:
    c, life, kinds = soak["clients"], soak["lifecycles"], soak["failures"]
    minutes = soak["duration_s"] / 60
    settle = SETTLE_SHARE * soak["duration_s"] / 60
    count = soak.get("settings", {}).get("replicas", len(soak["replicas"]))
    lines = [
        f"soak: {c['v1'] + c['v2']} clients ({c['v1']} v1 relayed, {c['v2']} v2 translated) for {minutes:g} min, "
        f"{'one replica' if count == 1 else f'{count} replicas'} on Redis behind nginx (round robin), every task asking one question",
        f"  lifecycles right: {life['total']:,} (v1 {life['v1']:,}, v2 {life['v2']:,}), {soak['rate_per_s']:.1f}/s",
        "  failed: " + "; ".join(f"{kind} {by['total']:,} (v1 {by['v1']:,}, v2 {by['v2']:,})" for kind, by in kinds.items()),
    ]
    settled = [(f"{d} (begun after the first fifth)", f) for d, f in soak.get("settled_latency_ms", {}).items()]
    for dialect, figures_ms in [*soak["latency_ms"].items(), *settled, ("refusal", soak.get("refusal_ms", {"p50": None}))]:
        if figures_ms["p50"] is not None:
            what = "lifecycle right" if dialect != "refusal" else "lifecycle refused, until its 503"
            lines.append(f"  {dialect} {what}: p50 {figures_ms['p50']:.0f} ms, p99 {figures_ms['p99']:.0f} ms, "
                         f"max {figures_ms['max']:.0f} ms")
    if "killed_at_s" in soak:
        after = soak["after_kill"]
        begun = ", ".join(f"{ms:g}" for ms in soak.get("after_kill_ms", []))
        lines.append(f"  replica b killed at {soak['killed_at_s']:.0f} s; failed lifecycles begun after the kill: "
                     + ", ".join(f"{kind} {n}" for kind, n in after.items()) + (f" (begun {begun} ms after it)" if begun else ""))
    if soak.get("nginx_errors") is not None:
        lines.append("  nginx error log: " + ", ".join(f"{cause} {n}" for cause, n in soak["nginx_errors"].items()))
    timings = soak.get("nginx_timings_ms")
    if timings and timings["count"]:
        lines.append(f"  each request at nginx ({timings['count']:,}): " + "; ".join(
            f"{what} p50 {t['p50']:g} ms, p99 {t['p99']:g} ms, max {t['max']:g} ms"
            for what, t in (("whole", timings["request"]), ("replica's answer", timings["replica"]), ("connect", timings["connect"]))
            if t is not None))
    for name, r, cores in zip("ab", soak["replicas"], soak.get("replica_cores") or [None] * 2, strict=False):
        lines.append(f"  replica {name} RSS: {_mib(r['rss_start'])} at the start, {_mib(r['rss_settled'])} at "
                     f"{r['settled_at_s'] / 60:.1f} min, {_mib(r['rss_end'])} at the end; over the last {minutes - settle:.1f} min "
                     f"min {_mib(r['window_min'])}, max {_mib(r['window_max'])} (max − min {_mib(r['window_spread'])}), "
                     f"growth {r['growth'] / 2**20:+.1f} MiB ({r.get('growth_share', 0.0):+.1%})"
                     + (f"; CPU {cores:.2f} cores" if cores is not None else ""))
    recovery = soak.get("recovery")
    if recovery:
        rss = ", ".join(_mib(b) for b in recovery["rss_bytes"])
        lines.append(f"  after the load: {'answered' if recovery['recovered'] else 'NOT answered'} within {RECOVERED_MS:g} ms "
                     f"after {recovery['after_s']:.1f} s (limit {RECOVERY_S:g} s); replica RSS then {rss}")
    answered = soak.get("requests_per_replica") or []
    if answered:
        lines.append("  requests answered (each replica's mcp_tasks_proxy_requests_total): "
                     + ", ".join(f"{name} {n:,}" if n is not None else f"{name} –" for name, n in zip("ab", answered, strict=False)))
    if soak.get("cpu_s"):
        lines.append(f"  CPU seconds over the {soak['elapsed_s']:.0f} s and the recovery: "
                     + ", ".join(f"{name} {seconds:.1f}" for name, seconds in soak["cpu_s"].items()))
    keys = soak["redis_keys"]
    lines.append(f"  Redis keys (every {soak['sample_interval_s']:g} s): min {keys['min']}, max {keys['max']}, at the end "
                 f"{keys['end']}; samples {', '.join(str(k) for k in keys['samples'])}")
    verdict = "yes" if soak["memory_flat"] else "NO"
    lines.append(f"  memory flat ({soak['flat_rule']}): {verdict}")
    if soak["error_texts"]:
        lines += ["  first errors:"] + [f"    {t}" for t in soak["error_texts"]]
    return "\n".join(lines)
