"""`mcp-tasks-proxy check`: a configuration checked without starting the proxy (proxy/check.py)."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from support import free_port

from proxy.check import check
from proxy.eventloop import loop_factory
from proxy.keys import new_key_text
from proxy.state.sqlite_store import SCHEMA_VERSION

ROOT = Path(__file__).resolve().parents[2]
NO_KEY_ENV: dict[str, str] = {}


def _write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "proxy.toml"
    path.write_text(text)
    return str(path)


def test_a_usable_file_passes_every_check_and_nothing_is_created(tmp_path):
    state = tmp_path / "state" / "deeper"
    config = _write(
        tmp_path,
        f'state_dir = "{state}"\n'
        '[[upstream]]\nname = "old"\nurl = "http://127.0.0.1:3000/mcp"\n'
        f'[[upstream]]\nname = "local"\ncommand = ["{sys.executable}", "-m", "server"]\ncwd = "{tmp_path}"\n',
    )
    lines, held = check(config, {}, NO_KEY_ENV)
    assert (lines, held) == (
        [
            f"ok: {config}: keys and values (2 backend(s))",
            "ok: backend 'old': http://127.0.0.1:3000/mcp",
            f"ok: backend 'local': stdio: {sys.executable} -m server",
            f"ok: key: {state}/key (created at the first start: {tmp_path} is writable)",
            f"ok: store: sqlite {state}/tasks.sqlite3 (created at the first start: {tmp_path} is writable)",
            f"ok: event loop: {loop_factory({})[0]}",
        ],
        True,
    )
    assert not (tmp_path / "state").exists()


def test_an_unknown_key_is_named_with_the_closest_known_one(tmp_path):
    config = _write(tmp_path, 'reconect_wait_ms = 3\n[[upstream]]\nurl = "http://127.0.0.1:1/mcp"\n')
    assert check(config, {}, NO_KEY_ENV) == (
        [f"error: {config}: unknown key 'reconect_wait_ms' (did you mean 'reconnect_wait_ms'?)"],
        False,
    )


def test_a_bad_value_is_named_with_its_key(tmp_path):
    config = _write(tmp_path, '[[upstream]]\nurl = "ftp://127.0.0.1/mcp"\nweight = 1001\n')
    lines, held = check(config, {}, NO_KEY_ENV)
    assert held is False
    assert lines == [
        f"error: {config}: upstream.0.url: Value error, must be an http:// or https:// URL (got 'ftp://127.0.0.1/mcp'); "
        "upstream.0.weight: Input should be less than or equal to 1000 (got 1001)"
    ]


def test_a_command_that_is_not_there_and_a_missing_cwd_are_errors(tmp_path):
    config = _write(
        tmp_path,
        f'state_dir = "{tmp_path}"\nstore = "memory"\n'
        '[[upstream]]\nname = "a"\ncommand = ["no-such-mcp-server-here", "--stdio"]\n'
        f'[[upstream]]\nname = "b"\ncommand = ["python3"]\ncwd = "{tmp_path}/gone"\n'
        '[[upstream]]\nname = "c"\ncommand = ["./server.sh"]\n'
        f'cwd = "{tmp_path}"\n',
    )
    (tmp_path / "server.sh").write_text("#!/bin/sh\n")  # there, but not executable
    lines, held = check(config, {}, {"MCP_TASKS_PROXY_KEY": new_key_text()})
    assert (lines, held) == (
        [
            f"ok: {config}: keys and values (3 backend(s))",
            "error: backend 'a': its command 'no-such-mcp-server-here --stdio' cannot be run: No such file or directory",
            f"error: backend 'b': its cwd '{tmp_path}/gone' is not a directory",
            "error: backend 'c': its command './server.sh' cannot be run: Permission denied",
            "ok: key: from MCP_TASKS_PROXY_KEY",
            "ok: store: memory (task state lives in the process)",
            f"ok: event loop: {loop_factory({})[0]}",
        ],
        False,
    )
    (tmp_path / "server.sh").chmod(stat.S_IRWXU)
    assert check(config, {}, {"MCP_TASKS_PROXY_KEY": new_key_text()})[0][3] == f"ok: backend 'c': stdio: {tmp_path}/server.sh"


def test_keys_that_cannot_be_used_are_errors(tmp_path):
    config = _write(
        tmp_path, f'key_file = "{tmp_path}/missing.key"\nstore = "memory"\n[[upstream]]\nurl = "http://127.0.0.1:1/mcp"\n'
    )
    assert (
        check(config, {}, NO_KEY_ENV)[0][2] == f"error: key_file: cannot read {tmp_path}/missing.key: No such file or directory"
    )
    assert check(config, {}, {"MCP_TASKS_PROXY_KEY": "c2hvcnQ"})[0][2] == (
        "error: MCP_TASKS_PROXY_KEY: must hold 64 bytes (base64url), got 5"
    )
    (tmp_path / "missing.key").write_text(new_key_text())
    assert check(config, {}, NO_KEY_ENV) == (
        [
            f"ok: {config}: keys and values (1 backend(s))",
            "ok: backend 'main': http://127.0.0.1:1/mcp",
            f"ok: key: key_file {tmp_path}/missing.key",
            "ok: store: memory (task state lives in the process)",
            f"ok: event loop: {loop_factory({})[0]}",
        ],
        True,
    )


def test_a_redis_store_must_answer_and_its_password_is_never_shown(tmp_path, redis_url):
    port = free_port()
    down = check(
        None,
        {"upstream": [{"url": "http://127.0.0.1:1/mcp"}], "store": f"redis://:hunter2@127.0.0.1:{port}/0"},
        {"MCP_TASKS_PROXY_KEY": new_key_text()},
    )
    assert down[1] is False
    assert down[0][-2].startswith(f"error: store: redis://:***@127.0.0.1:{port}/0 does not answer PING within 3 s: ")
    assert "hunter2" not in "\n".join(down[0])
    up = check(
        None, {"upstream": [{"url": "http://127.0.0.1:1/mcp"}], "store": redis_url}, {"MCP_TASKS_PROXY_KEY": new_key_text()}
    )
    assert (up[0][-2], up[1]) == (f"ok: store: {redis_url} answers PING", True)


def test_the_command_exits_1_naming_the_problem_and_0_for_a_good_file(tmp_path):
    bad = _write(tmp_path, 'listen = "nowhere"\n')
    env = {**os.environ, "MCP_TASKS_PROXY_KEY": new_key_text()}
    run = [sys.executable, "-m", "proxy", "check", "--config"]
    failed = subprocess.run([*run, bad], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert (failed.returncode, failed.stdout, failed.stderr) == (
        1,
        "",
        f"error: {bad}: listen: Value error, must be HOST:PORT, e.g. 127.0.0.1:8080 (got 'nowhere')\n",
    )
    good = tmp_path / "good.toml"
    good.write_text(f'state_dir = "{tmp_path}"\nstore = "memory"\n[[upstream]]\nurl = "http://127.0.0.1:1/mcp"\n')
    passed = subprocess.run([*run, str(good)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert (passed.returncode, passed.stderr) == (0, "")
    assert passed.stdout.splitlines()[0] == f"ok: {good}: keys and values (1 backend(s))"


def test_every_workers_refusal_of_serve_is_a_refusal_of_check(tmp_path):
    """Issue 46: `check` refused nothing `serve --workers` refuses (the SQLite store, port 0, a stdio
    backend); both now give the same reason (`proxy.check.workers_refusal`)."""
    backend = '[[upstream]]\nname = "main"\nurl = "http://127.0.0.1:3000/mcp"\n'
    stdio = f'[[upstream]]\nname = "local"\ncommand = ["{sys.executable}", "-m", "server"]\n'
    cases = {
        "sqlite": (
            'workers = 2\nlisten = "127.0.0.1:18080"\n' + backend,
            'workers = 2 needs a store the processes share: store = "redis://host:port/db" (the SQLite store belongs to one '
            "process, and memory to each)",
        ),
        "port 0": (
            'workers = 2\nlisten = "127.0.0.1:0"\nstore = "redis://127.0.0.1:1/0"\n' + backend,
            'workers > 1 need a fixed port to share (listen = "host:port", not port 0)',
        ),
        "stdio": (
            'workers = 2\nlisten = "127.0.0.1:18080"\nstore = "redis://127.0.0.1:1/0"\n' + stdio,
            "workers > 1 cannot serve a stdio backend (local): each worker would run its own processes, and a session "
            "opened on one would be unknown to the others; run one worker",
        ),
    }
    env = {**os.environ, "MCP_TASKS_PROXY_KEY": new_key_text(), "MCP_TASKS_PROXY_STATE_DIR": str(tmp_path / "state")}
    for name, (text, reason) in cases.items():
        config = _write(tmp_path, f'state_dir = "{tmp_path / "state"}"\n' + text)
        lines, held = check(config, {}, {"MCP_TASKS_PROXY_KEY": new_key_text()})
        assert not held and f"error: workers: {reason}" in lines, (name, lines)
        served = subprocess.run(
            [sys.executable, "-m", "proxy", "serve", "--config", config],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env=env,
            timeout=60,
            check=False,
        )
        assert (served.returncode, served.stderr.strip()) == (2, f"mcp-tasks-proxy: configuration error: {reason}"), name


def _newer_store(state: Path) -> None:
    """A store file whose schema is newer than this proxy's (`SCHEMA_VERSION` + 1)."""
    with contextlib.closing(sqlite3.connect(state / "tasks.sqlite3")) as db:
        db.execute("CREATE TABLE meta (name TEXT PRIMARY KEY, value TEXT NOT NULL)")
        db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")


NEWER = (
    "was written by a newer mcp-tasks-proxy (schema 2; this version reads up to 1): run the newer version, or move the file away"
)
NOT_FOUND = "cannot be run: No such file or directory"
REFUSED = "refusing to start: "
Case = tuple[Callable[[Path], str], Callable[[Path], str], dict[str, str]]
"""The file's text after `state_dir` and `listen`, given the test's folder; the reason, given the
folder; the environment added (each case's folder holds its `state/`, with nothing in it unless the
case's text put something there)."""
BACKEND = '[[upstream]]\nname = "main"\nurl = "http://127.0.0.1:{port}/mcp"\n'
REFUSALS: dict[str, Case] = {
    "a store a newer proxy wrote": (
        lambda d: (_newer_store(d / "state"), BACKEND)[1],
        lambda d: f"store: {d / 'state' / 'tasks.sqlite3'} {NEWER} to start with an empty store",
        {},
    ),
    "a damaged store": (
        lambda d: ((d / "state" / "tasks.sqlite3").write_bytes(b"not a database\n" * 512), BACKEND)[1],
        lambda d: (
            f"store: {d / 'state' / 'tasks.sqlite3'} is damaged (quick check: file is not a database): move it away to "
            "start with an empty store"
        ),
        {},
    ),
    "an unknown event loop": (
        lambda d: BACKEND,
        lambda d: "MCP_TASKS_PROXY_EVENT_LOOP must be auto, uvloop or asyncio, not 'bogus'",
        {"MCP_TASKS_PROXY_EVENT_LOOP": "bogus"},
    ),
    "a malformed key": (
        lambda d: BACKEND,
        lambda d: "MCP_TASKS_PROXY_KEY: must hold 64 bytes (base64url), got 5",
        {"MCP_TASKS_PROXY_KEY": "c2hvcnQ"},
    ),
    "a key file that is not there": (
        lambda d: f'key_file = "{d / "none.key"}"\n' + BACKEND,
        lambda d: f"key_file: cannot read {d / 'none.key'}: No such file or directory",
        {"MCP_TASKS_PROXY_KEY": ""},
    ),
    "replicas without a shared key": (
        lambda d: ((d / "state" / "key").write_text(new_key_text()), "replicas = 2\n" + BACKEND)[1],
        lambda d: (
            "replicas: 2 replicas must share one sealing key: set MCP_TASKS_PROXY_KEY or key_file (an auto-created key "
            "would differ on each replica)"
        ),
        {"MCP_TASKS_PROXY_KEY": ""},
    ),
    "a state_dir below a file": (
        lambda d: ((d / "state").rmdir(), (d / "state").write_text(""), 'state_dir = "{state}/below"\n' + BACKEND)[2],
        lambda d: f"{d / 'state' / 'below'} cannot be created: {d / 'state'} is not a writable directory",
        {"MCP_TASKS_PROXY_KEY": ""},
    ),
    "no backend": (
        lambda d: "",
        lambda d: "upstream: at least one backend is required (give --upstream URL, or [[upstream]] tables in the config file)",
        {},
    ),
    "a backend's CA file that is not there": (
        lambda d: f'[[upstream]]\nname = "main"\nurl = "https://127.0.0.1:{{port}}/mcp"\ntls_ca_file = "{d / "ca.pem"}"\n',
        lambda d: f"backend 'main': tls_ca_file {d / 'ca.pem'}: cannot read it: No such file or directory",
        {},
    ),
    "the face's certificate that is not there": (
        lambda d: f'tls_cert = "{d / "cert.pem"}"\ntls_key = "{d / "key.pem"}"\n' + BACKEND,
        lambda d: f"tls: tls_cert {d / 'cert.pem'}: cannot read it: No such file or directory",
        {},
    ),
    "a stdio command that is not there": (
        lambda d: '[[upstream]]\nname = "main"\ncommand = ["/nonexistent/mcp-stdio-server", "--stdio"]\n',
        lambda d: f"backend 'main': its command '/nonexistent/mcp-stdio-server --stdio' {NOT_FOUND}",
        {},
    ),
    "a stdio cwd that is not there": (
        lambda d: f'[[upstream]]\nname = "main"\ncommand = ["{sys.executable}"]\ncwd = "{d / "gone"}"\n',
        lambda d: f"backend 'main': its cwd '{d / 'gone'}' is not a directory",
        {},
    ),
}


@pytest.mark.slow  # two processes a case, about 1 s each on two cores (docs/development.md "The fast tier")
@pytest.mark.parametrize("case", list(REFUSALS))
def test_every_refusal_of_serve_at_start_is_a_refusal_of_check_in_the_same_words(tmp_path, case):
    """Issue 46: `check` passed files `serve` refuses before it listens (a store a newer proxy
    wrote, a damaged store, an unknown event loop, ...). Both run `proxy.check.checks` now:
    `check` exits 1 with `error: <reason>`, `serve` 2 with `mcp-tasks-proxy: refusing to start:
    <reason>`, and `check` writes nothing in the state directory."""
    text, reason, env_added = REFUSALS[case]
    (tmp_path / "state").mkdir()
    body = text(tmp_path).format(port=free_port(), state=tmp_path / "state")
    state_line = "" if body.startswith("state_dir") else f'state_dir = "{tmp_path / "state"}"\n'
    config = _write(tmp_path, f'listen = "127.0.0.1:{free_port()}"\n{state_line}{body}')
    env = {key: value for key, value in os.environ.items() if not key.startswith("MCP_TASKS_PROXY_")}
    env.update({"MCP_TASKS_PROXY_KEY": new_key_text(), **env_added})

    def state() -> list[str] | None:
        return sorted(p.name for p in (tmp_path / "state").iterdir()) if (tmp_path / "state").is_dir() else None

    before, ended = state(), {}
    for command in ("check", "serve"):  # one after the other: what is in `state/` after `check` is what it wrote
        process = subprocess.Popen(
            [sys.executable, "-m", "proxy", command, "--config", config],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            out, err = process.communicate(timeout=60)
        finally:
            if process.returncode is None:  # serving: the refusal did not come
                process.kill()  # this test's own child, by its PID
                process.wait()
        ended[command] = (process.returncode, out, err, state())
    checked, served = ended["check"], ended["serve"]
    check_errors = [line for line in checked[2].splitlines() if line.startswith("error: ")]
    assert (checked[0], check_errors[:1], served[:3]) == (
        1,
        [f"error: {reason(tmp_path)}"],
        (2, "", f"mcp-tasks-proxy: {REFUSED}{reason(tmp_path)}\n"),
    )
    assert checked[3] == before  # `check` wrote nothing


def test_a_rollout_the_file_runs_is_reported(tmp_path):
    config = _write(
        tmp_path,
        f'state_dir = "{tmp_path / "state"}"\n[[upstream]]\nname = "old"\nurl = "http://127.0.0.1:3000/mcp"\n'
        '[[upstream]]\nname = "new"\nurl = "http://127.0.0.1:3001/mcp"\nweight = 0\n'
        '[rollout]\nfrom = "old"\nto = "new"\nsteps = [20, 50, 100]\nstep_ms = 3000\nmin_calls = 10\nthen = "drain"\n',
    )
    lines, held = check(config, {}, {"MCP_TASKS_PROXY_KEY": new_key_text()})
    assert (
        held
        and lines[-1]
        == "ok: rollout: old -> new, steps 20, 50, 100 % of new work, each at least 3000 ms and 10 calls; then drain"
    )
