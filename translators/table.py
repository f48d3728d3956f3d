"""The translation table of `docs/translation.md`, generated from `FIELDS` and `DIFFERENCES`.

`python -m translators.table` prints it; a test keeps the document in step with the code.
"""

from __future__ import annotations

from . import capabilities, differences  # noqa: F401 - importing registers their differences
from .fields import FIELDS, KNOWN_LOSSES
from .registry import DIFFERENCES


def render() -> str:
    """Markdown: the field table, then one row per named difference with its converters."""
    lines = [
        "| hub field | v1 (2025-11-25) | v2 (SEP-2663) | absent |",
        "|---|---|---|---|",
    ]
    for field in FIELDS:
        absent = "`null`" if field.null_when_absent else "omitted"
        lines.append(f"| `{field.hub}` | `{field.v1}` | `{field.v2}` | {absent} |")
    losses = ", ".join(f"`{name}` ({dialect})" for dialect, names in KNOWN_LOSSES.items() for name in names)
    lines += ["", f"Dropped and counted (known losses): {losses}.", ""]
    lines += [
        "| difference | v1 | v2 | to v2 | to v1 | source |",
        "|---|---|---|---|---|---|",
    ]
    for d in sorted(DIFFERENCES, key=lambda d: d.name):  # import order must not matter
        lines.append(f"| `{d.name}` | {d.v1} | {d.v2} | `{_name(d.to_v2)}` | `{_name(d.to_v1)}` | {d.source} |")
    return "\n".join(lines) + "\n"


def _name(fn: object) -> str:
    return getattr(fn, "__name__", repr(fn))


if __name__ == "__main__":
    print(render(), end="")
