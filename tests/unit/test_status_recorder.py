"""What the status page's recorder keeps of failures and repairs (proxy/observe/recorder.py), on a
clock the test moves."""

from __future__ import annotations

from proxy.observe.recorder import StatusRecorder
from translators.failures import BACKEND, PROXY, SESSION_LOST, TASK_UNKNOWN

START = 1_780_000_020.0
LEGACY = ("legacy-cli", "1.2.0")
CURL = ("curl-walk", "1.0")


class Clock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> float:
        return self.now


def test_failures_are_counted_under_their_pairing_reason_and_client():
    clock = Clock()
    recorder = StatusRecorder(clock)
    recorder.request("old", "v1", "v1", "ok", LEGACY)
    recorder.request("old", "v1", "v1", "http_404", LEGACY, "tasks/get", failure=(SESSION_LOST, BACKEND))
    recorder.request("old", "v1", "v1", "http_404", LEGACY, "tools/call", failure=(SESSION_LOST, BACKEND))
    clock.now += 120  # two minutes later: another bucket
    recorder.request("old", "v2-modern", "v1", "-32602", CURL, "tasks/get", "Unknown task: the id does not unseal",
                     failure=(TASK_UNKNOWN, PROXY))  # fmt: skip
    recorder.request("old", "v2-modern", "v1", "-32602", CURL, "tasks/get")  # no failure given: from the outcome
    assert recorder.failures(60) == [
        {"backend": "old", "client_dialect": "v1", "backend_dialect": "v1", "mode": "relayed", "reason": SESSION_LOST,
         "by": BACKEND, "count": 2},
        {"backend": "old", "client_dialect": "v2-modern", "backend_dialect": "v1", "mode": "translated", "reason": TASK_UNKNOWN,
         "by": BACKEND, "count": 1},
        {"backend": "old", "client_dialect": "v2-modern", "backend_dialect": "v1", "mode": "translated", "reason": TASK_UNKNOWN,
         "by": PROXY, "count": 1},
    ]  # fmt: skip
    assert recorder.failures(1) == recorder.failures(60)[1:]  # only this minute's
    assert recorder.backend_failures("old", 60) == (3, 1)  # the backend's errors, the proxy's refusals
    assert recorder.backend_counts("old", 60) == (5, 4)
    rows = {(r["dialect"], r["name"]): (r["requests"], r["errors"], r["failures"]) for r in recorder.clients()}
    assert rows == {
        ("v1", "legacy-cli"): (3, 2, {SESSION_LOST: 2}),
        ("v2-modern", "curl-walk"): (2, 2, {TASK_UNKNOWN: 2}),
    }
    latest = recorder.errors[-2]
    assert {k: v for k, v in latest.items() if k != "at_ms"} == {
        "backend": "old",
        "client_dialect": "v2-modern",
        "backend_dialect": "v1",
        "client": "curl-walk",
        "client_version": "1.0",
        "method": "tasks/get",
        "code": "-32602",
        "reason": TASK_UNKNOWN,
        "by": PROXY,
        "detail": "Unknown task: the id does not unseal",
    }


def test_clients_the_proxy_repaired_requests_for_are_leaning():
    clock = Clock()
    recorder = StatusRecorder(clock)
    recorder.request("new", "v2-modern", "v2-modern", "ok", CURL, repairs=("mcp-method", "mcp-name"))
    clock.now += 5
    recorder.request("new", "v2-modern", "v2-modern", "ok", CURL, repairs=("mcp-method",))
    recorder.request("new", "v2-modern", "v2-modern", "ok", CURL)
    recorder.request("new", "v1", "v2-modern", "ok", LEGACY)
    assert recorder.leaning() == [
        {"dialect": "v2-modern", "name": "curl-walk", "version": "1.0", "requests": 3, "leaning": 2,
         "repairs": {"mcp-method": 2, "mcp-name": 1}, "last_leaning_ms": int((START + 5) * 1000)},
    ]  # fmt: skip
    assert [(r["name"], r["leaning"], r["repairs"]) for r in recorder.clients()] == [
        ("legacy-cli", 0, {}),
        ("curl-walk", 2, {"mcp-method": 2, "mcp-name": 1}),
    ]
