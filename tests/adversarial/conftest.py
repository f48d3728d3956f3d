"""Fixtures of the adversarial suite: a recording tap in front of the session-wide reference v1
server, a tap that can drop POSTs (a transient upstream failure), and a private reference server
that can be killed and restarted on the same port. Helpers are in `adv_support`."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from adv_support import FlakyTap, RestartableBackend  # noqa: E402


@pytest.fixture
async def flaky(reference_v1_server):
    tap = await FlakyTap.start(reference_v1_server.url)
    yield tap
    tap.down = False
    await tap.stop()


@pytest.fixture
def restartable():
    backend = RestartableBackend()
    try:
        yield backend
    finally:
        backend.stop()
