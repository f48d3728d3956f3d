"""Which upstream session ids a relay-session token may carry (`proxy.printable.visible_ascii`, which `proxy.routing` asks):
the visible ASCII the session wire allows (core 2025-11-25, Session Management), 0x21–0x7E."""

from __future__ import annotations

import pytest

from proxy.printable import visible_ascii

pytestmark = pytest.mark.fast


def test_exactly_the_visible_ascii_characters_pass_one_by_one() -> None:
    passing = [code for code in range(0x110000) if not 0xD800 <= code <= 0xDFFF and visible_ascii(chr(code))]
    assert passing == list(range(0x21, 0x7F))


@pytest.mark.parametrize(
    ("session_id", "allowed"),
    [
        ("", False),
        ("0b6f1e2a-4c1d-4f0e-9a55-0f3c2b1d7e88", True),
        ("!~", True),
        ("sid\r\nX-Injected: 1", False),
        ("a b", False),
        ("tab\there", False),
        ("del\x7f", False),
        ("café", False),
    ],
)
def test_a_whole_id_passes_only_when_every_character_does(session_id: str, allowed: bool) -> None:
    assert visible_ascii(session_id) is allowed
