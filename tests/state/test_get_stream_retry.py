"""How long a session's GET stream listener waits before asking again (`proxy/state/capture.py`,
decision 69): quickly after a stream the backend accepted, doubling while it refuses."""

from __future__ import annotations

from proxy.state.capture import GET_STREAM_MAX_RETRY_S, GET_STREAM_RETRY_S, next_get_retry_s


def test_refusals_double_the_wait_up_to_the_most():
    waits = []
    wait = 0.0
    for _ in range(10):
        wait = next_get_retry_s(wait, opened=False)
        waits.append(wait)
    assert (GET_STREAM_RETRY_S, GET_STREAM_MAX_RETRY_S) == (0.5, 30.0)
    assert waits == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0, 30.0]


def test_a_stream_that_was_open_is_asked_for_again_quickly():
    assert next_get_retry_s(0.0, opened=True) == 0.5
    assert next_get_retry_s(16.0, opened=True) == 0.5
    assert next_get_retry_s(next_get_retry_s(16.0, opened=True), opened=False) == 1.0
