"""The rollout's pure parts (docs/configuration.md "Rollout"): a step's counts from minute figures
less its baseline, the gates' verdict, the record's moves and the weights each state sets."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.config import ConfigError, load
from proxy.observe.figures import TOOL_MS, TOOLS
from proxy.rollout import judge
from proxy.rollout.settings import Rollout
from proxy.rollout.state import COMPLETED, PAUSED, ROLLED_BACK, RUNNING, acted, begin, judged, weights

PAIR = ("old", "new")


def _rollout(**keys: Any) -> Rollout:
    return Rollout.model_validate({"from": "old", "to": "new", "steps": [20, 50, 100], "step_ms": 1000, "min_calls": 10, **keys})


def _minute(calls: dict[tuple[str, str, str], int], minute: int = 100) -> tuple[int, dict[tuple[Any, ...], int]]:
    """One minute's bucket: (backend, tool, outcome) → calls, each also counted in latency bucket 10."""
    bucket: dict[tuple[Any, ...], int] = {}
    for (backend, tool, outcome), n in calls.items():
        bucket[(TOOLS, backend, tool, "v2-modern", outcome)] = n
        bucket[(TOOL_MS, backend, tool, 10)] = bucket.get((TOOL_MS, backend, tool, 10), 0) + n
    return minute, bucket


def test_a_steps_counts_are_the_figures_since_less_those_of_its_first_minute_when_it_began() -> None:
    begun = judge.baseline([_minute({("old", "lookup", "ok"): 7, ("other", "lookup", "ok"): 3})], PAIR, 100 * 60_000 + 5)
    assert begun == {
        "minute": 100,
        "counts": [[[TOOLS, "old", "lookup", "v2-modern", "ok"], 7], [[TOOL_MS, "old", "lookup", 10], 7]],
        "shadow": {"match": 0, "differ": 0},
    }
    later = [
        _minute({("old", "lookup", "ok"): 9}),
        _minute({("old", "lookup", "ok"): 4, ("new", "lookup", "tool_error"): 2}, 101),
    ]
    counts = judge.since(later, begun, PAIR)
    assert counts.calls == {"old": {"lookup": {"ok": 6}}, "new": {"lookup": {"tool_error": 2}}}
    assert counts.latency == {"old": {"lookup": {10: 6}}, "new": {"lookup": {10: 2}}}


def _counts(calls: dict[tuple[str, str, str], int]) -> judge.Counts:
    return judge.since([_minute(calls)], {"minute": 100, "counts": []}, PAIR)


def test_a_new_backend_failing_half_its_calls_fails_the_tool_error_gate() -> None:
    step = _counts({("old", "lookup", "ok"): 40, ("new", "lookup", "ok"): 5, ("new", "lookup", "tool_error"): 5})
    verdict = judge.verdict(_rollout(), step, step, None)
    assert verdict["outcome"] == "fail"
    assert verdict["figures"]["gates"] == [
        {"gate": "tool errors", "to": 0.5, "from": 0.0, "increase": 0.5, "max": 0.05, "z": 4.71},
        {"gate": "errors", "to": 0.0, "from": 0.0, "increase": 0.0, "max": 0.05, "z": 0.0},
    ]
    assert verdict["reason"] == "tool errors 50.0 % on new against 0.0 % on old: +50.0 points, max 5.0 (z = 4.71)"


def test_too_few_calls_hold_and_an_increase_within_chance_holds_for_more() -> None:
    few = _counts({("old", "lookup", "ok"): 40, ("new", "lookup", "ok"): 9})
    assert judge.verdict(_rollout(), few, few, None)["reason"] == (
        "9 calls on new and 40 on old on the tools both answered: 10 each before a check"
    )
    chance = _counts({("old", "lookup", "ok"): 10, ("new", "lookup", "ok"): 9, ("new", "lookup", "tool_error"): 1})
    verdict = judge.verdict(_rollout(), chance, chance, None)
    assert (verdict["outcome"], verdict["figures"]["gates"][0]["z"]) == ("hold", 1.03)


def test_a_tool_only_the_new_backend_has_is_not_compared_and_the_100_percent_step_compares_with_the_whole_rollout() -> None:
    step = _counts({("new", "lookup", "ok"): 12, ("new", "fresh", "tool_error"): 12, ("old", "lookup", "ok"): 2})
    whole = _counts({("old", "lookup", "ok"): 30, ("new", "lookup", "ok"): 12})
    verdict = judge.verdict(_rollout(), step, whole, None)
    assert (verdict["outcome"], verdict["figures"]["tools"], verdict["figures"]["from_counted"]) == (
        "pass",
        ["lookup"],
        "rollout",
    )


def test_the_latency_and_shadow_gates_when_set() -> None:
    step = _counts({("old", "lookup", "ok"): 20, ("new", "lookup", "ok"): 20})
    step.latency["new"]["lookup"] = {20: 20}
    verdict = judge.verdict(_rollout(max_p95_ratio=2.0, min_shadow_match=0.9), step, step, {"match": 8, "differ": 2})
    assert verdict["outcome"] == "fail"
    assert verdict["reason"] == (
        "p95 108.4 ms on new is 9.34 × 11.6 ms on old (max 2); 80.0 % of 10 shadow comparisons matched (min 90.0 %)"
    )


def test_the_record_moves_step_by_step_and_rolls_back_after_the_failures_allowed() -> None:
    rollout = _rollout(failures_before_rollback=2)
    record = begin(rollout, 1000, {"minute": 0, "counts": []})
    assert (record.state, record.step, record.version) == (RUNNING, 0, 1)
    passed = judged(record, rollout, {"outcome": "pass", "reason": "ok", "figures": {}}, 2000, {"minute": 1, "counts": []})
    assert (passed.state, passed.step, passed.step_started_ms, passed.version) == (RUNNING, 1, 2000, 2)
    held = judged(passed, rollout, {"outcome": "hold", "reason": "few", "figures": {}}, 3000, {})
    assert (held.step, held.history, held.last_check["reason"], held.version) == (1, passed.history, "few", 3)
    once = judged(held, rollout, {"outcome": "fail", "reason": "bad", "figures": {}}, 4000, {"minute": 2, "counts": []})
    assert (once.state, once.step, once.failures, once.step_started_ms) == (RUNNING, 1, 1, 4000)
    twice = judged(once, rollout, {"outcome": "fail", "reason": "bad", "figures": {}}, 5000, {})
    assert (twice.state, [e["event"] for e in twice.history]) == (ROLLED_BACK, ["started", "passed", "failed", "failed"])
    assert twice.history[-1]["reason"] == "check 2 of 2: bad"


def test_each_state_sets_the_weights_of_the_two_backends() -> None:
    upstream = load(
        None,
        {
            "upstream": [
                {"name": "old", "url": "http://127.0.0.1:1/mcp", "weight": 3},
                {"name": "new", "url": "http://127.0.0.1:2/mcp", "weight": 1},
                {"name": "other", "url": "http://127.0.0.1:3/mcp"},
            ]
        },
    ).upstream
    rollout = _rollout(then="drain")
    record = begin(rollout, 0, {})
    assert weights(record, rollout, upstream) == {"old": (3.2, False), "new": (0.8, False)}
    paused, done = acted(record, rollout, "pause", 1, {})
    assert (paused.state, done, weights(paused, rollout, upstream)) == (
        PAUSED,
        "paused",
        {"old": (3.2, False), "new": (0.8, False)},
    )
    promoted, _ = acted(paused, rollout, "promote", 2, {})
    assert (promoted.state, weights(promoted, rollout, upstream)) == (COMPLETED, {"old": (0.0, True), "new": (4.0, False)})
    aborted, _ = acted(record, rollout, "abort", 3, {})
    assert weights(aborted, rollout, upstream) == {"old": (3.0, False), "new": (0.0, False)}
    assert acted(promoted, rollout, "resume", 4, {}) == (promoted, "nothing to resume: the rollout is completed")


@pytest.mark.parametrize(
    ("keys", "error"),
    [
        ({"steps": [50, 20, 100]}, "rollout.steps: Value error, steps must increase"),
        ({"steps": [100]}, "rollout.steps: Value error, give a step below 100 first"),
        ({"steps": [True, 100]}, "rollout.steps.0: Input should be a valid number"),
        ({"step_ms": "1000"}, "rollout.step_ms: Input should be a valid integer"),
        ({"max_p95_ratio": float("inf")}, "rollout.max_p95_ratio: Input should be a finite number"),
        ({"steps": [20, 50]}, "rollout.steps: Value error, the last step must be 100"),
        ({"from": "new", "to": "new"}, "rollout: Value error, from and to name the same backend ('new')"),
        ({"from": "new", "to": "old"}, "rollout: Value error, from = 'new' must take new work"),
        ({"min_shadow_match": 0.9}, "rollout: Value error, min_shadow_match needs to = 'new' configured with shadow_of = 'old'"),
        ({"then": "stay"}, "rollout.then: Input should be 'drain' or 'keep'"),
    ],
)
def test_a_rollout_table_that_cannot_run_is_refused_naming_the_key(keys: dict[str, Any], error: str) -> None:
    upstream = [{"name": "old", "url": "http://127.0.0.1:1/mcp"}, {"name": "new", "url": "http://127.0.0.1:2/mcp", "weight": 0}]
    with pytest.raises(ConfigError) as caught:
        load(None, {"upstream": upstream, "rollout": {"from": "old", "to": "new", **keys}})
    assert str(caught.value).startswith(f"configuration: {error}"), str(caught.value)


def test_a_bad_backend_is_reported_alone_and_a_target_shadowing_a_third_backend_is_refused() -> None:
    with pytest.raises(ConfigError) as caught:
        load(None, {"upstream": [{"name": "old", "url": "ftp://x"}], "rollout": {"from": "old", "to": "new"}})
    assert "rollout" not in str(caught.value), str(caught.value)
    upstream = [
        {"name": "old", "url": "http://127.0.0.1:1/mcp"},
        {"name": "other", "url": "http://127.0.0.1:3/mcp"},
        {"name": "new", "url": "http://127.0.0.1:2/mcp", "shadow_of": "other"},
    ]
    with pytest.raises(ConfigError) as caught:
        load(None, {"upstream": upstream, "rollout": {"from": "old", "to": "new"}})
    assert "rollout: Value error, to = 'new' shadows 'other', not from = 'old'" in str(caught.value)


def test_counts_from_a_baseline_minute_the_figures_no_longer_keep_are_those_of_every_minute_kept() -> None:
    begun = {"minute": 50, "counts": [[[TOOLS, "new", "lookup", "v2-modern", "tool_error"], 20]]}
    counts = judge.since(
        [_minute({("new", "lookup", "ok"): 30}, 60), _minute({("new", "lookup", "tool_error"): 1}, 61)], begun, PAIR
    )
    assert counts.calls == {"new": {"lookup": {"ok": 30, "tool_error": 1}}}
