"""Sealed task ids and request states (docs/behaviour.md §6 "Task ids", "Principal").

Round trips, determinism, and the forgeries: another principal, another key, another purpose,
a flipped byte anywhere, truncation, garbage, non-canonical encodings, expiry.
"""

from __future__ import annotations

import base64
import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from translators.envelope import encode_header_value
from translators.errors import NOT_ISSUED, UNKNOWN_TASK, McpError
from translators.sealing import ANONYMOUS, KEY_BYTES, MAX_TOKEN_CHARS, MEMO_ENTRIES, REFUSED_MAX_CHARS, Keyring, TaskRef

DOES_NOT_UNSEAL = f"{UNKNOWN_TASK}: {NOT_ISSUED}"

KEY = bytes(range(64))
OTHER_KEY = bytes(range(1, 65))
KEYRING = Keyring(KEY)
ALICE = KEYRING.principal("Bearer alice-token")
BOB = KEYRING.principal("Bearer bob-token")
# mcp 1.30 upstream: 32-hex session id, `<32 hex>:<uuid4>` task id
REF = TaskRef(
    backend="fixture-v1",
    session="3c1f5e0a9b7d4e2f8a6c0b1d2e3f4a5b",
    task="8d6f1c0b2e6a4f8d9b3c1a2e5f7d9c0b:0b8e6a52-3f7c-4d2a-9a8e-1c2d3e4f5a6b",
)
BASE64URL = re.compile(r"[A-Za-z0-9_-]+")
ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"

refs = st.builds(TaskRef, backend=st.text(max_size=40), session=st.text(max_size=60), task=st.text(max_size=120))
principals = st.one_of(st.just(ANONYMOUS), st.text(alphabet="0123456789abcdef", min_size=32, max_size=32))


def _unknown_task(token: object, principal: str = ALICE, keyring: Keyring = KEYRING) -> McpError:
    with pytest.raises(McpError) as info:
        keyring.unseal_task_id(token, principal)
    assert info.value.code == -32602, info.value
    return info.value


def _raw(token: str) -> bytes:
    return base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))


def _token(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


# --- round trip and determinism -----------------------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(refs, principals)
def test_task_id_unseals_to_its_task_ref(ref, principal):
    assert KEYRING.unseal_task_id(KEYRING.seal_task_id(ref, principal), principal) == ref


def test_backend_task_id_with_lone_surrogate_escape_round_trips():
    # JSON allows "\udcff" escapes: json.loads gives a str that is not encodable as UTF-8.
    ref = TaskRef("fixture-v1", "sess", json.loads('"task-\\udcff"'))
    assert KEYRING.unseal_task_id(KEYRING.seal_task_id(ref, ALICE), ALICE) == ref


def test_same_task_and_principal_always_get_the_same_id():
    assert KEYRING.seal_task_id(REF, ALICE) == KEYRING.seal_task_id(REF, ALICE)
    assert Keyring(KEY).seal_task_id(REF, ALICE) == KEYRING.seal_task_id(REF, ALICE)


def test_different_tasks_principals_or_keys_get_different_ids():
    ids = {
        KEYRING.seal_task_id(REF, ALICE),
        KEYRING.seal_task_id(REF, BOB),
        KEYRING.seal_task_id(TaskRef(REF.backend, REF.session, REF.task + "x"), ALICE),
        KEYRING.seal_task_id(TaskRef(REF.backend, "", REF.task), ALICE),
        Keyring(OTHER_KEY).seal_task_id(REF, ALICE),
    }
    assert len(ids) == 5


def test_field_boundaries_are_authenticated():
    a = KEYRING.seal_task_id(TaskRef("ab", "c", "d"), ALICE)
    b = KEYRING.seal_task_id(TaskRef("a", "bc", "d"), ALICE)
    assert a != b
    assert KEYRING.unseal_task_id(b, ALICE) == TaskRef("a", "bc", "d")


def test_task_id_reveals_nothing_of_its_fields():
    token = KEYRING.seal_task_id(REF, ALICE)
    raw = _raw(token)
    for field in (REF.backend, REF.session, REF.task):
        assert field not in token
        assert field.encode() not in raw


@settings(max_examples=150, deadline=None)
@given(refs, principals)
def test_task_ids_are_header_safe_base64url(ref, principal):
    token = KEYRING.seal_task_id(ref, principal)
    assert BASE64URL.fullmatch(token)
    assert encode_header_value(token) == token  # Mcp-Name needs no sentinel


# --- forgeries ------------------------------------------------------------------------------------


def test_task_id_of_another_principal_is_unknown_task():
    token = KEYRING.seal_task_id(REF, ALICE)
    assert _unknown_task(token, BOB).message == DOES_NOT_UNSEAL
    _unknown_task(token, ANONYMOUS)
    _unknown_task(KEYRING.seal_task_id(REF, ANONYMOUS), ALICE)


def test_task_id_sealed_with_another_key_is_unknown_task():
    _unknown_task(Keyring(OTHER_KEY).seal_task_id(REF, ALICE))


def test_flipped_bit_in_any_byte_of_a_task_id_is_unknown_task():
    raw = _raw(KEYRING.seal_task_id(REF, ALICE))
    for position in range(len(raw)):
        for mask in (0x01, 0x80, 0xFF):
            forged = bytearray(raw)
            forged[position] ^= mask
            _unknown_task(_token(bytes(forged)))


def test_every_other_base64url_character_in_any_position_is_unknown_task():
    # Ids whose length % 4 is 0, 3 and 2 (the last two end in spare bits of the last character).
    for ref in (TaskRef("b", "s", "t1"), TaskRef("b", "s", "t123"), TaskRef("b", "s", "t12")):
        token = KEYRING.seal_task_id(ref, ALICE)
        accepted = []
        for position, original in enumerate(token):
            for replacement in ALPHABET:
                if replacement == original:
                    continue
                forged = token[:position] + replacement + token[position + 1 :]
                try:
                    KEYRING.unseal_task_id(forged, ALICE)
                except McpError as error:
                    assert error.code == -32602
                else:
                    accepted.append(forged)
        assert accepted == [], f"{len(accepted)} altered ids of {token!r} still unseal, e.g. {accepted[:3]}"


def test_only_the_canonical_encoding_of_a_task_id_unseals():
    # One task, one id: an alias of the id must not open the task (docs/behaviour.md §6).
    accepted = {}
    for ref in (REF, TaskRef("b", "s", "t1")):
        token = KEYRING.seal_task_id(ref, ALICE)
        aliases = {
            "inserted-bang": token[:5] + "!" + token[5:],
            "appended-dot": token + ".",
            "appended-padding": token + "=" * (4 - len(token) % 4),
            "inserted-newline": token[:10] + "\n" + token[10:],
            "standard-alphabet": token.replace("-", "+").replace("_", "/"),
        }
        for name, alias in aliases.items():
            if alias == token:
                continue
            try:
                KEYRING.unseal_task_id(alias, ALICE)
            except McpError as error:
                assert error.code == -32602
            else:
                accepted[f"{name} of {token}"] = alias
    assert accepted == {}, f"aliases that still unseal: {accepted}"


@pytest.mark.parametrize(
    "token",
    ["", "AAAA", "not-a-task-id", "!!!!", "a" * 5000, "8d6f1c0b2e6a4f8d9b3c1a2e5f7d9c0b:0b8e6a52-3f7c-4d2a-9a8e-1c2d3e4f5a6b"],
    ids=["empty", "short", "garbage", "symbols", "oversized", "raw-upstream-id"],
)
def test_garbage_task_id_is_unknown_task(token):
    _unknown_task(token)


@pytest.mark.parametrize(
    "token", [None, 42, True, ["x"], {"taskId": "x"}, b"bytes"], ids=["none", "int", "bool", "list", "dict", "bytes"]
)
def test_non_string_task_id_is_unknown_task(token):
    _unknown_task(token)


def test_truncated_task_id_is_unknown_task():
    token = KEYRING.seal_task_id(REF, ALICE)
    for length in range(len(token)):
        _unknown_task(token[:length])


def test_task_id_used_as_request_state_is_invalid():
    token = KEYRING.seal_task_id(REF, ALICE)
    with pytest.raises(McpError) as info:
        KEYRING.unseal_request_state(token, ALICE, now_ms=0)
    assert info.value.to_dict() == {"code": -32602, "message": "Invalid requestState"}


def test_request_state_used_as_task_id_is_unknown_task():
    state = KEYRING.seal_request_state((REF.backend, REF.session), ALICE, expires_at_ms=2_000_000_000_000)
    _unknown_task(state)


def test_token_of_another_purpose_does_not_unseal():
    cursor = KEYRING.seal("cursor", (REF.backend, REF.session, REF.task), ALICE)
    _unknown_task(cursor)
    with pytest.raises(ValueError):
        KEYRING.unseal("task", cursor, ALICE)
    assert KEYRING.unseal("cursor", cursor, ALICE) == (REF.backend, REF.session, REF.task)


def test_task_id_with_wrong_field_count_is_unknown_task():
    _unknown_task(KEYRING.seal("task", ("only", "two"), ALICE))
    _unknown_task(KEYRING.seal("task", ("a", "b", "c", "d"), ALICE))


# --- key ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("size", [0, 16, 32, 63, 65, 128])
def test_keyring_rejects_a_key_that_is_not_64_bytes(size):
    with pytest.raises(ValueError):
        Keyring(bytes(size))


def test_keyring_accepts_64_bytes():
    Keyring(b"\xff" * 64)


# --- principal --------------------------------------------------------------------------------


@pytest.mark.parametrize("identity", [None, ""])
def test_absent_identity_is_anonymous(identity):
    assert KEYRING.principal(identity) == "anonymous"


def test_same_identity_same_principal_different_identity_different_principal():
    assert KEYRING.principal("Bearer alice-token") == ALICE
    assert Keyring(KEY).principal("Bearer alice-token") == ALICE
    assert ALICE != BOB
    assert ALICE != ANONYMOUS
    assert re.fullmatch(r"[0-9a-f]{32}", ALICE)
    assert "alice" not in ALICE


def test_principal_of_a_non_utf8_authorization_header_is_a_stable_hash():
    # aiohttp decodes header bytes with surrogateescape: b"Bearer \xff" arrives as "Bearer \udcff".
    first = KEYRING.principal("Bearer \udcff")
    assert re.fullmatch(r"[0-9a-f]{32}", first)
    assert KEYRING.principal("Bearer \udcff") == first
    assert KEYRING.principal("Bearer \udcfe") != first


def test_refreshed_token_is_a_new_principal():
    assert KEYRING.principal("Bearer alice-token-2") != ALICE


# --- request states -----------------------------------------------------------------------------


def _invalid_state(token: object, principal: str = ALICE, now_ms: int = 1_000) -> McpError:
    with pytest.raises(McpError) as info:
        KEYRING.unseal_request_state(token, principal, now_ms)
    assert info.value.code == -32602, info.value
    return info.value


def test_request_state_round_trip_until_it_expires():
    state = KEYRING.seal_request_state(("fixture-v1", "sess", "42"), ALICE, expires_at_ms=10_000)
    assert BASE64URL.fullmatch(state)
    assert KEYRING.unseal_request_state(state, ALICE, now_ms=9_999) == ("fixture-v1", "sess", "42")
    assert KEYRING.unseal_request_state(state, ALICE, now_ms=10_000) == ("fixture-v1", "sess", "42")


def test_expired_request_state_is_32602():
    state = KEYRING.seal_request_state(("fixture-v1", "sess", "42"), ALICE, expires_at_ms=10_000)
    assert _invalid_state(state, now_ms=10_001).message == "Expired requestState: send the original request again"


def test_request_state_of_another_principal_is_32602():
    state = KEYRING.seal_request_state(("a",), ALICE, expires_at_ms=10_000)
    assert _invalid_state(state, BOB).message == "Invalid requestState"


def test_tampered_request_state_is_32602():
    raw = _raw(KEYRING.seal_request_state(("a", "b"), ALICE, expires_at_ms=10_000))
    for position in range(len(raw)):
        forged = bytearray(raw)
        forged[position] ^= 0x01
        _invalid_state(_token(bytes(forged)))


@pytest.mark.parametrize("token", [None, 7, "", "opaque-blob", ["x"]])
def test_garbage_request_state_is_32602(token):
    _invalid_state(token)


def test_request_state_without_expiry_field_is_32602():
    _invalid_state(KEYRING.seal("request-state", (), ALICE))
    _invalid_state(KEYRING.seal("request-state", ("soon", "a"), ALICE))


def test_remembered_seals_and_openings_answer_as_the_first_did():
    """Both directions are remembered (`MEMO_ENTRIES`): the same token for the same fields, the same
    fields for the same token, and what did not open still does not, for another principal or
    purpose too; a token that is no string is refused, never remembered."""
    keyring = Keyring(b"\x07" * 64)
    first = keyring.seal("relay-session", ("main", "s-1"), "")
    assert [keyring.seal("relay-session", ("main", "s-1"), "") for _ in range(3)] == [first] * 3
    assert [keyring.unseal("relay-session", first, "") for _ in range(3)] == [("main", "s-1")] * 3
    for purpose, principal in (("relay-session", ALICE), ("task", "")):
        with pytest.raises(ValueError, match="token does not unseal"):
            keyring.unseal(purpose, first, principal)
    for token in (None, 7, ["x"], {"taskId": first}):
        with pytest.raises(ValueError, match="token does not unseal"):
            keyring.unseal("relay-session", token, "")  # type: ignore[arg-type]
    assert Keyring(b"\x07" * 64).unseal("relay-session", first, "") == ("main", "s-1")  # a new keyring, nothing remembered


class _NoCipher:
    """Stands in for the keyring's AES-SIV to show an answer came from the memo: any use fails."""

    def encrypt(self, *_args: object) -> bytes:
        raise AssertionError("sealed again")

    def decrypt(self, *_args: object) -> bytes:
        raise AssertionError("opened again")


def test_what_was_sealed_opens_from_the_memo_and_a_refusal_is_remembered_for_its_purpose_and_principal_only():
    """A sealed token is remembered as opened (the client sends it back); a short token that did
    not open is remembered as refused, keyed by purpose and principal, so the same token still
    opens for the principal it was sealed for (decision 136)."""
    keyring = Keyring(b"\x09" * 64)
    token = keyring.seal_task_id(TaskRef("main", "s-1", "t-1"), "")
    with pytest.raises(McpError, match="Unknown task"):
        keyring.unseal_task_id(token, "session:s-1")  # a held task's principal: refused, remembered
    cipher, keyring._siv = keyring._siv, _NoCipher()  # type: ignore[assignment]
    assert keyring.unseal_task_id(token, "") == TaskRef("main", "s-1", "t-1")
    with pytest.raises(McpError, match="Unknown task"):
        keyring.unseal_task_id(token, "session:s-1")
    assert keyring.seal_task_id(TaskRef("main", "s-1", "t-1"), "") == token
    with pytest.raises(AssertionError, match="opened again"):
        keyring.unseal("relay-session", token, "")  # another purpose: not remembered either way
    keyring._siv = cipher
    with pytest.raises(ValueError, match="token does not unseal"):
        keyring.unseal("relay-session", token, "")


def test_the_memos_keep_at_most_memo_entries_and_no_long_refused_token():
    keyring = Keyring(b"\x0a" * 64)
    tokens = [keyring.seal("task", ("main", "s", str(n)), "") for n in range(MEMO_ENTRIES + 10)]
    assert (len(keyring._sealed), len(keyring._opened)) == (MEMO_ENTRIES, MEMO_ENTRIES)
    assert keyring.unseal("task", tokens[0], "") == ("main", "s", "0")  # forgotten, worked out again
    for token in tokens:
        with pytest.raises(ValueError, match="token does not unseal"):
            keyring.unseal("task", token, ALICE)
    assert len(keyring._refused) == MEMO_ENTRIES
    long_token = keyring.seal("task", ("main", "s", "x" * REFUSED_MAX_CHARS), "")
    keyring._refused.clear()
    with pytest.raises(ValueError, match="token does not unseal"):
        keyring.unseal("task", long_token, ALICE)
    assert (len(long_token) > REFUSED_MAX_CHARS, len(keyring._refused)) == (True, 0)


def test_opened_is_unseal_without_raising():
    keyring = Keyring(bytes(range(KEY_BYTES)))
    token = keyring.seal("relay-session", ("main", "s-1"), "alice")
    fresh = Keyring(bytes(range(KEY_BYTES)))  # nothing remembered: each answer is worked out
    assert [fresh.opened("relay-session", token, "alice"), fresh.unseal("relay-session", token, "alice")] == [("main", "s-1")] * 2
    for purpose, what, principal in [
        ("relay-session", token, "bob"),
        ("relay-session", token, ""),
        ("relay-state", token, "alice"),
        ("relay-session", token[:-2] + "AA", "alice"),
        ("relay-session", "not base64 !", "alice"),
        ("relay-session", 7, "alice"),
    ]:
        assert (fresh.opened(purpose, what, principal), keyring.opened(purpose, what, principal)) == (None, None)
        with pytest.raises(ValueError):
            fresh.unseal(purpose, what, principal)  # type: ignore[arg-type]


# --- opened_task_id: unseal_task_id without raising (docs/decisions.md §143) ------------------


@settings(max_examples=150, deadline=None)
@given(refs, principals)
def test_opened_task_id_gives_the_ref_of_a_task_id_sealed_for_the_same_principal(ref, principal):
    assert KEYRING.opened_task_id(KEYRING.seal_task_id(ref, principal), principal) == ref


def test_opened_task_id_is_none_for_every_id_unseal_task_id_refuses():
    sealed = KEYRING.seal_task_id(REF, ALICE)
    refused = [
        (sealed, BOB),  # another principal
        (Keyring(OTHER_KEY).seal_task_id(REF, ALICE), ALICE),  # another key
        (KEYRING.seal_request_state(("a", "b"), ALICE, 10**13), ALICE),  # another purpose
        (KEYRING.seal("task", ("two", "fields"), ALICE), ALICE),  # not three fields
        (sealed[:-1], ALICE),
        ("", ALICE),
        ("A" * (MAX_TOKEN_CHARS + 1), ALICE),
        (7, ALICE),
        (None, ALICE),
    ]
    assert [KEYRING.opened_task_id(token, principal) for token, principal in refused] == [None] * len(refused)
    assert [_unknown_task(token, principal).code for token, principal in refused] == [-32602] * len(refused)


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=ALPHABET, max_size=200))
def test_opened_task_id_and_unseal_task_id_agree_on_any_token(token):
    try:
        expected = KEYRING.unseal_task_id(token, ALICE)
    except McpError:
        expected = None
    assert KEYRING.opened_task_id(token, ALICE) == expected
