"""Pinned sets of npm packages installed on demand into the cache, like the conformance suite.

Two sets are defined here. :data:`OFFICIAL_SCHEMAS`, the MCP project's own TypeScript packages whose
zod schemas the tests validate the proxy's answers with (``tests/node/validate.mjs``), and which
``tests/node/sdk_client.mjs`` drives as a 2026-07-28 client:

* ``@modelcontextprotocol/ext-tasks`` ships the schemas of both task generations
  (``@modelcontextprotocol/ext-tasks/core/v1``, ``.../core/v2``) and the official Tasks client;
* ``@modelcontextprotocol/client`` (its peer dependency) brings ``@modelcontextprotocol/core`` at
  the same version, whose schemas are those of the other MCP messages.

And :data:`SERVER_EVERYTHING`, the MCP project's TypeScript reference server (a 2025-11-25 server on
the TypeScript SDK 1.x), run over Streamable HTTP as a v1 backend
(``node <prefix>/node_modules/@modelcontextprotocol/server-everything/dist/index.js streamableHttp``).

Layout::

    cache_root()/node/<name>-<hash12>/              npm prefix (package.json, node_modules)
    cache_root()/node/<name>-<hash12>/.npm-ready    marker written after a successful install
    cache_root()/node/<name>-<hash12>.lock          fcntl lock file serialising concurrent builders

``<hash12>`` is the first 12 hex digits of the SHA-256 of the pins, so a new pin builds a fresh
directory beside the old one. These packages run on the machine's own Node (>= 20).

Command line::

    python -m proxy.demo.node_packages install      # installs both sets, prints their prefixes

Stdlib only: this module runs inside the proxy's own environment.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from .node_tools import _npm_install
from .peers import _exclusive_lock, cache_root

__all__ = ["OFFICIAL_SCHEMAS", "SERVER_EVERYTHING", "STDIO_SERVERS", "ensure_npm_packages", "node_binary", "npm_prefix"]

#: The official schema packages, pinned exactly (zod too: its schemas are what validates).
#: ``@modelcontextprotocol/client`` depends on ``@modelcontextprotocol/core`` of its own version.
OFFICIAL_SCHEMAS: tuple[str, ...] = (
    "@modelcontextprotocol/ext-tasks@0.2.2",
    "@modelcontextprotocol/client@2.4.0",
    "@modelcontextprotocol/core@2.4.0",
    "zod@4.6.7",
)

#: The TypeScript reference server, pinned exactly (its own dependencies come with it).
SERVER_EVERYTHING: tuple[str, ...] = ("@modelcontextprotocol/server-everything@2026.8.31",)

#: Legacy (2025-11-25) servers that speak only stdio, run by the stdio-backend tests and the demo's
#: stdio step: the "everything" reference server (v1 tasks with an elicitation:
#: ``simulate-research-query``) and the task-less "memory" server.
STDIO_SERVERS: tuple[str, ...] = (
    "@modelcontextprotocol/server-everything@2026.8.31",
    "@modelcontextprotocol/server-memory@2026.8.31",
)

_MARKER_NAME = ".npm-ready"


def _fingerprint(packages: Sequence[str]) -> str:
    return hashlib.sha256(json.dumps(sorted(packages)).encode("utf-8")).hexdigest()[:12]


def npm_prefix(name: str, packages: Sequence[str]) -> Path:
    """The npm prefix the set `name` with these pins is (or will be) installed into."""
    return cache_root() / "node" / f"{name}-{_fingerprint(packages)}"


def _installed(prefix: Path, packages: Sequence[str]) -> bool:
    """Whether every pinned package is present at its pinned version."""
    for spec in packages:
        package, _, version = spec.rpartition("@")
        manifest = prefix / "node_modules" / package / "package.json"
        try:
            if json.loads(manifest.read_text(encoding="utf-8")).get("version") != version:
                return False
        except (OSError, ValueError):
            return False
    return True


def ensure_npm_packages(name: str, packages: Sequence[str], *, log: Callable[[str], None] | None = None) -> Path:
    """Return the npm prefix holding `packages` (exact ``name@version`` pins), installing it first
    if needed.

    A ready install (marker present, every package at its pinned version) is reused without
    touching the network. Otherwise any partial directory is removed and ``npm install`` runs into
    a fresh one; concurrent callers, in this or other processes, are serialised with ``fcntl.flock``.

    Raises:
        RuntimeError: npm is missing, ``npm install`` failed or timed out (the message ends with
            the tail of npm's output), or a package is not at its pinned version afterwards.
    """
    say = log or (lambda message: print(f"[node-packages] {message}", file=sys.stderr, flush=True))
    prefix = npm_prefix(name, packages)
    if (prefix / _MARKER_NAME).is_file() and _installed(prefix, packages):
        return prefix
    with _exclusive_lock(prefix.with_name(prefix.name + ".lock")):
        if (prefix / _MARKER_NAME).is_file() and _installed(prefix, packages):
            return prefix
        if prefix.exists():
            say(f"removing incomplete install {prefix}")
            shutil.rmtree(prefix)
        prefix.mkdir(parents=True)
        try:
            say(f"installing {' '.join(packages)} into {prefix}")
            _npm_install(prefix, packages)
            if not _installed(prefix, packages):
                raise RuntimeError(f"npm install into {prefix} did not leave {' '.join(packages)} at those versions")
        except BaseException:
            shutil.rmtree(prefix, ignore_errors=True)
            raise
        (prefix / _MARKER_NAME).write_text(json.dumps({"packages": list(packages)}, indent=2) + "\n", encoding="utf-8")
    return prefix


def node_binary() -> str:
    """The machine's ``node`` (the one npm runs on). Raises ``RuntimeError`` when there is none."""
    node = shutil.which("node")
    if node is None:
        raise RuntimeError("node not found on PATH; the official schema packages run on it")
    return node


def main(argv: Sequence[str] | None = None) -> int:
    """``install``: install :data:`OFFICIAL_SCHEMAS`, :data:`SERVER_EVERYTHING` and
    :data:`STDIO_SERVERS`, print the prefixes; returns the exit status."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args != ["install"]:
        print("usage: python -m proxy.demo.node_packages install", file=sys.stderr)
        return 2
    try:
        print(ensure_npm_packages("official-schemas", OFFICIAL_SCHEMAS))
        print(ensure_npm_packages("server-everything", SERVER_EVERYTHING))
        print(ensure_npm_packages("stdio-servers", STDIO_SERVERS))
    except RuntimeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
