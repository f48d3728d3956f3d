"""Several backends behind one proxy, attacked (docs/decisions.md 23–28, docs/configuration.md
"Several backends"): ids sealed with the right key but naming the wrong thing, tokens of one
purpose used as another, other principals' ids, garbage `requestState`s and session ids,
a relayed v2-modern backend that answers in SSE, and many calls at once.

Routing under test (proxy/faces/modern.py `_route`, `_state_backend`, `_relayed_task`,
`_relayed_state`, `_session_wire`; proxy/app.py `_other_method`; proxy/fleet.py `relayed_session`):
a task goes to the backend sealed in its id, an MRTR retry to the one sealed in its `requestState`
("request-state" (exchange, backend) for translated backends, "relay-state" (backend, own state)
for relayed v2-modern ones), a relayed session to the one sealed in its `Mcp-Session-Id`
("relay-session" (backend, upstream id), principal ""). Everything refused is refused by the proxy
with the exact modern-face status and JSON-RPC error, never HTTP 500, and never reaches a backend.

Backends: `a` is the reference v1 server (translated for modern clients), `b` the reference v2
server (relayed), each behind a recording tap that also keeps headers and GET/DELETE requests.
"""

from __future__ import annotations

import asyncio
import base64
import json
from types import SimpleNamespace
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from multidict import CIMultiDict
from session_support import SessionCaller
from support import TEST_KEY, Caller, running_proxy
from tap import HOP_BY_HOP, RecordingTap

from proxy.sse import SseParser
from translators.protocol import META_RELATED_TASK
from translators.sealing import ANONYMOUS, RELAY_SESSION, RELAY_STATE, Keyring, TaskRef

pytestmark = pytest.mark.peers

KEYRING = Keyring(TEST_KEY)
LATER_MS = 4_102_444_800_000  # 2100-01-01: a requestState that has not expired
UNKNOWN_TASK = (
    "Unknown task: the id does not unseal: it was not issued by this proxy to this caller or session, or it was altered"
)


def gone_backend(name: str) -> str:
    return f"Unknown task: the backend that held it, {name!r}, is no longer configured: a reload removed it (or renamed it)"


ELSEWHERE = (
    "Unknown task: the id names a task this backend does not hold: one of another backend, or of this backend before its upgrade"
)
NOT_ISSUED = "Unknown task: params.taskId must be a task id issued by this proxy"
INVALID_STATE = "Invalid requestState"
NO_EXCHANGE = "Unknown or expired requestState: send the original request again without it"
CLIENT_METHODS = {
    "tools/call",
    "prompts/get",
    "resources/read",
    "tasks/get",
    "tasks/update",
    "tasks/cancel",
    "subscriptions/listen",
}
"""Methods only a client's request makes the proxy send (probes use others)."""


# --- backends and taps ----------------------------------------------------------------------------


class HeaderTap(RecordingTap):
    """A recording tap that also keeps every request: (HTTP method, headers, parsed body)."""

    def __init__(self, target: str):
        super().__init__(target)
        self.requests: list[tuple[str, CIMultiDict[str], Any]] = []

    async def _relay(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = raw
        self.requests.append((request.method, CIMultiDict(request.headers), body))
        return await super()._relay(request)

    def client_traffic(self, mark: int, *, streams: bool = False) -> list[tuple[str, Any]]:
        """What a client's request made reach the backend since `mark`: POSTs of client-only
        methods (the proxy's own probes are left out), and with `streams` GET/DELETE requests."""
        seen = []
        for method, _headers, body in self.requests[mark:]:
            if method != "POST":
                if streams:
                    seen.append((method, body))
            elif isinstance(body, dict) and body.get("method") in CLIENT_METHODS:
                seen.append((method, body))
        return seen


class SseFront:
    """A v2-modern backend that answers `tools/call` and `tasks/get` in SSE: the real v2 server's
    JSON answer is sent as a stream of a comment, a priming event, a progress notification naming
    the backend's task id (CRLF line ends), a non-JSON event, and the answer spread over several
    `data` lines. `backend_task_ids` keeps every task id the server handed out."""

    def __init__(self, target: str):
        self.target = target
        self.url = ""
        self.backend_task_ids: list[str] = []
        self._runner: web.AppRunner | None = None
        self._http: aiohttp.ClientSession | None = None

    @classmethod
    async def start(cls, target: str) -> SseFront:
        front = cls(target)
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", front._handle)
        front._http = aiohttp.ClientSession()
        front._runner = web.AppRunner(app, access_log=None)
        await front._runner.setup()
        site = web.TCPSite(front._runner, "127.0.0.1", 0)
        await site.start()
        host, port = front._runner.addresses[0][:2]
        front.url = f"http://{host}:{port}{aiohttp.client.URL(target).path}"
        return front

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP}
        assert self._http is not None
        async with self._http.request(request.method, self.target, data=raw, headers=headers, allow_redirects=False) as upstream:
            answer_raw = await upstream.read()
            status = upstream.status
            content_type = upstream.headers.get("Content-Type", "")
            kept = {
                k: v for k, v in upstream.headers.items() if k.lower() not in HOP_BY_HOP | {"content-type", "content-encoding"}
            }
        try:
            method = json.loads(raw).get("method") if raw else None
        except (ValueError, AttributeError):
            method = None
        if status != 200 or method not in ("tools/call", "tasks/get") or not content_type.startswith("application/json"):
            if content_type:
                kept["Content-Type"] = content_type
            return web.Response(body=answer_raw, status=status, headers=kept)
        answer = json.loads(answer_raw)
        result = answer.get("result") if isinstance(answer.get("result"), dict) else {}
        task_id = result.get("taskId")
        frames = [b": a comment\n\n", b"id: ev-0\ndata:\n\n"]
        if isinstance(task_id, str):
            self.backend_task_ids.append(task_id)
            note = {
                "jsonrpc": "2.0",
                "method": "notifications/progress",
                "params": {"progressToken": "p", "progress": 1, "_meta": {META_RELATED_TASK: {"taskId": task_id}}},
            }
            frames.append(b"id: ev-1\r\nevent: message\r\ndata: " + json.dumps(note).encode() + b"\r\n\r\n")
        frames.append(b"data: not json at all\n\n")
        lines = json.dumps(answer, indent=1).split("\n")
        frames.append(b"id: ev-2\n" + b"".join(b"data: " + line.encode() + b"\n" for line in lines) + b"\n")
        response = web.StreamResponse(status=200, headers={**kept, "Content-Type": "text/event-stream"})
        await response.prepare(request)
        for frame in frames:
            await response.write(frame)
        await response.write_eof()
        return response

    async def stop(self) -> None:
        if self._http is not None:
            await self._http.close()
        if self._runner is not None:
            await self._runner.cleanup()


@pytest.fixture
async def mixed(reference_v1_server, reference_v2_server, tmp_path):
    """The proxy in front of `a` (v1, translated) and `b` (v2-modern, relayed), both tapped."""
    a = await HeaderTap.start(reference_v1_server.url)
    b = await HeaderTap.start(reference_v2_server.url)
    try:
        upstream = [{"name": "a", "url": a.url}, {"name": "b", "url": b.url}]
        async with running_proxy("", tmp_path, upstream=upstream) as proxy, aiohttp.ClientSession() as http:
            yield SimpleNamespace(proxy=proxy, http=http, a=a, b=b, caller=Caller(http, proxy.url))
            async with http.get(proxy.base_url + "/healthz") as alive:
                assert alive.status == 200
    finally:
        await a.stop()
        await b.stop()


def _marks(fleet: SimpleNamespace) -> tuple[int, int]:
    return len(fleet.a.requests), len(fleet.b.requests)


def _assert_untouched(fleet: SimpleNamespace, marks: tuple[int, int], *, streams: bool = False) -> None:
    assert fleet.a.client_traffic(marks[0], streams=streams) == [], "a refused request reached backend a"
    assert fleet.b.client_traffic(marks[1], streams=streams) == [], "a refused request reached backend b"


def _error(answer: Any) -> tuple[int, int | None, str | None]:
    body = answer.body if isinstance(answer.body, dict) else {}
    error = body.get("error") if isinstance(body.get("error"), dict) else {}
    return answer.status, error.get("code"), error.get("message")


def _where(task_id: str, principal: str = ANONYMOUS) -> TaskRef:
    return KEYRING.unseal_task_id(task_id, principal)


async def _created(caller: Caller, backend: str, params: dict[str, Any]) -> dict[str, Any]:
    """A task created on `backend` (calls again until the router picks it; at most 3 picks)."""
    for _ in range(3):
        answer = await caller.call("tools/call", params)
        assert answer.status == 200, answer.body
        if _where(answer.result["taskId"], KEYRING.principal(caller.authorization)).backend == backend:
            return answer.result
        await caller.call("tasks/cancel", {"taskId": answer.result["taskId"]})
    raise AssertionError(f"the router never picked {backend}")


def _relay_backend(session_id: str | None) -> str | None:
    """The backend sealed in a relayed session's id; None for the proxy's own session ids."""
    try:
        return KEYRING.unseal(RELAY_SESSION, session_id or "", "")[0]
    except ValueError:
        return None


def _sse_events(raw: bytes) -> list[Any]:
    parser = SseParser()
    return list(parser.feed(raw + b"\n\n"))


# --- task ids -------------------------------------------------------------------------------------


async def test_task_ids_the_proxy_did_not_issue_for_this_call_never_reach_a_backend(mixed):
    """Every tasks/* method, with ids sealed with the right key but naming an unconfigured backend,
    the wrong kind of upstream task (a relayed backend's id with a session, a translated backend's
    id without one), the wrong number of fields, another principal, another purpose, and garbage:
    400 / -32602 "Unknown task" with the reason (no such backend, the other kind of task, or an
    id that does not unseal for this caller), nothing upstream."""
    caller = mixed.caller
    sealed = {
        "unconfigured backend": KEYRING.seal_task_id(TaskRef("zz", "", "t1"), ANONYMOUS),
        "unconfigured backend with a session": KEYRING.seal_task_id(TaskRef("zz", "s", "t1"), ANONYMOUS),
        "empty backend name": KEYRING.seal_task_id(TaskRef("", "", "t1"), ANONYMOUS),
        "backend name differing in case": KEYRING.seal_task_id(TaskRef("B", "", "t1"), ANONYMOUS),
        "relayed v2 id with a session": KEYRING.seal_task_id(TaskRef("b", "some-session", "forged-b"), ANONYMOUS),
        "translated v1 id without a session": KEYRING.seal_task_id(TaskRef("a", "", "forged-a"), ANONYMOUS),
        "two fields": KEYRING.seal("task", ("b", "forged-b"), ANONYMOUS),
        "four fields": KEYRING.seal("task", ("b", "", "forged-b", "x"), ANONYMOUS),
        "no fields": KEYRING.seal("task", (), ANONYMOUS),
        "another principal's": KEYRING.seal_task_id(TaskRef("b", "", "forged-b"), KEYRING.principal("Bearer mallory")),
        "principal ''": KEYRING.seal_task_id(TaskRef("b", "", "forged-b"), ""),
        "a relay-state token": KEYRING.seal(RELAY_STATE, ("b", "forged-b"), ANONYMOUS),
        "a request-state token": KEYRING.seal_request_state(("ex", "a"), ANONYMOUS, LATER_MS),
        "a relay-session token": KEYRING.seal(RELAY_SESSION, ("b", "forged-b"), ""),
        "a relay-session token for this principal": KEYRING.seal(RELAY_SESSION, ("b", "forged-b"), ANONYMOUS),
        "not base64": "not a sealed id!",
        "base64 noise": base64.urlsafe_b64encode(bytes(range(64))).decode().rstrip("="),
    }
    refused: dict[str, Any] = {label: (400, -32602, UNKNOWN_TASK) for label in sealed}
    for label, name in (
        ("unconfigured backend", "zz"),
        ("unconfigured backend with a session", "zz"),
        ("empty backend name", ""),
        ("backend name differing in case", "B"),
    ):
        refused[label] = (400, -32602, gone_backend(name))
    for label in ("relayed v2 id with a session", "translated v1 id without a session"):
        refused[label] = (400, -32602, ELSEWHERE)
    garbage: dict[str, Any] = {
        "empty": "",
        "20 KB": "A" * 20_000,
        "a number": 12,
        "null": None,
        "an object": {"taskId": "x"},
        "a list": ["x"],
        "true": True,
    }
    refused.update({label: (400, -32602, NOT_ISSUED) for label in garbage})
    ids = {**sealed, **garbage}
    marks = _marks(mixed)
    wrong = []
    for method in ("tasks/get", "tasks/update", "tasks/cancel"):
        for label, task_id in ids.items():
            params: dict[str, Any] = {"taskId": task_id}
            if method == "tasks/update":
                params["inputResponses"] = {"input-1": {"action": "accept", "content": {"confirm": True}}}
            answer = await caller.call(method, params)
            if _error(answer) != refused[label]:
                wrong.append((method, label, answer.status, answer.body))
    assert wrong == []
    _assert_untouched(mixed, marks)


async def test_mcp_name_of_another_sealed_id_is_a_header_mismatch(mixed):
    """`Mcp-Name` must equal the body's sealed id: another task's sealed id (on the other backend)
    is 400 / -32020 and reaches no backend; the sentinel-encoded form of the right id is accepted;
    what reaches the relayed backend names its own id in both body and `Mcp-Name`."""
    caller = mixed.caller
    on_a = await _created(caller, "a", {"name": "slow_compute", "arguments": {"seconds": 30, "label": "na"}})
    on_b = await _created(caller, "b", {"name": "slow_compute", "arguments": {"seconds": 30, "label": "nb"}})
    id_a, id_b = on_a["taskId"], on_b["taskId"]
    marks = _marks(mixed)
    for body_id, header_id in (
        (id_a, id_b),
        (id_b, id_a),
        (id_b, id_b + "x"),
        (id_a, "=?base64?" + base64.b64encode(id_b.encode()).decode() + "?="),
    ):
        for method in ("tasks/get", "tasks/cancel"):
            answer = await caller.call(method, {"taskId": body_id}, headers={"Mcp-Name": header_id})
            assert _error(answer) == (400, -32020, "Mcp-Name header does not match the request body"), (method, answer.body)
    # Two Mcp-Name lines, the right id and another one.
    body = caller.body("tasks/get", {"taskId": id_b})
    headers = CIMultiDict({**caller.headers("tasks/get"), "Content-Type": "application/json"})
    headers.add("Mcp-Name", id_b)
    headers.add("Mcp-Name", id_a)
    answer = await caller.raw(json.dumps(body), headers)
    assert _error(answer) == (400, -32020, "Mcp-Name header sent more than once with different values")
    _assert_untouched(mixed, marks)

    mark_b = len(mixed.b.requests)
    for task_id in (id_a, id_b):
        for header in (task_id, "=?base64?" + base64.b64encode(task_id.encode()).decode() + "?="):
            answer = await caller.call("tasks/get", {"taskId": task_id}, headers={"Mcp-Name": header})
            assert (answer.status, answer.result["taskId"], answer.result["status"]) == (200, task_id, "working")
    own = _where(id_b).task
    relayed = [
        (h.get("Mcp-Name"), body["params"]["taskId"])
        for method, h, body in mixed.b.requests[mark_b:]
        if method == "POST" and isinstance(body, dict) and body.get("method") == "tasks/get"
    ]
    assert relayed == [(own, own), (own, own)]
    for task_id in (id_a, id_b):
        assert (await caller.call("tasks/cancel", {"taskId": task_id})).status == 200


async def test_another_principals_ids_and_states_are_unknown_on_both_backends(mixed):
    """Alice's tasks and MRTR states, on the translated and the relayed backend, are unknown to
    Mallory and to anonymous callers (400, nothing upstream), and still work for Alice."""
    alice = Caller(mixed.http, mixed.proxy.url, authorization="Bearer alice")
    strangers = [
        Caller(mixed.http, mixed.proxy.url, authorization="Bearer mallory"),
        mixed.caller,
        Caller(mixed.http, mixed.proxy.url, authorization="bearer alice"),
    ]
    tasks = {
        backend: await _created(alice, backend, {"name": "slow_compute", "arguments": {"seconds": 30, "label": backend}})
        for backend in ("a", "b")
    }
    rounds = []
    for _ in range(2):
        first = (await alice.call("tools/call", {"name": "test_tool_with_task"})).result
        assert first["resultType"] == "input_required"
        rounds.append(first)
    marks = _marks(mixed)
    for stranger in strangers:
        for task in tasks.values():
            for method in ("tasks/get", "tasks/update", "tasks/cancel"):
                answer = await stranger.call(method, {"taskId": task["taskId"], "inputResponses": {}})
                assert _error(answer) == (400, -32602, UNKNOWN_TASK), (method, answer.body)
        for first in rounds:
            [key] = first["inputRequests"]
            answer = await stranger.call(
                "tools/call",
                {
                    "name": "test_tool_with_task",
                    "requestState": first["requestState"],
                    "inputResponses": {key: {"action": "accept", "content": {"name": "Mallory"}}},
                },
            )
            assert _error(answer) == (400, -32602, INVALID_STATE), answer.body
    _assert_untouched(mixed, marks)

    principal = KEYRING.principal("Bearer alice")
    for backend, task in tasks.items():
        assert _where(task["taskId"], principal).backend == backend
        assert (await alice.call("tasks/get", {"taskId": task["taskId"]})).result["status"] == "working"
        assert (await alice.call("tasks/cancel", {"taskId": task["taskId"]})).status == 200
    finished = []
    for i, first in enumerate(rounds):
        [key] = first["inputRequests"]
        task = (
            await alice.call(
                "tools/call",
                {
                    "name": "test_tool_with_task",
                    "requestState": first["requestState"],
                    "inputResponses": {key: {"action": "accept", "content": {"name": f"Alice{i}"}}},
                },
            )
        ).result
        finished.append(
            (_where(task["taskId"], principal).backend, (await alice.poll(task["taskId"]))["result"]["content"][0]["text"])
        )
    assert sorted(finished) == [
        ("a", "Hello, Alice0! test_tool_with_task finished."),
        ("b", "Hello, Alice1! test_tool_with_task finished."),
    ]


async def test_tasks_get_without_the_extension_is_answered_alike_whichever_backend_is_next(mixed):
    """A `tasks/*` request that does not declare the tasks extension is -32021 (the proxy's own
    answer for a translated backend, the backend's for a relayed one), whatever backend the round
    robin would pick next. Today `_route` binds a task request to its backend only when the
    extension is declared, so without it the request is new work: when the round robin lands on
    the relayed backend `b` with a task of `a`, `_relayed_task` answers "Unknown task"."""
    caller = mixed.caller
    ids = [
        (await _created(caller, backend, {"name": "slow_compute", "arguments": {"seconds": 30, "label": backend}}))["taskId"]
        for backend in ("a", "b")
    ]
    answers = []
    for task_id in ids:
        for _ in range(2):  # two picks in a row: one lands on each backend
            answer = await caller.call("tasks/get", {"taskId": task_id}, declare=False)
            answers.append((_where(task_id).backend, *_error(answer)[:2]))
    assert answers == [("a", 400, -32021)] * 2 + [("b", 400, -32021)] * 2
    for task_id in ids:
        assert (await caller.call("tasks/cancel", {"taskId": task_id})).status == 200


async def test_subscriptions_listen_goes_to_the_backend_of_its_tasks(reference_v2_server, second_v2_server, tmp_path):
    """decisions.md 23: only "a request without a task id" is new work. `subscriptions/listen`
    names task ids (`params.notifications.taskIds`), yet `_route` hands it to the round robin: on
    the other backend, `_relayed_task` refuses the client's own valid id as "Unknown task". The
    answer must be the task's backend's (the same for every call), never "Unknown task"."""
    upstream = [{"name": "a", "url": reference_v2_server.url}, {"name": "b", "url": second_v2_server.url}]
    async with running_proxy("", tmp_path, upstream=upstream) as proxy, aiohttp.ClientSession() as http:
        caller = Caller(http, proxy.url)
        ids = [
            (await _created(caller, backend, {"name": "slow_compute", "arguments": {"seconds": 30, "label": backend}}))["taskId"]
            for backend in ("a", "b")
        ]
        for task_id in ids:
            answers = []
            for _ in range(2):
                try:
                    async with asyncio.timeout(5):
                        async with http.post(
                            proxy.url,
                            json=caller.body("subscriptions/listen", {"notifications": {"taskIds": [task_id]}}),
                            headers=caller.headers("subscriptions/listen"),
                        ) as response:
                            if response.headers.get("Content-Type", "").startswith("text/event-stream"):
                                answers.append((response.status, "stream"))  # a subscription: not read further
                            else:
                                error = (await response.json()).get("error") or {}
                                answers.append((response.status, error.get("code")))
                except TimeoutError:
                    answers.append(("no answer within 5 s", None))
            assert answers[0] == answers[1], (_where(task_id).backend, answers)
            assert all(answer[1] != -32602 for answer in answers), answers
        for task_id in ids:
            assert (await caller.call("tasks/cancel", {"taskId": task_id})).status == 200


# --- MRTR request states --------------------------------------------------------------------------


async def test_garbage_request_states_are_invalid_and_reach_no_backend(mixed):
    """requestState null, a number, an object, a list, true, "", 20 KB of noise, 20 KB of valid
    base64, a task id, a relay-session token, another principal's, a translated state sent to the
    relayed backend and a relayed one sent to the translated backend: 400 / -32602 "Invalid
    requestState" (expired: its own message), on every MRTR method."""
    caller = mixed.caller
    states: dict[str, Any] = {
        "null": None,
        "a number": 12,
        "an object": {"requestState": "x"},
        "a list": ["x"],
        "true": True,
        "empty": "",
        "20 KB noise": "!" * 20_000,
        "20 KB base64": "QUJD" * 5_000,
        "not sealed": "abc",
        "a task id": KEYRING.seal_task_id(TaskRef("b", "", "t"), ANONYMOUS),
        "a relay-session token": KEYRING.seal(RELAY_SESSION, ("b", "st"), ""),
        "a relay-session token for this principal": KEYRING.seal(RELAY_SESSION, ("b", "st"), ANONYMOUS),
        "another principal's request-state": KEYRING.seal_request_state(("ex", "a"), KEYRING.principal("Bearer m"), LATER_MS),
        "another principal's relay-state": KEYRING.seal(RELAY_STATE, ("b", "st"), KEYRING.principal("Bearer m")),
        "a request-state naming the relayed backend": KEYRING.seal_request_state(("ex", "b"), ANONYMOUS, LATER_MS),
        "a relay-state naming the translated backend": KEYRING.seal(RELAY_STATE, ("a", "st"), ANONYMOUS),
        "a relay-state with a third field": KEYRING.seal(RELAY_STATE, ("b", "st", "x"), ANONYMOUS),
        "a relay-state with one field": KEYRING.seal(RELAY_STATE, ("b",), ANONYMOUS),
        "a request-state with one field": KEYRING.seal_request_state(("a",), ANONYMOUS, LATER_MS),
        "a request-state with a third field": KEYRING.seal_request_state(("ex", "a", "x"), ANONYMOUS, LATER_MS),
        "a request-state with no fields": KEYRING.seal_request_state((), ANONYMOUS, LATER_MS),
    }
    expected: dict[str, Any] = {label: (400, -32602, INVALID_STATE) for label in states}
    states["expired"] = KEYRING.seal_request_state(("ex", "a"), ANONYMOUS, 1)
    expected["expired"] = (400, -32602, "Expired requestState: send the original request again")
    states["no such exchange"] = KEYRING.seal_request_state(("ex", "a"), ANONYMOUS, LATER_MS)
    expected["no such exchange"] = (400, -32602, NO_EXCHANGE)
    calls = {"tools/call": {"name": "test_tool_with_task"}, "prompts/get": {"name": "p"}, "resources/read": {"uri": "file:///x"}}
    marks = _marks(mixed)
    wrong = []
    for method, params in calls.items():
        for label, state in states.items():
            answer = await caller.call(method, {**params, "requestState": state, "inputResponses": {"r1": {"action": "decline"}}})
            if _error(answer) != expected[label]:
                wrong.append((method, label, answer.status, answer.body))
    assert wrong == []
    _assert_untouched(mixed, marks)


async def test_a_relay_state_without_fields_is_invalid_not_an_internal_error(mixed):
    """A "relay-state" token sealing no field: `_state_backend` takes `unseal(...)[0]` outside its
    `ValueError` handler, so the `IndexError` becomes HTTP 500 "Internal error". Expected: 400 /
    -32602 "Invalid requestState", like every other malformed state."""
    marks = _marks(mixed)
    answer = await mixed.caller.call(
        "tools/call", {"name": "greet", "arguments": {"name": "x"}, "requestState": KEYRING.seal(RELAY_STATE, (), ANONYMOUS)}
    )
    assert _error(answer) == (400, -32602, INVALID_STATE), (answer.status, answer.body)
    _assert_untouched(mixed, marks)


async def test_a_request_state_naming_an_unconfigured_backend_is_an_invalid_request_state(mixed):
    """A state sealed with the right key whose backend is not configured (it outlived its
    backend), or whose first relay-state field is not a backend: the retry is refused as a bad
    `requestState` (400 / -32602, as when its exchange is gone), not as "Unknown task" — there is
    no task in an MRTR retry. Today `Fleet.named` answers "Unknown task"."""
    cases = {
        "request-state (exchange, 'zz')": KEYRING.seal_request_state(("ex", "zz"), ANONYMOUS, LATER_MS),
        "relay-state ('zz', state)": KEYRING.seal(RELAY_STATE, ("zz", "st"), ANONYMOUS),
        "relay-state (state, 'b', extra)": KEYRING.seal(RELAY_STATE, ("st", "b", "x"), ANONYMOUS),
    }
    marks = _marks(mixed)
    answers = {}
    for label, state in cases.items():
        answer = await mixed.caller.call(
            "tools/call", {"name": "test_tool_with_task", "requestState": state, "inputResponses": {"r1": {"action": "decline"}}}
        )
        answers[label] = _error(answer)
    assert all(
        status == 400 and code == -32602 and message in (INVALID_STATE, NO_EXCHANGE) for status, code, message in answers.values()
    ), answers
    _assert_untouched(mixed, marks)


# --- relayed session ids --------------------------------------------------------------------------


async def _session_request(fleet: SimpleNamespace, verb: str, session_id: str) -> tuple[int, int | None, str | None]:
    if verb == "POST":
        client = SessionCaller(fleet.http, fleet.proxy.url)
        client.session_id = session_id
        answer = await client.call("tools/list")
        error = answer.get("error") or {}
        return answer["_status"], error.get("code"), error.get("message")
    headers = {"Mcp-Session-Id": session_id, "Accept": "text/event-stream", "MCP-Protocol-Version": "2025-11-25"}
    async with fleet.http.request(verb, fleet.proxy.url, headers=headers) as response:
        raw = await response.read()
        try:
            error = json.loads(raw).get("error") or {}
        except (ValueError, AttributeError):
            error = {"message": raw[:200]}
        return response.status, error.get("code"), error.get("message")


async def test_session_ids_that_name_no_relayed_session_are_404(mixed):
    """`Mcp-Session-Id` on GET, DELETE and a session-wire POST: relay-session tokens naming an
    unconfigured backend, with one or three fields, sealed for a principal, other purposes,
    garbage → 404 / -32600 "Session not found" from the proxy, nothing upstream. A token naming
    the v2-modern backend or a session the v1 backend does not hold: 404 as on a direct connection."""
    unknown = {
        "unconfigured backend": KEYRING.seal(RELAY_SESSION, ("zz", "sid"), ""),
        "empty backend": KEYRING.seal(RELAY_SESSION, ("", "sid"), ""),
        "one field": KEYRING.seal(RELAY_SESSION, ("a",), ""),
        "three fields": KEYRING.seal(RELAY_SESSION, ("a", "sid", "x"), ""),
        "no fields": KEYRING.seal(RELAY_SESSION, (), ""),
        "sealed for a principal": KEYRING.seal(RELAY_SESSION, ("a", "sid"), ANONYMOUS),
        "a task id": KEYRING.seal_task_id(TaskRef("a", "sid", "t"), ANONYMOUS),
        "a task id for principal ''": KEYRING.seal_task_id(TaskRef("a", "sid", "t"), ""),
        "a relay-state": KEYRING.seal(RELAY_STATE, ("a", "sid"), ""),
        "garbage": "not-a-session",
        "long garbage": "A" * 8_000,
    }
    marks = _marks(mixed)
    wrong = []
    for verb in ("GET", "DELETE", "POST"):
        for label, session_id in unknown.items():
            got = await _session_request(mixed, verb, session_id)
            if got != (404, -32600, "Session not found"):
                wrong.append((verb, label, got))
    assert wrong == []
    _assert_untouched(mixed, marks, streams=True)

    relayed_404 = {
        "the v2-modern backend": KEYRING.seal(RELAY_SESSION, ("b", "sid"), ""),
        "a session backend a does not hold": KEYRING.seal(RELAY_SESSION, ("a", "no-such-upstream-session"), ""),
    }
    for verb in ("GET", "DELETE", "POST"):
        for label, session_id in relayed_404.items():
            status, code, _message = await _session_request(mixed, verb, session_id)
            if status != 404 or code not in (-32600, -32001, None):
                wrong.append((verb, label, status, code))
    assert wrong == []


async def test_a_relayed_session_id_with_control_characters_is_not_an_internal_error(mixed):
    """A relay-session token (right key) whose upstream id holds CR LF: the proxy puts it in the
    upstream `Mcp-Session-Id` header, aiohttp refuses it with `ValueError` ("header injection"),
    which neither `relay` nor `_other_method` catches: HTTP 500 (a plain-text one for GET and
    DELETE). No backend can have handed out such an id; expected 404 "Session not found"."""
    token = KEYRING.seal(RELAY_SESSION, ("a", "sid\r\nX-Injected: 1"), "")
    got = {verb: await _session_request(mixed, verb, token) for verb in ("GET", "DELETE", "POST")}
    assert got == {verb: (404, -32600, "Session not found") for verb in got}, got
    assert not any("X-Injected" in headers for _m, headers, _b in mixed.a.requests)


async def test_relayed_v1_sessions_survive_attacks_on_their_neighbours(reference_v1_server, reference_v2_server, tmp_path):
    """Two relayed v1 sessions on `a` (v1) next to `b` (v2-modern, whose v1 clients the proxy
    translates): each keeps working; a token re-sealed to name `b` with the same upstream id, and
    the backend's own id given bare, are 404 and never reach the session on `a`."""
    a = await HeaderTap.start(reference_v1_server.url)
    try:
        upstream = [{"name": "a", "url": a.url}, {"name": "b", "url": reference_v2_server.url, "weight": 1}]
        async with running_proxy("", tmp_path, upstream=upstream) as proxy, aiohttp.ClientSession() as http:
            clients = [SessionCaller(http, proxy.url) for _ in range(3)]
            for client in clients:
                await client.initialize()
            relayed = [c for c in clients if _relay_backend(c.session_id) == "a"]
            assert len(relayed) == 2 and _relay_backend(clients[1].session_id) is None  # b's: the proxy's own session
            _name, own_id, _plain = KEYRING.unseal(RELAY_SESSION, relayed[0].session_id, "")

            def reached() -> int:
                return sum(1 for _m, h, _b in a.requests if h.get("Mcp-Session-Id") == own_id)

            before = reached()
            moved = SessionCaller(http, proxy.url)
            moved.session_id = KEYRING.seal(RELAY_SESSION, ("b", own_id), "")
            assert (await moved.call("tools/list"))["_status"] == 404
            raw = SessionCaller(http, proxy.url)
            raw.session_id = own_id  # the backend's own id, never handed out by the proxy
            assert (await raw.call("tools/list"))["_status"] == 404
            assert reached() == before
            for i, client in enumerate(relayed):
                answer = await client.call("tools/call", {"name": "greet", "arguments": {"name": f"s{i}"}})
                assert answer["result"]["content"][0]["text"] == f"Hello, s{i}!"
    finally:
        await a.stop()


# --- answers of a relayed backend in SSE ----------------------------------------------------------


async def test_sse_answers_of_a_relayed_backend_are_rewritten_event_by_event(reference_v1_server, reference_v2_server, tmp_path):
    """The relayed v2-modern backend answers `tools/call` and `tasks/get` as SSE streams: every
    JSON-RPC event is rewritten (result.taskId and the related-task id sealed for the backend),
    other events and event ids pass, the backend's own task id never reaches the client."""
    front = await SseFront.start(reference_v2_server.url)
    try:
        upstream = [{"name": "s", "url": front.url}, {"name": "a", "url": reference_v1_server.url}]
        async with running_proxy("", tmp_path, upstream=upstream) as proxy, aiohttp.ClientSession() as http:
            caller = Caller(http, proxy.url)
            answer = await caller.call("tools/call", {"name": "slow_compute", "arguments": {"seconds": 0.3, "label": "sse"}})
            assert (answer.status, answer.headers["Content-Type"].split(";")[0]) == (200, "text/event-stream")
            assert isinstance(answer.body, bytes)
            [own_id] = front.backend_task_ids
            assert own_id.encode() not in answer.body
            events = _sse_events(answer.body)
            assert [(e.id, e.event) for e in events] == [("ev-1", "message"), ("ev-1", "message"), ("ev-2", "message")]
            note, text, final = events
            assert text.data == "not json at all"
            task_id = json.loads(final.data)["result"]["taskId"]
            assert _where(task_id) == TaskRef("s", "", own_id)
            assert json.loads(note.data)["params"]["_meta"][META_RELATED_TASK] == {"taskId": task_id}
            assert answer.headers.get("Mcp-Name") in (None, task_id)

            for _ in range(100):
                polled = await caller.call("tasks/get", {"taskId": task_id})
                assert polled.status == 200 and own_id.encode() not in polled.body
                result = json.loads(_sse_events(polled.body)[-1].data)["result"]
                assert result["taskId"] == task_id
                if result["status"] == "completed":
                    break
                await asyncio.sleep(0.1)
            assert result["result"]["content"][0]["text"] == "computed sse"
    finally:
        await front.stop()


# --- many calls at once ---------------------------------------------------------------------------


async def test_fifty_concurrent_calls_across_two_backends_each_come_back_right(mixed):
    """50 task-creating calls at once from 5 principals, half on each backend, then all polled at
    once by their owners; 20 plain calls and 10 MRTR exchanges at once: every answer is the one
    asked for, sealed for its principal and routed back to its backend."""
    callers = [Caller(mixed.http, mixed.proxy.url, authorization=f"Bearer user{n}") for n in range(5)]
    created = await asyncio.gather(
        *(
            callers[i % 5].call("tools/call", {"name": "slow_compute", "arguments": {"seconds": 0.2, "label": f"c{i}"}})
            for i in range(50)
        )
    )
    assert [answer.status for answer in created] == [200] * 50
    refs = [_where(answer.result["taskId"], KEYRING.principal(f"Bearer user{i % 5}")) for i, answer in enumerate(created)]
    assert sorted(ref.backend for ref in refs).count("a") == 25
    assert all(bool(ref.session) == (ref.backend == "a") for ref in refs)
    finals = await asyncio.gather(*(callers[i % 5].poll(answer.result["taskId"], timeout=30) for i, answer in enumerate(created)))
    assert [(f["taskId"], f["result"]["content"][0]["text"]) for f in finals] == [
        (answer.result["taskId"], f"computed c{i}") for i, answer in enumerate(created)
    ]
    stolen = await callers[1].call("tasks/get", {"taskId": created[0].result["taskId"]})
    assert _error(stolen) == (400, -32602, UNKNOWN_TASK)

    plain = await asyncio.gather(
        *(callers[i % 5].call("tools/call", {"name": "greet", "arguments": {"name": f"g{i}"}}) for i in range(20))
    )
    assert [(p.status, p.result["content"][0]["text"]) for p in plain] == [(200, f"Hello, g{i}!") for i in range(20)]

    async def exchange(i: int) -> tuple[str, str, str]:
        caller = callers[i % 5]
        first = (await caller.call("tools/call", {"name": "test_tool_with_task"})).result
        [key] = first["inputRequests"]
        try:
            state_backend = KEYRING.unseal(RELAY_STATE, first["requestState"], KEYRING.principal(caller.authorization))[0]
        except ValueError:
            state_backend = KEYRING.unseal_request_state(first["requestState"], KEYRING.principal(caller.authorization), 0)[1]
        task = (
            await caller.call(
                "tools/call",
                {
                    "name": "test_tool_with_task",
                    "requestState": first["requestState"],
                    "inputResponses": {key: {"action": "accept", "content": {"name": f"N{i}"}}},
                },
            )
        ).result
        final = await caller.poll(task["taskId"], timeout=30)
        return (
            state_backend,
            _where(task["taskId"], KEYRING.principal(caller.authorization)).backend,
            final["result"]["content"][0]["text"],
        )

    results = await asyncio.gather(*(exchange(i) for i in range(10)))
    assert all(state == task for state, task, _text in results), results
    assert sorted(state for state, _task, _text in results).count("a") == 5
    assert [text for _s, _t, text in results] == [f"Hello, N{i}! test_tool_with_task finished." for i in range(10)]
