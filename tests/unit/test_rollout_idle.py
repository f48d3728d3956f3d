"""A process without a `[rollout]` table neither takes the rollout's lease nor reads its record
more than every `IDLE_TICK_S` (docs/decisions.md §189), and still ends a record a removed table left."""

from __future__ import annotations

from typing import Any

from proxy.config import load
from proxy.rollout.driver import IDLE_TICK_S, TICK_S, RolloutDriver
from proxy.state.rollouts import MemoryRollouts


class CountedRollouts(MemoryRollouts):
    """The memory record, with each call the driver makes named in `calls`."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    async def read(self) -> dict[str, Any] | None:
        self.calls.append("read")
        return await super().read()

    async def write(self, record: dict[str, Any], expected: int) -> bool:
        self.calls.append("write")
        return await super().write(record, expected)

    async def lead(self, process: str, lease_ms: int) -> bool:
        self.calls.append("lead")
        return await super().lead(process, lease_ms)

    async def leader(self) -> str | None:
        self.calls.append("leader")
        return await super().leader()

    async def release(self, process: str) -> None:
        self.calls.append("release")
        await super().release(process)


def _driver(tmp_path: Any, store: CountedRollouts) -> RolloutDriver:
    settings = load(
        None,
        {"listen": "127.0.0.1:0", "upstream": [{"name": "main", "url": "http://127.0.0.1:9/mcp"}], "state_dir": str(tmp_path)},
    )

    async def figures() -> Any:
        raise AssertionError("no figures are read without a rollout")

    driver = RolloutDriver(settings, fleet=None, store=store, figures=figures, shadow=lambda name, figures: None)  # type: ignore[arg-type]
    driver.process = "p1"
    return driver


async def test_without_a_table_the_driver_reads_the_record_and_nothing_else(tmp_path):
    store = CountedRollouts()
    driver = _driver(tmp_path, store)
    for _ in range(3):
        await driver.tick()
    assert (store.calls, driver.leading, driver.leader, driver.snapshot()) == (["read"] * 3, False, None, None)
    assert (TICK_S, IDLE_TICK_S) == (0.5, 5.0)


async def test_without_a_table_a_lease_held_is_handed_on_and_a_record_left_is_ended(tmp_path):
    store = CountedRollouts()
    await store.write({"fingerprint": "f1", "version": 3, "state": "running"}, 0)
    driver = _driver(tmp_path, store)
    store.calls.clear()
    await driver.tick()  # a record to end: the lease is taken, the record ended
    ended = await store.read()
    await driver.tick()  # nothing left to end: the lease is handed on
    assert store.calls == ["read", "lead", "write", "read", "read", "release"]
    assert (ended["fingerprint"], ended["version"], ended["was"], driver.leading, await store.leader()) == (
        "",
        4,
        "running",
        False,
        None,
    )
