"""`proxy.upstream.stdio.tasks.TaskOwners`: a stdio process's tasks and the sessions that created
them, forgotten `GRACE_S` after their ttl and beyond `max_tasks` (docs/decisions.md §134)."""

from __future__ import annotations

from dataclasses import dataclass, field

from proxy.upstream.stdio.tasks import GRACE_S, TaskOwners


@dataclass(eq=False)
class Session:
    tasks: set[str] = field(default_factory=set)
    running_tasks: set[str] = field(default_factory=set)
    settled: set[str] = field(default_factory=set)


def test_a_task_is_kept_until_its_ttl_and_the_grace_have_passed_then_forgotten_by_its_session_too() -> None:
    owners: TaskOwners[Session] = TaskOwners()
    a, b = Session(), Session()
    owners.add("t1", a, 60_000, now=100.0)
    owners.add("t2", b, 120_000, now=100.0)
    a.settled.add("t1")
    assert (owners.get("t1"), owners.get("t2"), a.tasks, a.running_tasks) == (a, b, {"t1"}, {"t1"})
    assert owners.forget_due(100.0 + 60 + GRACE_S - 0.001) == 0
    assert owners.forget_due(100.0 + 60 + GRACE_S) == 1
    forgotten = ("t1" in owners, owners.get("t1"), a.tasks, a.running_tasks, a.settled, len(owners))
    assert forgotten == (False, None, set(), set(), set(), 1)
    assert owners.forget_due(100.0 + 120 + GRACE_S) == 1
    assert (bool(owners), b.tasks) == (False, set())


def test_a_task_without_a_ttl_is_kept_and_the_oldest_go_first_beyond_the_bound() -> None:
    owners: TaskOwners[Session] = TaskOwners(max_tasks=3)
    s = Session()
    for n in range(5):
        owners.add(f"t{n}", s, None, now=float(n))
    assert (sorted(s.tasks), [t for t in ("t0", "t1", "t2", "t3", "t4") if t in owners]) == (
        ["t2", "t3", "t4"],
        ["t2", "t3", "t4"],
    )
    assert owners.forget_due(1e12) == 0  # no ttl: never due


def test_a_task_forgotten_otherwise_or_created_again_is_not_forgotten_by_its_old_time() -> None:
    owners: TaskOwners[Session] = TaskOwners()
    a, b = Session(), Session()
    owners.add("gone", a, 1_000, now=0.0)
    assert owners.pop("gone") is a and owners.pop("gone") is None
    owners.add("again", a, 1_000, now=0.0)
    owners.add("again", b, 3_600_000, now=10.0)  # the newest creator, with its own time
    assert owners.forget_due(1.0 + GRACE_S) == 0  # both old entries are stale
    assert (owners.get("again"), list(owners.values()), a.tasks, b.tasks) == (b, [b], {"gone"}, {"again"})  # pop leaves a its own
    owners.clear()
    assert (len(owners), owners.forget_due(1e12)) == (0, 0)
