"""The router of several backends (proxy/fleet.py) and their configuration, without servers:
smooth weighted round robin, unreachable backends left out of new work, relayed session ids."""

from __future__ import annotations

import time

import aiohttp
import pytest
from support import TEST_KEY

from proxy.config import ConfigError, load
from proxy.fleet import Fleet
from proxy.metrics import Metrics
from proxy.routing import Router
from translators.errors import NOT_ISSUED, UNKNOWN_TASK, McpError
from translators.sealing import PLAIN_TASK_IDS, RELAY_SESSION, Keyring

KEYRING = Keyring(TEST_KEY)


def _settings(*weights: int):
    upstream = [
        {"name": name, "url": f"http://127.0.0.1:9/{name}", "weight": weight}
        for name, weight in zip("abc", weights, strict=False)
    ]
    return load(None, {"upstream": upstream})


async def _fleet(*weights: int) -> tuple[Fleet, aiohttp.ClientSession]:
    settings = _settings(*weights)
    http = aiohttp.ClientSession()
    metrics = Metrics()
    return Fleet.build(settings, http, KEYRING, metrics), http


@pytest.mark.parametrize(
    ("weights", "expected"),
    [
        ((1, 1), "abababab"),
        ((3, 1), "aabaaaba"),
        ((2, 1), "abaaba"),
        ((1, 2, 1), "bacbbacb"),
    ],
)
async def test_new_work_is_spread_by_smooth_weighted_round_robin(weights, expected):
    fleet, http = await _fleet(*weights)
    try:
        assert "".join([(await fleet.pick()).name for _ in expected]) == expected
    finally:
        await http.close()


async def test_an_unreachable_backend_is_left_out_and_excluded_ones_are_skipped():
    fleet, http = await _fleet(1, 1)
    try:
        b = fleet.named("b")
        b.backend.unreachable_at = time.monotonic()
        b._revive_at = time.monotonic()  # a probe has just failed: none again within a second
        assert [(await fleet.pick()).name for _ in range(4)] == ["a", "a", "a", "a"]
        assert (await fleet.pick(frozenset({"a"}))).name == "b"  # the only one left
        fleet.named("a").backend.unreachable_at = time.monotonic()
        fleet.named("a")._revive_at = time.monotonic()
        assert {(await fleet.pick()).name for _ in range(4)} == {"a", "b"}  # none reachable: all, so the error names one
    finally:
        await http.close()


async def test_backends_with_weight_0_or_draining_take_no_new_work():
    settings = load(
        None,
        {
            "upstream": [
                {"name": "a", "url": "http://127.0.0.1:9/a", "weight": 0},
                {"name": "b", "url": "http://127.0.0.1:9/b", "drain": True},
                {"name": "c", "url": "http://127.0.0.1:9/c", "weight": 2},
            ]
        },
    )
    http = aiohttp.ClientSession()
    try:
        fleet = Fleet.build(settings, http, KEYRING, Metrics())
        assert [(await fleet.pick()).name for _ in range(4)] == ["c", "c", "c", "c"]
    finally:
        await http.close()


async def test_sealed_ids_route_with_any_fleet_size_and_plain_ids_go_to_their_owner():
    """docs/decisions.md §83: a sealed session id opens with one backend too; a plain one from
    before goes to the only backend, or to the one with plain_ids = true, else nowhere (404)."""
    single, http1 = await _fleet(1)
    fleet, http = await _fleet(1, 1)
    owned = load(
        None,
        {
            "upstream": [
                {"name": "a", "url": "http://127.0.0.1:9/a"},
                {"name": "b", "url": "http://127.0.0.1:9/b", "plain_ids": True},
            ]
        },
    )
    owning = Fleet.build(owned, http, KEYRING, Metrics())
    try:
        sealed = KEYRING.seal(RELAY_SESSION, ("a", "upstream-session-7"), "")
        routed = Router(single, KEYRING).relayed_session(sealed)
        assert routed is not None and (routed.member.name, routed.upstream) == ("a", ("upstream-session-7", False))
        assert Router(single, KEYRING).relayed_session(KEYRING.seal(RELAY_SESSION, ("b", "s"), "")) is None
        plain = Router(owning, KEYRING).relayed_session("upstream-session-7")
        assert plain is not None and (plain.member.name, plain.upstream) == ("b", (None, False))
        assert Router(fleet, KEYRING).relayed_session("upstream-session-7") is None
        assert [m.relay.plain_ids for m in owning.members] == [False, True]
        assert [m.relay.plain_ids for m in single.members] == [True]
        assert [m.relay.plain_ids for m in fleet.members] == [False, False]
    finally:
        await http.close()
        await http1.close()


async def test_a_relayed_session_id_says_whether_its_task_ids_are_plain():
    """Decision 190: a session id sealed with `PLAIN_TASK_IDS` as its third field routes as one of
    two fields does and says the session's task ids are the backend's own; another third field, or
    a fourth, opens no session. New sessions of an HTTP backend get plain task ids unless it is
    configured `session_task_ids = "sealed"`."""
    fleet, http = await _fleet(1, 1)
    sealed = load(None, {"upstream": [{"name": "a", "url": "http://127.0.0.1:9/a", "session_task_ids": "sealed"}]})
    confined = Fleet.build(sealed, http, KEYRING, Metrics())
    try:
        router = Router(fleet, KEYRING)
        plain = router.relayed_session(KEYRING.seal(RELAY_SESSION, ("b", "s7", PLAIN_TASK_IDS), ""))
        assert plain is not None and (plain.member.name, plain.upstream) == ("b", ("s7", True))
        before = router.relayed_session(KEYRING.seal(RELAY_SESSION, ("b", "s7"), ""))
        assert before is not None and (before.member.name, before.upstream) == ("b", ("s7", False))
        assert router.relayed_session(KEYRING.seal(RELAY_SESSION, ("b", "s7", "other"), "")) is None
        assert router.relayed_session(KEYRING.seal(RELAY_SESSION, ("b", "s7", PLAIN_TASK_IDS, "x"), "")) is None
        assert [m.relay.plain_task_ids for m in fleet.members] == [True, True]
        assert [m.relay.plain_task_ids for m in confined.members] == [False]
    finally:
        await http.close()


async def test_relayed_session_ids_name_their_backend_only_with_several_backends():
    fleet, http = await _fleet(1, 1)
    single, http1 = await _fleet(1)
    try:
        sealed = KEYRING.seal(RELAY_SESSION, ("b", "upstream-session-7"), "")
        routed = Router(fleet, KEYRING).relayed_session(sealed)
        assert routed is not None and (routed.member.name, routed.upstream) == ("b", ("upstream-session-7", False))
        assert Router(fleet, KEYRING).relayed_session("upstream-session-7") is None
        assert Router(fleet, KEYRING).relayed_session(KEYRING.seal(RELAY_SESSION, ("gone", "s"), "")) is None
        only = Router(single, KEYRING).relayed_session("upstream-session-7")
        assert only is not None and (only.member.name, only.upstream) == ("a", (None, False))
    finally:
        await http.close()
        await http1.close()


async def test_a_backend_no_longer_configured_is_an_unknown_task():
    fleet, http = await _fleet(1, 1)
    try:
        with pytest.raises(McpError) as refused:
            fleet.named("retired")
        assert (refused.value.code, refused.value.message) == (
            -32602,
            "Unknown task: the backend that held it, 'retired', is no longer configured: a reload removed it (or renamed it)",
        )
    finally:
        await http.close()


@pytest.mark.parametrize(
    ("upstream", "message"),
    [
        (
            [{"name": "a", "url": "http://x/mcp"}, {"name": "a", "url": "http://y/mcp"}],
            "upstream: Value error, backend names must be unique; 'a' is given 2 times",
        ),
        (
            [{"name": "a", "url": "http://x/mcp", "weight": 0}],
            "upstream: Value error, at least one backend must take new work (weight above 0 and drain = false)",
        ),
        (
            [{"name": "a", "url": "http://x/mcp", "drain": True}, {"name": "b", "url": "http://y/mcp", "weight": 0}],
            "upstream: Value error, at least one backend must take new work (weight above 0 and drain = false)",
        ),
        (
            [{"name": "a", "url": "http://x/mcp", "plain_ids": True}, {"name": "b", "url": "http://y/mcp", "plain_ids": True}],
            "upstream: Value error, plain_ids = true may be set on one backend only; it is set on a, b",
        ),
        (
            [{"name": "a", "url": "http://x/mcp", "weight": -1}],
            "upstream.0.weight: Input should be greater than or equal to 0 (got -1)",
        ),
        (
            [{"name": "a", "url": "http://x/mcp", "weight": 1001}],
            "upstream.0.weight: Input should be less than or equal to 1000 (got 1001)",
        ),
        (
            [{"name": "a", "url": "http://x/mcp", "dialect": "v3"}],
            "upstream.0.dialect: Input should be 'auto', 'v1', 'v2-session' or 'v2-modern' (got 'v3')",
        ),
    ],
)
def test_backend_configuration_errors_name_the_key(upstream, message):
    with pytest.raises(ConfigError) as refused:
        load(None, {"upstream": upstream})
    assert str(refused.value).startswith(f"configuration: {message}")


async def test_plain_task_ids_and_request_states_go_to_the_backend_with_plain_ids():
    """docs/decisions.md §83: with several backends a task id or MRTR requestState that does not
    unseal goes to the backend with plain_ids = true, unchanged; without one it is refused; a sealed
    one still goes to the backend sealed in it, and an expired held state still says so."""
    from translators import jsonrpc
    from translators.envelope import ModernMeta
    from translators.sealing import ANONYMOUS, TaskRef

    owned = load(
        None,
        {
            "upstream": [
                {"name": "a", "url": "http://127.0.0.1:9/a"},
                {"name": "b", "url": "http://127.0.0.1:9/b", "plain_ids": True},
            ]
        },
    )
    http = aiohttp.ClientSession()
    fleet, http2 = await _fleet(1, 1)
    meta = ModernMeta("2026-07-28", {"extensions": {"io.modelcontextprotocol/tasks": {}}})

    def request(method: str, params: dict) -> jsonrpc.Message:
        return jsonrpc.parse(jsonrpc.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}))

    try:
        router = Router(Fleet.build(owned, http, KEYRING, Metrics()), KEYRING)
        plain_get = request("tasks/get", {"taskId": "backend-own-id"})
        route = router.modern(plain_get, meta, ANONYMOUS)
        assert route is not None
        member, bound = route
        assert (member.name, bound) == ("b", True)
        sealed = KEYRING.seal_task_id(TaskRef("a", "", "t1"), ANONYMOUS)
        assert router.modern(request("tasks/get", {"taskId": sealed}), meta, ANONYMOUS) == (router.fleet.named("a"), True)
        retry = request("tools/call", {"name": "x", "requestState": "backend-own-state"})
        assert router.modern(retry, meta, ANONYMOUS) == (router.fleet.named("b"), True)
        assert router.modern(request("tools/call", {"name": "x"}), meta, ANONYMOUS) is None  # new work: `new_work` places it
        expired = KEYRING.seal_request_state(("exchange-1", "a"), ANONYMOUS, 1)
        with pytest.raises(McpError) as refused:
            router.modern(request("tools/call", {"name": "x", "requestState": expired}), meta, ANONYMOUS)
        assert refused.value.message == "Expired requestState: send the original request again"
        with pytest.raises(McpError) as refused:
            Router(fleet, KEYRING).modern(plain_get, meta, ANONYMOUS)
        assert (refused.value.code, refused.value.message) == (-32602, f"{UNKNOWN_TASK}: {NOT_ISSUED}")
    finally:
        await http.close()
        await http2.close()


async def test_live_sessions_balance_splits_the_sessions_alive_by_weight_and_shifts_them_at_once():
    """balance = "live-sessions" (docs/decisions.md §84): a new session goes to the backend with the
    fewest live sessions per unit of weight, so a change of weights moves the split of live sessions
    (9:1 → 1:1: the next 8 sessions all go to the backend that has too few), and calls keep the
    weighted round robin."""
    settings = load(
        None,
        {
            "balance": "live-sessions",
            "upstream": [{"name": "a", "url": "http://127.0.0.1:9/a", "weight": 3}, {"name": "b", "url": "http://127.0.0.1:9/b"}],
        },
    )
    http = aiohttp.ClientSession()
    try:
        fleet = Fleet.build(settings, http, KEYRING, Metrics())
        live = {"a": 0, "b": 0}
        fleet.proxy_sessions = live.__getitem__

        async def sessions(count: int) -> str:
            picked = ""
            for _ in range(count):
                name = (await fleet.pick(session=True)).name
                live[name] += 1
                picked += name
            return picked

        assert await sessions(8) == "aaabaaab"
        assert "".join([(await fleet.pick()).name for _ in range(4)]) == "aaba"  # calls: smooth weighted round robin
        live.update(a=9, b=1)
        fleet.named("a").weight = 1
        assert await sessions(10) == "bbbbbbbbab"
    finally:
        await http.close()


async def test_the_router_s_retry_waits_for_bound_work_and_for_a_lone_backend_only():
    """`Router.drive` (issue 38): what each attempt may wait for a reconnecting backend
    (`RECONNECT_WAIT_S`) and whether it is counted as the backend's bound work. Bound work waits;
    new work waits only when there is no other backend to go to (a lone backend's session
    `initialize`, whose probe used to wait too); only bound work counts in `work.in_flight`."""
    from proxy.routing import Route
    from proxy.upstream.endpoint import RECONNECT_WAIT_S

    lone, http_lone = await _fleet(1)
    two, http_two = await _fleet(1, 1)
    seen: list[tuple[str, float, int]] = []

    async def attempt(route: Route) -> str:
        seen.append((route.member.name, RECONNECT_WAIT_S.get(), route.member.work.in_flight))
        return route.member.name

    try:
        for fleet in (lone, two):
            router = Router(fleet, KEYRING, reconnect_wait_s=2.5)
            for bound in (True, False):
                assert await router.drive(Route(fleet.first, bound), attempt, session=not bound) == "a"
        assert seen == [("a", 2.5, 1), ("a", 2.5, 0), ("a", 2.5, 1), ("a", 0.0, 0)]
    finally:
        await http_lone.close()
        await http_two.close()


async def test_the_probe_s_own_connector_reports_its_upstream_times_too():
    """A backend with `probe_headers` probes through a view of its connector made when the backend
    is; that view reports each request's time to the metrics like the connector (issue 38: the
    hop report is wired before any view is made)."""
    settings = load(None, {"upstream": [{"name": "a", "url": "http://127.0.0.1:9/a", "probe_headers": {"X-Probe": "1"}}]})
    http = aiohttp.ClientSession()
    metrics = Metrics()
    try:
        backend = Fleet.build(settings, http, KEYRING, metrics).first.backend
        probe = backend._probe_connector
        probe.on_hop("tools/list", 0.25)
        backend.connector.on_hop("tools/list", 0.5)
        samples = {
            sample.name: sample.value
            for family in metrics.registry.collect()
            if family.name == "mcp_tasks_proxy_upstream_seconds"
            for sample in family.samples
            if sample.labels.get("backend") == "a" and sample.name.endswith(("_count", "_sum"))
        }
        assert (probe is not backend.connector, samples) == (
            True,
            {"mcp_tasks_proxy_upstream_seconds_count": 2.0, "mcp_tasks_proxy_upstream_seconds_sum": 0.75},
        )
    finally:
        await http.close()
