"""The shadow keys of `[[upstream]]` (docs/configuration.md "Shadowing"): errors name the key and say what to do."""

from __future__ import annotations

import pytest

from proxy.config import ConfigError, load

PRIMARY = '[[upstream]]\nname = "legacy"\nurl = "http://127.0.0.1:1/mcp"\n'


def test_a_shadow_backend_takes_no_client_traffic():
    settings = load(
        None,
        {
            "upstream": [
                {"name": "legacy", "url": "http://127.0.0.1:1/mcp"},
                {"name": "next", "url": "http://127.0.0.1:2/mcp", "shadow_of": "legacy"},
            ]
        },
    )
    legacy, candidate = settings.upstream
    assert (legacy.weight, candidate.weight, candidate.shadow_percent, candidate.shadow_tools, candidate.shadow_ignore) == (
        1,
        0,
        100.0,
        [],
        [],
    )
    assert (
        candidate.shadow_queue,
        candidate.shadow_concurrency,
        candidate.shadow_timeout_ms,
        candidate.shadow_max_body_bytes,
    ) == (
        64,
        4,
        30_000,
        4 * 1024 * 1024,
    )


@pytest.mark.parametrize(
    ("table", "message"),
    [
        (
            'name = "next"\nurl = "http://x"\nshadow_of = "gone"\n',
            "upstream: Value error, backend 'next': shadow_of = 'gone' names no configured backend (backends: legacy, next)",
        ),
        (
            'name = "next"\nurl = "http://x"\nshadow_of = "next"\n',
            "upstream.1: Value error, shadow_of names this backend itself ('next'); name the backend it shadows",
        ),
        (
            'name = "next"\nurl = "http://x"\nshadow_of = "legacy"\nweight = 3\n',
            "upstream.1: Value error, a shadow backend (shadow_of = 'legacy') takes no client traffic of its own: leave weight out or "
            "set it to 0 (got 3)",
        ),
        (
            'name = "next"\nurl = "http://x"\nshadow_of = "legacy"\ndrain = true\n',
            "upstream.1: Value error, a shadow backend takes no client traffic: plain_ids and drain do not apply to it",
        ),
        (
            'name = "next"\nurl = "http://x"\nshadow_percent = 10\nshadow_tools = ["a"]\n',
            "upstream.1: Value error, shadow_percent, shadow_tools: only for a shadow backend; give shadow_of",
        ),
        (
            'name = "next"\nurl = "http://x"\nshadow_of = "legacy"\nshadow_percent = 120\n',
            "upstream.1.shadow_percent: Input should be less than or equal to 100 (got 120)",
        ),
        (
            'name = "next"\nurl = "http://x"\nshadow_of = "legacy"\nshadow_max_body_bytes = 100\n',
            "upstream.1.shadow_max_body_bytes: Input should be greater than or equal to 1024 (got 100)",
        ),
        (
            'name = "next"\nurl = "http://x"\nshadow_of = "legacy"\nshadow_max_body_bytes = 33554433\n',
            "upstream.1.shadow_max_body_bytes: Input should be less than or equal to 33554432 (got 33554433)",
        ),
        (
            'name = "next"\nurl = "http://x"\nshadow_max_body_bytes = 65536\n',
            "upstream.1: Value error, shadow_max_body_bytes: only for a shadow backend; give shadow_of",
        ),
        (
            'name = "next"\nurl = "http://x"\nshadow_of = "legacy"\nshadow_max_body = 65536\n',
            "upstream.1: unknown key 'shadow_max_body' (did you mean 'shadow_max_body_bytes'?)",
        ),
        (
            'name = "next"\nurl = "http://x"\nshadow_of = "legacy"\nshadow_ignore = ["content.0.text"]\n',
            "upstream.1.shadow_ignore: Value error, 'content.0.text' must start at the outcome: result., error. or asks.",
        ),
        (
            'name = "next"\nurl = "http://x"\nshadow_of = "legacy"\n[[upstream]]\nname = "third"\nurl = "http://y"\nshadow_of = "next"\n',
            "upstream: Value error, backend 'third': shadow_of = 'next' names a shadow backend itself",
        ),
    ],
)
def test_shadow_errors_name_the_key(tmp_path, table, message):
    path = tmp_path / "bad.toml"
    path.write_text(PRIMARY + "[[upstream]]\n" + table)
    with pytest.raises(ConfigError) as caught:
        load(path)
    assert message in str(caught.value)


def test_check_knows_shadow_max_body_bytes(tmp_path):
    """`mcp-tasks-proxy check` takes the key, and names it for a misspelt one."""
    from proxy.check import check

    good, bad = tmp_path / "good.toml", tmp_path / "bad.toml"
    good.write_text(
        f'state_dir = "{tmp_path}"\nstore = "memory"\n'
        + PRIMARY
        + '[[upstream]]\nname = "next"\nurl = "http://127.0.0.1:2/mcp"\nshadow_of = "legacy"\nshadow_max_body_bytes = 65536\n'
    )
    bad.write_text(
        PRIMARY + '[[upstream]]\nname = "next"\nurl = "http://127.0.0.1:2/mcp"\nshadow_of = "legacy"\nshadow_max_bytes = 1\n'
    )
    lines, held = check(str(good), {}, {})
    assert (lines[0], held) == (f"ok: {good}: keys and values (2 backend(s))", True)
    assert check(str(bad), {}, {}) == (
        [f"error: {bad}: upstream.1: unknown key 'shadow_max_bytes' (did you mean 'shadow_max_body_bytes'?)"],
        False,
    )
