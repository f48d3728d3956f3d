"""translators.streaming: which notifications about a request reach its client (docs/behaviour.md §4.10)."""

from translators.streaming import LOG_LEVELS, log_level_passes, request_notification

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
