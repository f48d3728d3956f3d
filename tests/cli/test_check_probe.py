"""`mcp-tasks-proxy check --probe` (proxy/check.py `probed`, docs/decisions.md §180): after every
check of the file, what `serve` meets when it starts now is asked too, and what would make `serve`
refuse, `check --probe` refuses in the same words: a state directory another proxy holds, a stdio
command whose process exits before it answers, backends that name different authorization
servers, an address something listens on. A backend that does not answer now is reported, not
refused (`serve` starts and waits for it); plain `check` asks none of these."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shlex
import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from support import free_port

from proxy.keys import new_key_text

ROOT = Path(__file__).resolve().parents[2]


def _config(tmp_path: Path, backends: str, port: int | None = None, *, listen: str | None = None, keys: str = "") -> str:
    """The file: its own `state_dir`, `listen` (127.0.0.1:`port`, a free one by default), `keys`, then `backends`."""
    path = tmp_path / "proxy.toml"
    path.write_text(
        f'state_dir = "{tmp_path / "state"}"\nlisten = "{listen or f"127.0.0.1:{port or free_port()}"}"\n{keys}{backends}'
    )
    return str(path)


def _env() -> dict[str, str]:
    """This environment without the proxy's variables, and a sealing key of its own."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("MCP_TASKS_PROXY_")}
    env["MCP_TASKS_PROXY_KEY"] = new_key_text()
    return env


@contextlib.contextmanager
def _something_listening() -> Iterator[int]:
    """A socket listening on 127.0.0.1 (an ephemeral port, yielded) for the block."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        yield held.getsockname()[1]


def _backend(url: str | None = None) -> str:
    """One backend `main` at `url` (by default a port where nothing answers)."""
    return f'[[upstream]]\nname = "main"\nurl = "{url or f"http://127.0.0.1:{free_port()}/mcp"}"\n'


async def _run(*args: str) -> tuple[int, str, str]:
    """`python -m proxy <args>` to its end (a `serve` that does not refuse is killed at 60 s, by its PID)."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "proxy", *args, cwd=ROOT, env=_env(), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    try:
        out, err = await asyncio.wait_for(process.communicate(), 60)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def _metadata_backends(aiohttp_server: Any) -> str:
    """Two servers on ephemeral ports whose protected-resource metadata name different authorization
    servers (`a` and `b`, each its own), and 404 for everything else: their `[[upstream]]` tables."""

    def app(name: str) -> web.Application:
        async def metadata(request: web.Request) -> web.Response:
            return web.json_response(
                {"resource": f"http://{request.host}/mcp", "authorization_servers": [f"https://as-{name}.example/"]}
            )

        made = web.Application()
        made.router.add_get("/.well-known/oauth-protected-resource/mcp", metadata)
        return made

    urls = {name: str((await aiohttp_server(app(name))).make_url("/mcp")) for name in ("a", "b")}
    return "".join(f'[[upstream]]\nname = "{n}"\nurl = "{u}"\n' for n, u in urls.items())


async def _refused_alike(config: str, reason: str, serve_says: str | None = None) -> None:
    """Plain `check` passes the file; `check --probe` exits 1 with `error: <reason>` as its last
    line; `serve` refuses to start with the same reason (`serve_says`: its line, when it is not
    `refusing to start: <reason>`)."""
    plain = await _run("check", "--config", config)
    probed = await _run("check", "--probe", "--config", config)
    served = await _run("serve", "--config", config)
    assert (plain[0], probed[0], (probed[2] or probed[1]).splitlines()[-1:]) == (0, 1, [f"error: {reason}"])
    said = serve_says or f"refusing to start: {reason}"
    assert (served[0], served[2].splitlines()[-1:]) == (2, [f"mcp-tasks-proxy: {said}"])


@pytest.mark.slow  # three processes of about 1 s each on two cores
async def test_a_stdio_command_that_exits_before_it_answers_is_refused_by_check_probe_as_by_serve(tmp_path):
    argv = [sys.executable, "-c", "import sys; sys.exit(3)"]
    config = _config(tmp_path, f'[[upstream]]\nname = "dies"\ncommand = {json.dumps(argv)}\n')
    shown = f'"{shlex.join(argv)}"'
    await _refused_alike(
        config,
        f"backend 'dies': its command {shown} exited with status 3 before answering initialize; it wrote nothing to stderr",
    )


@pytest.mark.slow
async def test_backends_naming_different_authorization_servers_are_refused_by_check_probe_as_by_serve(aiohttp_server, tmp_path):
    config = _config(tmp_path, await _metadata_backends(aiohttp_server))
    await _refused_alike(
        config,
        "the backends behind one public URL name different authorization servers "
        '(a: https://as-a.example; b: https://as-b.example): set resource_backend = "<name>" '
        "to the backend that speaks for the resource, or give each set of backends a proxy of its own",
    )


async def test_check_probe_says_what_each_backend_answers_and_passes_one_that_is_down(fast_modern_upstream_url, tmp_path):
    down, port = f"http://127.0.0.1:{free_port()}/mcp", free_port()
    config = _config(
        tmp_path,
        f'[[upstream]]\nname = "main"\nurl = "{fast_modern_upstream_url}"\n[[upstream]]\nname = "down"\nurl = "{down}"\n',
        port,
    )
    code, out, err = await _run("check", "--probe", "--config", config)
    assert (code, err, out.splitlines()[-4:]) == (
        0,
        "",
        [
            f"ok: store: {tmp_path / 'state' / 'tasks.sqlite3'} is not in use by another process",
            f"ok: backend 'main' answers: main at {fast_modern_upstream_url}: v2-modern (2026-07-28; tool tasks)",
            "ok: backend 'down' does not answer now (Backend 'down' unavailable: cannot reach it (ClientConnectorError)): "
            "serve starts and waits for it",
            f"ok: listen: nothing listens on 127.0.0.1:{port} now",
        ],
    )


@pytest.mark.slow
async def test_an_address_something_listens_on_is_refused_by_check_probe_as_by_serve(tmp_path):
    with _something_listening() as port:
        said = f"cannot listen on 127.0.0.1:{port}: Address already in use"
        await _refused_alike(_config(tmp_path, _backend(), port), said, said)


@pytest.mark.slow
async def test_a_state_directory_a_running_proxy_holds_is_refused_by_check_probe_as_by_serve(fast_modern_upstream_url, tmp_path):
    config = _config(tmp_path, _backend(fast_modern_upstream_url))
    running = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "proxy",
        "serve",
        "--config",
        config,
        cwd=ROOT,
        env=_env(),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        assert running.stdout is not None
        banner = (await asyncio.wait_for(running.stdout.readline(), 30)).decode()
        assert banner.startswith("mcp-tasks-proxy listening on "), banner
        store = tmp_path / "state" / "tasks.sqlite3"
        await _refused_alike(config, f"store: {store} is in use by another process (one proxy per state_dir)")
    finally:
        running.terminate()  # the proxy this test started, by its own PID
        stopped = await asyncio.wait_for(running.wait(), 30)
    assert stopped == 0  # after the block: a failure above is not replaced


@pytest.mark.slow
async def test_a_listen_host_that_does_not_resolve_is_refused_by_check_probe_as_by_serve(tmp_path):
    port = free_port()
    try:
        socket.getaddrinfo("no-such-host.invalid", port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        resolver_says = exc.strerror
    else:
        pytest.fail("no-such-host.invalid resolved")
    said = f"cannot listen on no-such-host.invalid:{port}: {resolver_says}"
    await _refused_alike(_config(tmp_path, _backend(), listen=f"no-such-host.invalid:{port}"), said, said)


@pytest.mark.slow
async def test_with_workers_the_address_is_refused_before_the_backends_as_serve_binds_first(aiohttp_server, redis_url, tmp_path):
    """`serve --workers`'s supervisor binds before its workers ask the backends: with both an
    address in use and backends that disagree, both refuse for the address."""
    backends = await _metadata_backends(aiohttp_server)
    with _something_listening() as port:
        said = f"cannot listen on 127.0.0.1:{port}: Address already in use"
        await _refused_alike(_config(tmp_path, backends, port, keys=f'workers = 2\nstore = "{redis_url}"\n'), said, said)
