"""The `[rollout]` table (docs/configuration.md "Rollout"): a canary the proxy runs from one backend
to another, step by step, judged on what clients saw (`proxy/rollout/judge.py`).

Checked like every key: the table alone here (`Rollout`), and against the backends it names by
`check_rollout` (called by `proxy.config.Settings`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, field_validator


class Named(Protocol):
    """What `check_rollout` reads of a backend (`proxy.config.Upstream`)."""

    name: str
    weight: int
    drain: bool
    shadow_of: str | None


class Rollout(BaseModel):
    """A rollout from the backend `from` to the backend `to` (docs/configuration.md "Rollout")."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, strict=True)

    from_: str = Field(alias="from")
    """The backend serving now; its configured weight is the traffic the rollout moves, and what a rollback returns to."""
    to: str
    """The backend taking over."""
    steps: list[float] = Field(default_factory=lambda: [10.0, 25.0, 50.0, 100.0])
    """Percent of `from`'s and `to`'s new work on `to`, step by step; increasing, the last 100."""
    step_ms: int = Field(default=60_000, ge=100, le=86_400_000)
    """A step lasts at least this long ..."""
    min_calls: int = Field(default=20, ge=1, le=1_000_000)
    """... and until `to` (and `from`, the baseline) answered this many tool calls in it."""
    max_tool_error_increase: float = Field(default=0.05, ge=0, le=1)
    """The most `to`'s tool-error rate may be above `from`'s (absolute, on the tools both answered)."""
    max_error_increase: float = Field(default=0.05, ge=0, le=1)
    """The same for errors (protocol errors, timeouts, refusals)."""
    max_p95_ratio: float | None = Field(default=None, ge=1, allow_inf_nan=False)
    """The most `to`'s p95 may be over `from`'s, as a ratio; no latency gate when not set."""
    min_shadow_match: float | None = Field(default=None, ge=0, le=1)
    """The least share of `to`'s shadow comparisons with `from` that must match (`to` shadows `from`)."""
    failures_before_rollback: int = Field(default=2, ge=1, le=100)
    """Failed checks in a row that roll back; a failed check short of it runs the step again."""
    then: Literal["drain", "keep"] = "keep"
    """At 100 %: drain `from` (no new work; what is bound to it ends) or keep it at weight 0."""

    @field_validator("steps")
    @classmethod
    def _steps(cls, value: list[float]) -> list[float]:
        if not value:
            raise ValueError("give at least one step (percent of new work on `to`), the last 100")
        if any(not 0 < step <= 100 for step in value):
            raise ValueError("each step is a percent above 0 and at most 100")
        if any(b <= a for a, b in zip(value, value[1:], strict=False)):
            raise ValueError("steps must increase")
        if value[-1] != 100:
            raise ValueError("the last step must be 100 (the rollout ends with all of the new work on `to`)")
        if len(value) == 1:
            raise ValueError("give a step below 100 first: a step is judged against `from` answering beside `to`")
        return value

    def fingerprint(self) -> str:
        """What tells this rollout from another: a digest of the table (a changed table is a new rollout)."""
        text = json.dumps(self.model_dump(by_alias=True), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def check_rollout(rollout: Rollout, upstream: Sequence[Named]) -> None:
    """Raise `ValueError` naming the key when `rollout` cannot run on the backends `upstream`."""
    by_name = {u.name: u for u in upstream}
    names = ", ".join(by_name) or "none"
    for key, name in (("from", rollout.from_), ("to", rollout.to)):
        if name not in by_name:
            raise ValueError(f"{key} = {name!r} names no configured backend (backends: {names})")
    if rollout.from_ == rollout.to:
        raise ValueError(f"from and to name the same backend ({rollout.to!r})")
    source, target = by_name[rollout.from_], by_name[rollout.to]
    if source.weight == 0 or source.drain or source.shadow_of is not None:
        raise ValueError(f"from = {rollout.from_!r} must take new work (weight above 0, drain = false, not a shadow): "
                         "its weight is the traffic the rollout moves")
    if target.drain:
        raise ValueError(f"to = {rollout.to!r} is draining: a rollout moves new work onto it")
    if target.shadow_of not in (None, rollout.from_):
        raise ValueError(f"to = {rollout.to!r} shadows {target.shadow_of!r}, not from = {rollout.from_!r}")
    if rollout.min_shadow_match is not None and target.shadow_of != rollout.from_:
        raise ValueError(f"min_shadow_match needs to = {rollout.to!r} configured with shadow_of = {rollout.from_!r}")


def unknown_key_model(loc: tuple[int | str, ...]) -> type[BaseModel] | None:
    """`Rollout` for an error inside the `[rollout]` table (its keys are suggested), else None."""
    return Rollout if loc and loc[0] == "rollout" else None


def as_toml_keys(rollout: Rollout) -> dict[str, Any]:
    """The table as the file gives it (`from`, not `from_`): the status page and the log show it so."""
    return rollout.model_dump(by_alias=True)
