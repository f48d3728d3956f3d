"""Text that is safe on an operator's terminal (issue 37, docs/decisions.md §152).

Client names, tool names, backends' answers and messages, a stdio server's stderr: whatever a
caller or a backend controls may hold control characters, and a terminal obeys them (ESC sequences
clear the screen, set the window title, rewrite earlier lines; a bare CR overwrites the line). Every
terminal output of the CLI and the text log passes such strings through `escaped` first: each C0
control character, DEL and each C1 control character is shown as a visible escape (`\\x1b`, `\\x7f`,
`\\x9b`), everything else as it is.
"""

from __future__ import annotations

import re

_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")
_CONTROL_BUT_NEWLINE = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f]")
_C1_AND_DEL = re.compile("[\x7f-\x9f]")


def visible_ascii(text: str) -> bool:
    """Whether `text` is one or more visible ASCII characters (0x21-0x7E: no space, no control
    character), in C-level passes (ASCII `isprintable` is 0x20-0x7E): what an id may be that is
    echoed, logged or passed on as it is (a request id, a backend's session id)."""
    return bool(text) and text.isascii() and text.isprintable() and " " not in text


def _shown(match: re.Match[str]) -> str:
    return f"\\x{ord(match.group()):02x}"


def escaped(text: str, *, lines: bool = False) -> str:
    """`text` with every control character (C0, DEL, C1) shown as `\\xNN`; with `lines`, newlines
    are kept (text of several lines, each of whose fields was escaped or is the program's own)."""
    pattern = _CONTROL_BUT_NEWLINE if lines else _CONTROL
    return pattern.sub(_shown, text) if pattern.search(text) else text


def _json_escape(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def json_text(text: str) -> str:
    """JSON text (`json.dumps` output) with DEL and the C1 controls escaped as `\\u00NN` too (JSON
    escapes only C0 itself, and leaves C1 raw with `ensure_ascii=False`): the same JSON value, safe
    to print. Those characters occur only inside JSON strings, where `\\u00NN` means them exactly."""
    return _C1_AND_DEL.sub(_json_escape, text) if _C1_AND_DEL.search(text) else text
