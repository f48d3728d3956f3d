"""Plumbing for the tests that run a peer's client checks script (``tests/peers/*_client_checks.py``)
in its own environment and read its JSON lines: a peer server for a module, one run of the
script, its lines, and what the tests learn from the script's source."""

from __future__ import annotations

import asyncio
import json
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from proxy.demo.processes import ServerProcess


def serving(start: Callable[[], ServerProcess]) -> Iterator[ServerProcess]:
    """For a fixture to ``yield from``: the server ``start()`` returns, stopped by its own handle."""
    server = start()
    try:
        yield server
    finally:
        server.stop()


class ChecksRun:
    """What one run of the checks script printed: its JSON lines by check, and the rest."""

    def __init__(self, target: str, returncode: int | None, stdout: str, stderr: str) -> None:
        self.target = target
        self.returncode = returncode
        self.stderr = stderr
        self.lines: dict[str, dict[str, Any]] = {}
        self.stray: list[str] = []
        for raw in stdout.splitlines():
            try:
                line = json.loads(raw)
            except ValueError:
                self.stray.append(raw)
                continue
            if isinstance(line, dict) and "check" in line:
                self.lines[line["check"]] = line
            else:
                self.stray.append(raw)

    def explain(self) -> str:
        tail = "\n".join(self.stderr.strip().splitlines()[-30:])
        return f"{self.target}: checks script exit {self.returncode}\nstray stdout: {self.stray}\nstderr tail:\n{tail}"


async def run_script(
    python: Path, script: Path, url: str, timeout_s: float, *args: str, env: dict[str, str] | None = None
) -> tuple[int | None, str, str]:
    """Run ``script --url url args…`` with ``python`` (in ``env``, else this process's environment);
    ``(returncode, stdout, stderr)``, killed after ``timeout_s`` (then said at the end of stderr)."""
    child = await asyncio.create_subprocess_exec(
        str(python),
        str(script),
        "--url",
        url,
        *args,
        env=env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        stdout, stderr = await asyncio.wait_for(child.communicate(), timeout_s)
    except TimeoutError:
        child.kill()
        stdout, stderr = await child.communicate()
        stderr += f"\n[killed after {timeout_s:g} s]".encode()
    return child.returncode, stdout.decode("utf-8", "replace"), stderr.decode("utf-8", "replace")


def run_without_url(python: Path, script: Path) -> subprocess.CompletedProcess[str]:
    """The script run with no arguments at all (it must refuse: ``--url`` is required)."""
    return subprocess.run([str(python), str(script)], capture_output=True, text=True, timeout=120, check=False)


def script_check_names(script: Path) -> list[str]:
    """The check names of the script's ``CHECKS`` dict, in source order."""
    source = script.read_text(encoding="utf-8")
    block = source.split("CHECKS: dict[str, Check] = {", 1)[1].split("}", 1)[0]
    return [part.split('"')[1] for part in block.strip().splitlines() if '"' in part]


MCP1_TOOL_CALLS = Path(__file__).resolve().parent / "peers" / "mcp1_tool_calls.py"


async def mcp1_tool_calls(url: str, calls: list[dict[str, Any]], timeout_s: float = 120) -> list[dict[str, Any]]:
    """One session of the official mcp 1.30 client making `calls` (`tests/peers/mcp1_tool_calls.py`),
    killed after `timeout_s`; its lines: `{"texts", "isError"}` or `{"error"}` per call."""
    from proxy.demo.peers import ensure_peer_env

    code, out, err = await run_script(ensure_peer_env("mcp-v1"), MCP1_TOOL_CALLS, url, timeout_s, "--calls", json.dumps(calls))
    assert code == 0, err[-2000:]
    lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert len(lines) == len(calls), out
    return lines
