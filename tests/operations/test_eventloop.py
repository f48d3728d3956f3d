"""`MCP_TASKS_PROXY_EVENT_LOOP`: uvloop when installed (auto), required, or asyncio's own loop."""

from __future__ import annotations

import importlib.util
import sys

import pytest

from proxy.eventloop import ENV_EVENT_LOOP, loop_factory, run

HAVE_UVLOOP = importlib.util.find_spec("uvloop") is not None


def test_asyncio_is_chosen_on_request():
    assert loop_factory({ENV_EVENT_LOOP: "asyncio"}) == ("asyncio", None)


def test_auto_takes_uvloop_when_it_is_installed():
    name, factory = loop_factory({})
    assert name == ("uvloop" if HAVE_UVLOOP else "asyncio")
    assert (factory is not None) == HAVE_UVLOOP


def test_a_missing_uvloop_is_an_error_only_when_required(monkeypatch):
    monkeypatch.setitem(sys.modules, "uvloop", None)  # import uvloop now raises ImportError
    assert loop_factory({ENV_EVENT_LOOP: "auto"}) == ("asyncio", None)
    with pytest.raises(RuntimeError, match="uvloop is not installed"):
        loop_factory({ENV_EVENT_LOOP: "uvloop"})


def test_an_unknown_choice_is_refused():
    with pytest.raises(ValueError, match="auto, uvloop or asyncio"):
        loop_factory({ENV_EVENT_LOOP: "trio"})


def test_run_runs_the_coroutine_on_the_chosen_loop():
    async def answer() -> int:
        return 42

    name, factory = loop_factory({})
    assert run(answer, name, factory) == 42
