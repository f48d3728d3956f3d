"""Sealed, principal-bound tokens: task ids, cursors, request states and session ids.

Deterministic authenticated encryption (AES-SIV, RFC 5297, from `cryptography`) of a few string
fields, with the token's purpose and the caller's principal as associated data: the same task
always gets the same id, an id reveals nothing, cannot be forged, and does not open for another
principal or as another kind of token. Tokens are base64url without padding, so they are
header-safe (`Mcp-Name` needs no sentinel encoding). Source: docs/behaviour.md §6 "Task ids".

Keys are passed in; nothing here reads the environment, a clock or a random source.
"""

from __future__ import annotations

import base64
import binascii
import hmac
from dataclasses import dataclass
from typing import Any, Final

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESSIV
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from .errors import INVALID_PARAMS, NOT_ISSUED, McpError, unknown_task

KEY_BYTES: Final = 64
"""Master key length: 64 random bytes (docs/behaviour.md §6)."""
_FORMAT: Final = 1
ANONYMOUS: Final = "anonymous"
MAX_TOKEN_CHARS: Final = 16_384
"""Longest token accepted for unsealing (a sealed id of a backend id of about 12 KB)."""

RELAY_SESSION: Final = "relay-session"
"""Sealing purpose of a relayed session's id (fields: backend, the backend's own session id, and
`PLAIN_TASK_IDS` for a session whose task ids pass unchanged; principal "", or the caller's for a
backend that cannot check its sessions' callers)."""
PLAIN_TASK_IDS: Final = "plain-task-ids"
"""The third field of a relayed session's id: its task ids are the backend's own, both ways
(docs/decisions.md §190). A session id of two fields (sealed before) keeps sealed task ids."""
RELAY_STATE: Final = "relay-state"
"""Sealing purpose of a relayed backend's MRTR `requestState` when several backends sit behind the
proxy (fields: backend, the backend's own state)."""


@dataclass(frozen=True, slots=True)
class TaskRef:
    """Where a task lives: backend name, upstream session id ("" on a sessionless wire) and the
    backend's own task id."""

    backend: str
    session: str
    task: str


def _derive(master: bytes, purpose: bytes, length: int) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=length, salt=None, info=b"mcp-tasks-proxy/" + purpose).derive(master)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(token: str) -> bytes:
    data = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
    if _b64(data) != token:  # one token per value: no padding, no stray low bits
        raise ValueError("not canonical base64url")
    return data


def _pack(fields: tuple[str, ...]) -> bytes:
    out = bytearray([_FORMAT])
    for value in fields:
        raw = value.encode("utf-8", "surrogatepass")
        length = len(raw)
        while True:  # unsigned LEB128 length prefix
            byte = length & 0x7F
            length >>= 7
            out.append(byte | (0x80 if length else 0))
            if not length:
                break
        out += raw
    return bytes(out)


def _unpack(data: bytes) -> tuple[str, ...]:
    if not data or data[0] != _FORMAT:
        raise ValueError("unknown token format")
    fields: list[str] = []
    pos = 1
    while pos < len(data):
        length = shift = 0
        while True:
            byte = data[pos]
            pos += 1
            length |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                break
        fields.append(data[pos : pos + length].decode("utf-8", "surrogatepass"))
        pos += length
    if pos != len(data):
        raise ValueError("truncated token")
    return tuple(fields)


MEMO_ENTRIES = 4096
"""Sealed and opened tokens a `Keyring` remembers, each way (about 1 MiB at most), and refused
ones (`REFUSED_MAX_CHARS` long at most: about 2 MiB at most)."""
REFUSED_MAX_CHARS = 256
"""Longest refused token remembered as refused (a relayed task id is about 160 characters); a
longer one is worked out again each time, so that refusals cannot take much memory."""


class _Memo(dict[tuple[str, Any, str], Any]):
    """A dict of at most `MEMO_ENTRIES` entries, the oldest forgotten first. A hit is one C-level
    `dict.get`; order is by insertion (a token in use all the time is worked out again once every
    `MEMO_ENTRIES` new ones). Used on the event loop's thread only, as the `Keyring` is."""

    __slots__ = ()

    def keep(self, key: tuple[str, Any, str], value: Any) -> None:
        if len(self) >= MEMO_ENTRIES:
            del self[next(iter(self))]
        self[key] = value


class Keyring:
    """Sub-keys derived (HKDF-SHA256) from the 64-byte master key, and the sealing operations.

    Raises `ValueError` for a master key that is not 64 bytes.
    """

    def __init__(self, master: bytes):
        if len(master) != KEY_BYTES:
            raise ValueError(f"the sealing key must be {KEY_BYTES} bytes, got {len(master)}")
        self._siv = AESSIV(_derive(master, b"seal", 64))
        self._principal_key = _derive(master, b"principal", 32)
        # Sealing is deterministic, so both directions are remembered (bounded): a relay seals and
        # opens the same session and task ids at every request, and one AES-SIV operation costs
        # about as much as a tenth of a relayed call. What is sealed is remembered as opened too
        # (the client sends it back), and a short token that did not open is remembered as refused
        # in a memo of its own, so that a flood of them cannot push out what opened: a v1 session's
        # every task id is first tried as a held task's, which it is not (docs/decisions.md §136).
        self._sealed = _Memo()
        self._opened = _Memo()
        self._refused = _Memo()

    # -- principals --------------------------------------------------------------------------

    def principal(self, identity: str | None) -> str:
        """The principal of a caller: "anonymous" when `identity` (the `Authorization` header or the
        configured identity header) is absent or empty, else 32 hex of a keyed hash of it."""
        if not identity:
            return ANONYMOUS
        raw = identity.encode("utf-8", "surrogatepass")  # header bytes that were not UTF-8 included
        return hmac.digest(self._principal_key, raw, "sha256").hex()[:32]  # one-shot: no HMAC object per request

    # -- generic -----------------------------------------------------------------------------

    def seal(self, purpose: str, fields: tuple[str, ...], principal: str) -> str:
        """Seal `fields` for `purpose` and `principal`; deterministic. Inverse: `unseal`."""
        fields = tuple(fields)
        key = (purpose, fields, principal)
        token = self._sealed.get(key)
        if token is None:
            token = _b64(self._siv.encrypt(_pack(fields), [purpose.encode(), principal.encode()]))
            self._sealed.keep(key, token)
            self._opened.keep((purpose, token, principal), fields)
        return token

    def unseal(self, purpose: str, token: str, principal: str) -> tuple[str, ...]:
        """Open a token sealed by `seal` with the same purpose and principal.

        Raises `ValueError` for anything else: malformed base64, a flipped byte, another
        principal, another purpose, another key.
        """
        fields = self.opened(purpose, token, principal)
        if fields is None:
            raise ValueError("token does not unseal")
        return fields

    def opened(self, purpose: str, token: object, principal: str) -> tuple[str, ...] | None:
        """`unseal` without raising: the fields of `token`, or None when it does not open for this
        purpose and principal (for a caller that tries more than one principal, docs/decisions.md §138)."""
        if not isinstance(token, str):  # a client's JSON may put anything here; none of it is remembered
            return None
        key = (purpose, token, principal)
        fields: tuple[str, ...] | None = self._opened.get(key)
        if fields is not None:
            return fields
        if key in self._refused:
            return None
        try:
            fields = _unpack(self._siv.decrypt(_unb64(token), [purpose.encode(), principal.encode()]))
        except (InvalidTag, binascii.Error, ValueError, UnicodeError, IndexError):
            if len(token) <= REFUSED_MAX_CHARS:
                self._refused.keep(key, True)
            return None
        self._opened.keep(key, fields)
        return fields

    # -- task ids ----------------------------------------------------------------------------

    def seal_task_id(self, ref: TaskRef, principal: str) -> str:
        """The client-facing task id of `ref` for `principal` (docs/behaviour.md §6)."""
        return self.seal("task", (ref.backend, ref.session, ref.task), principal)

    def unseal_task_id(self, task_id: object, principal: str) -> TaskRef:
        """The `TaskRef` inside a client-facing task id.

        Raises `McpError(-32602)` "Unknown task" for a non-string, forged, tampered or
        other-principal id (indistinguishable on purpose).
        """
        if not isinstance(task_id, str) or not task_id or len(task_id) > MAX_TOKEN_CHARS:
            raise McpError(INVALID_PARAMS, "Unknown task: params.taskId must be a task id issued by this proxy")
        try:
            fields = self.unseal("task", task_id, principal)
        except ValueError:
            raise unknown_task(NOT_ISSUED) from None
        if len(fields) != 3:
            raise unknown_task(NOT_ISSUED)
        return TaskRef(*fields)

    def opened_task_id(self, task_id: object, principal: str) -> TaskRef | None:
        """`unseal_task_id` without raising: the `TaskRef` inside `task_id`, or None for anything
        it would refuse (for a caller that only asks whether an id is of one kind, such as a held
        task's, at every `tasks/*` request: docs/decisions.md §143)."""
        if not isinstance(task_id, str) or not task_id or len(task_id) > MAX_TOKEN_CHARS:
            return None
        fields = self.opened("task", task_id, principal)
        return TaskRef(*fields) if fields is not None and len(fields) == 3 else None

    # -- request states (MRTR) ---------------------------------------------------------------

    def seal_request_state(self, fields: tuple[str, ...], principal: str, expires_at_ms: int) -> str:
        """An MRTR `requestState` carrying `fields`, valid until `expires_at_ms` (Unix ms)."""
        return self.seal("request-state", (str(expires_at_ms), *fields), principal)

    def unseal_request_state(self, token: object, principal: str, now_ms: int) -> tuple[str, ...]:
        """The fields of a `requestState`. Raises `McpError(-32602)` when it was tampered with, is
        another principal's, or expired before `now_ms`."""
        if not isinstance(token, str):
            raise McpError(INVALID_PARAMS, "Invalid requestState")
        try:
            expires, *fields = self.unseal("request-state", token, principal)
            expired = int(expires) < now_ms
        except ValueError:
            raise McpError(INVALID_PARAMS, "Invalid requestState") from None
        if expired:
            raise McpError(INVALID_PARAMS, "Expired requestState: send the original request again")
        return tuple(fields)
