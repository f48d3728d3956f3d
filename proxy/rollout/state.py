"""A rollout's record and what moves it (docs/configuration.md "Rollout"; docs/decisions.md §174):
pure functions of the record, the `[rollout]` table and the time given, no I/O.

The record is what the store keeps (`proxy/rollout/store.py`) and every process applies: its
`state` ("running", "paused", "completed", "rolled_back"), the step reached and when it began, the
figures each step is judged against (`baseline`: the counts already there when it began), the
failed checks in a row, the last check's figures and the history of every decision. `version`
grows by one with every change: a write names the version it read (compare and set), so a decision
and an operator's command never overwrite each other.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from .settings import Named, Rollout

RUNNING, PAUSED, COMPLETED, ROLLED_BACK = "running", "paused", "completed", "rolled_back"
STATES = (RUNNING, PAUSED, COMPLETED, ROLLED_BACK)
ACTIONS = ("pause", "resume", "promote", "abort")
MAX_HISTORY = 50
"""Decisions kept in the record (the oldest go first; the log has them all)."""


@dataclass(frozen=True)
class Record:
    """One rollout as the store keeps it (module docstring). Times are Unix ms."""

    fingerprint: str
    """`Rollout.fingerprint` of the table it runs: another table is another rollout."""
    state: str
    step: int
    """The index in `steps` of the step reached."""
    step_started_ms: int
    baseline: dict[str, Any]
    """The counts when the step began (`proxy/rollout/judge.py` `Baseline`)."""
    started_ms: int
    start_baseline: dict[str, Any]
    """The counts when the rollout began: `from`'s calls since then are the baseline of a step where it answers too few."""
    failures: int = 0
    last_check: dict[str, Any] | None = None
    history: list[dict[str, Any]] = field(default_factory=list)
    version: int = 1

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Record:
        return cls(**{key: data[key] for key in cls.__dataclass_fields__ if key in data})


def _event(record: Record, rollout: Rollout, now_ms: int, event: str, reason: str, figures: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"at_ms": now_ms, "event": event, "step": record.step, "percent": rollout.steps[record.step], "reason": reason,
            **({"figures": figures} if figures is not None else {})}


def _moved(record: Record, rollout: Rollout, now_ms: int, event: dict[str, Any], **changes: Any) -> Record:
    """`record` with `changes`, `event` appended to its history, and its version one higher."""
    moved = replace(record, version=record.version + 1, **changes)
    history = [*record.history, {**event, "state": moved.state, "step_after": moved.step, "percent_after": rollout.steps[moved.step]}]
    return replace(moved, history=history[-MAX_HISTORY:])


def begin(rollout: Rollout, now_ms: int, baseline: dict[str, Any], version: int = 1) -> Record:
    """A rollout that begins now at its first step."""
    record = Record(rollout.fingerprint(), RUNNING, 0, now_ms, baseline, now_ms, baseline, version=version - 1)
    reason = f"{rollout.from_} → {rollout.to}, steps {', '.join(f'{s:g} %' for s in rollout.steps)}"
    return _moved(record, rollout, now_ms, _event(record, rollout, now_ms, "started", reason))


def judged(record: Record, rollout: Rollout, verdict: dict[str, Any], now_ms: int, baseline: dict[str, Any]) -> Record:
    """`record` after a check of its step (`proxy/rollout/judge.py`: `outcome` "pass", "hold" or
    "fail", `reason`, `figures`): the next step, or completed after the last; held (nothing
    moves); a failed check short of `failures_before_rollback` runs the step again from now, the
    last one rolls back."""
    outcome, reason, figures = verdict["outcome"], verdict["reason"], verdict["figures"]
    if outcome == "hold":
        return replace(record, last_check=verdict, version=record.version + 1)
    if outcome == "pass":
        event = _event(record, rollout, now_ms, "passed", reason, figures)
        if record.step + 1 == len(rollout.steps):
            return _moved(record, rollout, now_ms, event, state=COMPLETED, last_check=verdict, failures=0)
        return _moved(record, rollout, now_ms, event, step=record.step + 1, step_started_ms=now_ms, baseline=baseline,
                      failures=0, last_check=verdict)
    failures = record.failures + 1
    event = _event(record, rollout, now_ms, "failed", f"check {failures} of {rollout.failures_before_rollback}: {reason}", figures)
    if failures >= rollout.failures_before_rollback:
        return _moved(record, rollout, now_ms, event, state=ROLLED_BACK, failures=failures, last_check=verdict)
    return _moved(record, rollout, now_ms, event, step_started_ms=now_ms, baseline=baseline, failures=failures, last_check=verdict)


def acted(record: Record, rollout: Rollout, action: str, now_ms: int, baseline: dict[str, Any]) -> tuple[Record, str]:
    """An operator's `action` (`ACTIONS`) on `record`: (the record it leaves, what was done). Pause
    holds the weights where they are; resume runs the step again from now; promote completes (all
    new work on `to`, `from` drained with `then = "drain"`); abort rolls back. An action that does
    not apply to the state leaves the record as it is and says why."""
    state = record.state
    if action == "pause" and state == RUNNING:
        return _moved(record, rollout, now_ms, _event(record, rollout, now_ms, "paused", "by the operator"), state=PAUSED), "paused"
    if action == "resume" and state == PAUSED:
        event = _event(record, rollout, now_ms, "resumed", "by the operator: the step runs again from now")
        return _moved(record, rollout, now_ms, event, state=RUNNING, step_started_ms=now_ms, baseline=baseline, failures=0), "resumed"
    if action == "promote" and state in (RUNNING, PAUSED):
        event = _event(record, rollout, now_ms, "promoted", "by the operator: all new work on the new backend")
        return _moved(record, rollout, now_ms, event, state=COMPLETED, step=len(rollout.steps) - 1), "promoted"
    if action == "abort" and state in (RUNNING, PAUSED):
        event = _event(record, rollout, now_ms, "aborted", "by the operator: all new work back on the old backend")
        return _moved(record, rollout, now_ms, event, state=ROLLED_BACK), "aborted"
    if action not in ACTIONS:
        raise ValueError(f"unknown action {action!r} (one of {', '.join(ACTIONS)})")
    return record, f"nothing to {action}: the rollout is {state.replace('_', ' ')}"


def weights(record: Record, rollout: Rollout, upstream: Sequence[Named]) -> dict[str, tuple[float, bool]]:
    """The (weight, draining) of `from` and `to` under `record`. Running or paused at p %: `to`
    takes p % of the two backends' configured weight together, `from` the rest (others keep
    theirs); completed: all of it on `to`, `from` drained with `then = "drain"`; rolled back: the
    configured weight of `from`, 0 on `to`."""
    by_name = {u.name: u for u in upstream}
    source, target = by_name[rollout.from_], by_name[rollout.to]
    pair = source.weight + target.weight
    if record.state == ROLLED_BACK:
        return {source.name: (float(source.weight), source.drain), target.name: (0.0, target.drain)}
    if record.state == COMPLETED:
        return {source.name: (0.0, rollout.then == "drain"), target.name: (float(pair), target.drain)}
    share = rollout.steps[record.step] / 100
    return {source.name: (round(pair * (1 - share), 6), source.drain), target.name: (round(pair * share, 6), target.drain)}


def shown(record: Record | None, rollout: Rollout | None, leader: str | None) -> dict[str, Any] | None:
    """The rollout as `status.json` shows it (docs/configuration.md "Rollout"), None without one."""
    if record is None or rollout is None:
        return None
    percent = {COMPLETED: 100.0, ROLLED_BACK: 0.0}.get(record.state, rollout.steps[record.step])  # the share on `to` now
    return {"state": record.state, "from": rollout.from_, "to": rollout.to, "step": record.step, "percent": percent,
            "steps": rollout.steps, "step_ms": rollout.step_ms, "step_started_ms": record.step_started_ms, "started_ms": record.started_ms,
            "failures": record.failures, "failures_before_rollback": rollout.failures_before_rollback, "then": rollout.then,
            "gates": record.last_check, "history": record.history, "version": record.version, "decider": leader}
