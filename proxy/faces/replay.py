"""The events a session's GET stream keeps for `Last-Event-ID` replay (docs/behaviour.md §2, §6 "Bounded state").

Bounded twice: at most `replay_events` events, and at most `REPLAY_BYTES` bytes of SSE frames
together; the oldest go first. An event larger than `REPLAY_BYTES` on its own is sent but never
kept (docs/decisions.md §65).
"""

from __future__ import annotations

import collections
from collections.abc import Iterator

REPLAY_BYTES = 1024 * 1024
"""Most bytes of SSE frames one session keeps for replay."""


class ReplayBuffer:
    """(event id, SSE frame) pairs, oldest first, within `max_events` and `max_bytes`."""

    def __init__(self, max_events: int, max_bytes: int | None = None):
        self.max_events = max_events
        self.max_bytes = REPLAY_BYTES if max_bytes is None else max_bytes
        self.size = 0
        """Bytes of the frames kept."""
        self._events: collections.deque[tuple[int, bytes]] = collections.deque()

    def append(self, event_id: int, frame: bytes) -> None:
        """Keep one event, dropping the oldest beyond the bounds (one too large alone: not kept)."""
        if self.max_events <= 0 or len(frame) > self.max_bytes:
            return
        self._events.append((event_id, frame))
        self.size += len(frame)
        while len(self._events) > self.max_events or self.size > self.max_bytes:
            self.size -= len(self._events.popleft()[1])

    def after(self, last_id: int) -> list[bytes]:
        """The frames of the events kept whose id is above `last_id`, oldest first."""
        return [frame for event_id, frame in self._events if event_id > last_id]

    def __iter__(self) -> Iterator[tuple[int, bytes]]:
        return iter(list(self._events))

    def __len__(self) -> int:
        return len(self._events)
