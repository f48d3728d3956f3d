"""translators.shadow: what is mirrored, the canonical form of an answer, the comparison and its diff."""

from __future__ import annotations

import pytest

from translators import shadow

V1_TOOLS = {
    "tools": [
        {"name": "b", "inputSchema": {"type": "object", "required": ["y", "x"]}, "execution": {"taskSupport": "optional"}},
        {"name": "a", "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": True}, "_meta": {"x": 1}},
    ],
    "nextCursor": "page-2",
}
V2_TOOLS = {
    "resultType": "complete",
    "ttlMs": 0,
    "tools": [
        {"name": "a", "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": True}},
        {"name": "b", "inputSchema": {"type": "object", "required": ["x", "y"]}},
    ],
}


def test_a_v1_and_a_v2_listing_of_the_same_tools_are_one_canonical_listing():
    assert (
        shadow.canonical_answer("tools/list", V1_TOOLS)
        == shadow.canonical_answer("tools/list", V2_TOOLS)
        == {
            "result": {
                "tools": [
                    {"name": "a", "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": True}},
                    {"name": "b", "inputSchema": {"type": "object", "required": ["x", "y"]}},
                ]
            }
        }
    )


def test_other_listings_are_sorted_by_their_key():
    listed = {"resources": [{"uri": "z://", "name": "z"}, {"uri": "a://", "name": "a"}]}
    assert shadow.canonical_result("resources/list", listed) == {
        "resources": [{"uri": "a://", "name": "a"}, {"uri": "z://", "name": "z"}]
    }
    templates = {"resourceTemplates": [{"uriTemplate": "b/{x}"}, {"uriTemplate": "a/{x}"}]}
    assert shadow.canonical_result("resources/templates/list", templates) == {
        "resourceTemplates": [{"uriTemplate": "a/{x}"}, {"uriTemplate": "b/{x}"}]
    }


def test_a_call_result_always_says_is_error_and_drops_an_empty_structured_content():
    v1 = {"content": [{"type": "text", "text": "t"}], "_meta": {"io.modelcontextprotocol/related-task": {"taskId": "1"}}}
    v2 = {"content": [{"type": "text", "text": "t"}], "isError": False, "structuredContent": {}, "resultType": "complete"}
    assert (
        shadow.canonical_answer("tools/call", v1)
        == shadow.canonical_answer("tools/call", v2)
        == {"result": {"content": [{"type": "text", "text": "t"}], "isError": False}}
    )


def test_a_task_ended_is_its_outcome():
    base = {
        "taskId": "t1",
        "createdAt": "2026-01-01T00:00:00Z",
        "lastUpdatedAt": "2026-01-01T00:00:01Z",
        "ttlMs": 5,
        "resultType": "complete",
    }
    completed = {**base, "status": "completed", "result": {"content": [], "resultType": "complete"}}
    assert shadow.canonical_task_end("tools/call", completed) == {"result": {"content": [], "isError": False}}
    failed = {**base, "status": "failed", "error": {"code": -32603, "message": "boom"}}
    assert shadow.canonical_task_end("tools/call", failed) == {"error": {"code": -32603}}
    assert shadow.canonical_task_end("tools/call", {**base, "status": "cancelled"}) == {"cancelled": True}
    asking = {
        **base,
        "status": "input_required",
        "inputRequests": {
            "k2": {"method": "sampling/createMessage", "params": {}},
            "k1": {"method": "elicitation/create", "params": {}},
        },
    }
    assert shadow.canonical_task_end("tools/call", asking) == {"asks": ["elicitation/create", "sampling/createMessage"]}
    assert [
        shadow.task_ended({**base, "status": s}) for s in ("working", "input_required", "completed", "failed", "cancelled")
    ] == [False, True, True, True, True]


def test_a_question_on_tools_call_is_its_methods():
    asked = {"resultType": "input_required", "inputRequests": {"a": {"method": "elicitation/create", "params": {"message": "?"}}}}
    assert shadow.canonical_answer("tools/call", asked) == {"asks": ["elicitation/create"]}


def test_created_tasks_of_either_dialect():
    assert shadow.result_kind({"task": {"taskId": "v1", "status": "working"}}) == "task"
    assert shadow.result_kind({"resultType": "task", "taskId": "v2"}) == "task"
    assert shadow.result_kind({"resultType": "input_required"}) == "input"
    assert shadow.result_kind({"content": []}) == "final"
    assert shadow.created_task_id({"task": {"taskId": "v1"}}) == "v1"
    assert shadow.created_task_id({"resultType": "task", "taskId": "v2"}) == "v2"
    assert shadow.created_task_id({"content": []}) is None


def test_what_is_mirrored():
    assert [
        shadow.mirrorable(m, {})
        for m in (
            "tools/list",
            "resources/read",
            "prompts/get",
            "tools/call",
            "tasks/get",
            "completion/complete",
            "resources/subscribe",
            "initialize",
        )
    ] == [True, True, True, True, False, False, False, False]
    assert shadow.mirrorable("tools/list", {"cursor": "c"}) is False  # the primary's own cursor
    assert shadow.mirror_params({"name": "x", "arguments": {}, "_meta": {"a": 1}, "task": {"ttl": 5}}) == {
        "name": "x",
        "arguments": {},
    }
    assert shadow.read_only_tools(V1_TOOLS) == frozenset({"a"})
    assert shadow.listed_tools(V2_TOOLS) == frozenset({"a", "b"})
    read_only = shadow.read_only_tools(V2_TOOLS)
    assert [shadow.mirrored_tool(n, read_only, ["c"]) for n in ("a", "b", "c", None)] == [True, False, True, False]
    assert shadow.tool_name("tools/call", {"name": "a"}) == "a" and shadow.tool_name("prompts/get", {"name": "a"}) is None


def test_differences_skip_ignored_paths_and_name_each_place():
    primary = {
        "result": {"content": [{"type": "text", "text": "sunny"}], "isError": False, "structuredContent": {"at": 1, "v": 2}}
    }
    candidate = {
        "result": {"content": [{"type": "text", "text": "rainy"}], "isError": False, "structuredContent": {"at": 9, "w": 2}}
    }
    ignore = [shadow.parse_path("result.structuredContent.at")]
    found = shadow.differences(primary, candidate, ignore)
    assert found == [
        ("result.content.0.text", "sunny", "rainy"),
        ("result.structuredContent.v", 2, shadow.ABSENT),
        ("result.structuredContent.w", shadow.ABSENT, 2),
    ]
    assert shadow.differences(primary, candidate, [shadow.parse_path("result.*")]) == []
    assert (
        shadow.differences(
            primary, candidate, [shadow.parse_path("result.content.*.text"), shadow.parse_path("result.structuredContent")]
        )
        == []
    )
    assert shadow.differences({"error": {"code": -32601}}, {"result": {}}) == [
        ("error", {"code": -32601}, "(absent)"),
        ("result", "(absent)", {}),
    ]
    assert shadow.differences({"result": {"n": 1}}, {"result": {"n": 1.0}}) == [("result.n", 1, 1.0)]
    assert shadow.differences({"result": [1, 2]}, {"result": [1]}) == [("result", [1, 2], [1])]


def test_the_compact_diff():
    found = [(f"result.k{i}", "x" * 70, i) for i in range(7)]
    lines = shadow.compact_diff(found).split("\n")
    assert len(lines) == 6 and lines[-1] == "(+2 more)"
    assert lines[0] == 'result.k0: "' + "x" * 58 + "… → 0"
    assert shadow.compact_diff([("result.v", 2, shadow.ABSENT)]) == "result.v: 2 → (absent)"
    assert shadow.compact_diff([]) == ""


@pytest.mark.parametrize("path", ["", "result..x", ".result", "content.0.text"])
def test_bad_ignore_paths_are_refused(path):
    with pytest.raises(ValueError):
        shadow.parse_path(path)
