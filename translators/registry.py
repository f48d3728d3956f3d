"""The registry of v1↔v2 differences: each a named pair of converters, for docs and tests.

`translators.differences`, `translators.capabilities` register their units here;
`translators.table` renders them into `docs/translation.md`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Difference:
    """One v1↔v2 difference: what each side says, where the rule comes from, and its converters."""

    name: str
    v1: str
    v2: str
    source: str
    to_v2: Callable[..., Any]
    to_v1: Callable[..., Any]


DIFFERENCES: list[Difference] = []


def _difference(name: str, *, v1: str, v2: str, source: str, to_v2: Callable[..., Any], to_v1: Callable[..., Any]) -> None:
    """Register one difference (called at import time by the modules that implement it)."""
    DIFFERENCES.append(Difference(name, v1, v2, source, to_v2, to_v1))
