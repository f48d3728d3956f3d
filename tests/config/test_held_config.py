"""The held-task settings (docs/configuration.md "Tasks for servers that have none"): defaults,
a backend's own `hold_tasks` over the top-level one, `--hold-tasks` on `serve` and `stdio`."""

from __future__ import annotations

import argparse

import pytest

from proxy.cli import _overrides
from proxy.config import ConfigError, load

URL = "http://127.0.0.1:9/mcp"


def test_defaults():
    settings = load(None, {"upstream": [{"url": URL}]})
    [backend] = settings.upstream
    assert (settings.hold_tasks, backend.hold_tasks, backend.hold_after_ms) == ("auto", None, 1000)
    assert (settings.hold_max_ms, settings.max_held_calls, settings.max_held_per_principal) == (3_600_000, 1000, 100)


def test_a_backend_setting_and_bad_values():
    settings = load(None, {"hold_tasks": "off", "upstream": [{"url": URL, "hold_tasks": "auto", "hold_after_ms": 250}]})
    assert (settings.hold_tasks, settings.upstream[0].hold_tasks, settings.upstream[0].hold_after_ms) == ("off", "auto", 250)
    with pytest.raises(ConfigError, match="hold_tasks"):
        load(None, {"upstream": [{"url": URL, "hold_tasks": "always"}]})
    with pytest.raises(ConfigError, match="hold_after_ms"):
        load(None, {"upstream": [{"url": URL, "hold_after_ms": -1}]})


@pytest.mark.parametrize("command", ["serve", "stdio"])
def test_the_flag(command, capsys):
    from proxy.cli import main

    with pytest.raises(SystemExit):
        main([command, "--help"])
    assert "--hold-tasks {auto,off}" in capsys.readouterr().out
    args = argparse.Namespace(upstream=URL, upstream_command=None, store=None, hold_tasks="off")
    assert load(None, _overrides(args)).hold_tasks == "off"
    none = _overrides(argparse.Namespace(upstream=URL, upstream_command=None, store=None, hold_tasks=None))
    assert load(None, none).hold_tasks == "auto"
