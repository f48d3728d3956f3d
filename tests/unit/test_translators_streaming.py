"""translators.streaming: which notifications about a request reach its client (docs/behaviour.md §4.10),
and the level of a v1 client's `logging/setLevel` (§5.1)."""

import pytest

from translators.errors import McpError
from translators.streaming import LOG_LEVELS, log_level_passes, request_notification, requested_log_level, set_level_params

PROGRESS = {"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": "p", "progress": 3, "total": 10}}


def _log(level: str) -> dict:
    return {
        "jsonrpc": "2.0",
        "method": "notifications/message",
        "params": {"level": level, "logger": "demo", "data": f"at {level}"},
    }


def test_progress_passes_unchanged_with_or_without_a_log_level():
    assert request_notification(PROGRESS, None) == PROGRESS
    assert request_notification(PROGRESS, "error") == PROGRESS


def test_no_log_level_means_no_log_messages():
    assert [request_notification(_log(level), None) for level in LOG_LEVELS] == [None] * 8


def test_log_messages_at_or_above_the_level_only():
    passed = [level for level in LOG_LEVELS if request_notification(_log(level), "warning") is not None]
    assert passed == ["warning", "error", "critical", "alert", "emergency"]
    assert request_notification(_log("warning"), "warning") == _log("warning")


def test_unknown_levels():
    assert log_level_passes("shouting", "emergency") is True  # an unknown message level is never hidden
    assert log_level_passes(None, "emergency") is True
    assert log_level_passes("debug", "verbose") is True  # an unknown threshold is debug


def test_other_notifications_do_not_belong_to_a_request():
    for method in ("notifications/tools/list_changed", "notifications/tasks/status", "notifications/resources/updated"):
        assert request_notification({"jsonrpc": "2.0", "method": method, "params": {}}, "debug") is None


def test_requested_log_level_reads_back_what_set_level_params_writes():
    for level in LOG_LEVELS:
        assert set_level_params(level) == {"level": level}
        assert requested_log_level(set_level_params(level)) == level


@pytest.mark.parametrize("params", [{}, {"level": "verbose"}, {"level": 3}, {"level": "WARNING"}, {"level": None}])
def test_requested_log_level_refuses_what_is_not_a_level(params):
    with pytest.raises(McpError) as raised:
        requested_log_level(params)
    assert raised.value.code == -32602
    assert raised.value.message == "Invalid log level: expected one of " + ", ".join(LOG_LEVELS)
