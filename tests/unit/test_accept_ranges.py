"""`accepts_json` and `takes_sse` (`proxy/faces/checks.py`): what each says of an `Accept` value is
the rule spelled out below, the first time and every time after (each value's answer is
remembered), and what is remembered stays bounded."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.faces import checks
from proxy.faces.checks import ACCEPT_MEMO_ENTRIES, ACCEPT_MEMO_MAX_CHARS, accepts_json, takes_sse

_PARTS = st.sampled_from(
    [
        "application/json",
        "APPLICATION/JSON",
        "text/event-stream",
        "Text/Event-Stream",
        "application/*",
        "text/*",
        "*/*",
        "text/html",
        "application/xml",
        "application/jsonx",
        "",
        " ",
        "application/json;q=0.9",
        " text/event-stream ; q=1",
        "text/event-stream\t",
        "\tapplication/json",
    ]
)
_ACCEPTS = st.lists(_PARTS, max_size=5).map(",".join) | st.text(max_size=40)


def _allows(accept: str | None, ranges: set[str]) -> bool:
    if not accept:
        return True
    return any(part.split(";")[0].strip().lower() in ranges for part in accept.split(","))


@settings(max_examples=500, deadline=None)
@given(accept=_ACCEPTS | st.none())
def test_each_answer_is_the_rule_first_and_every_time_after(accept: str | None) -> None:
    json_rule = _allows(accept, {"application/json", "application/*", "*/*"})
    sse_rule = _allows(accept, {"text/event-stream", "text/*", "*/*"})
    for _ in range(2):
        assert accepts_json(accept) is json_rule
        assert takes_sse(accept) is sse_rule


def test_what_is_remembered_stays_bounded() -> None:
    for n in range(3 * ACCEPT_MEMO_ENTRIES):
        assert takes_sse(f"text/event-stream, application/x-{n}") is True
        assert len(checks._accept_memo) <= ACCEPT_MEMO_ENTRIES
    long = "application/json, " + "x" * ACCEPT_MEMO_MAX_CHARS
    assert accepts_json(long) is True and takes_sse(long) is False
    assert long not in checks._accept_memo
