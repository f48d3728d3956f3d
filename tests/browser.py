"""Debian's Chromium, headless, for tests of pages the proxy serves: installed with apt-get when
missing (the project's own step, so CI installs it too), run on a page URL to dump the rendered
DOM or save a PNG screenshot, and a small reader of the rendered tables."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import tempfile
from html.parser import HTMLParser
from pathlib import Path

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--hide-scrollbars",
]


def ensure_chromium() -> str:
    """The path of `chromium`, installing Debian's package first when it is absent."""
    found = shutil.which("chromium")
    if found:
        return found
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-qq"], check=True, env=env)
    subprocess.run(["apt-get", "install", "-y", "-qq", "chromium"], check=True, env=env)
    found = shutil.which("chromium")
    assert found, "apt-get installed chromium but it is not on PATH"
    return found


async def _run(*args: str) -> bytes:
    with tempfile.TemporaryDirectory(prefix="chromium-") as profile:
        process = await asyncio.create_subprocess_exec(
            ensure_chromium(),
            *FLAGS,
            f"--user-data-dir={profile}",
            *args,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
        )
        out, _ = await asyncio.wait_for(process.communicate(), 120)
    assert process.returncode == 0, f"chromium exited {process.returncode}"
    return out


async def dump_dom(url: str) -> str:
    """The DOM of `url` as Chromium rendered it (serialised HTML)."""
    return (await _run("--dump-dom", url)).decode()


async def screenshot(url: str, path: Path, size: str = "1280,1400") -> None:
    """A PNG of `url` at `size` (width,height) in `path`."""
    await _run(f"--screenshot={path}", f"--window-size={size}", url)


class _Tables(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tables: dict[str, list[list[str]]] = {}
        self._table: str | None = None
        self._row: list[str] | None = None
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "table":
            self._table = dict(attrs).get("id") or ""
            self.tables[self._table] = []
        elif tag == "tr" and self._table is not None:
            self._row = []
        elif tag in ("td", "th") and self._row is not None:
            self._cell = []
        elif tag == "br" and self._cell is not None:
            self._cell.append(" ")

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None and self._row is not None:
            self._row.append(" ".join("".join(self._cell).split()))
            self._cell = None
        elif tag == "tr" and self._row is not None and self._table is not None:
            self.tables[self._table].append(self._row)
            self._row = None
        elif tag == "table":
            self._table = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def tables(dom: str) -> dict[str, list[list[str]]]:
    """table id → its rows (header row first), each a list of cell texts with whitespace collapsed."""
    reader = _Tables()
    reader.feed(dom)
    return reader.tables
