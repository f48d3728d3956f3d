"""What the demos share: numbered steps, the printer, the check recorder and the run harness.

Both walkthroughs (``mcp-tasks-proxy demo``, :mod:`proxy.demo.walkthrough`: a v2 client in front of
a v1 server; ``mcp-tasks-proxy demo --reverse``, :mod:`proxy.demo.reverse_walkthrough`: a v1 client
in front of a v2 server) are lists of :class:`Step` run by a :class:`Narrator` subclass that adds
its own clients and ways of talking. This module holds the parts that do not depend on a wire:

* :class:`Step`, :class:`StepOutcome` and :func:`registrar` (the ``@step`` decorator of a list);
* :class:`Narrator`: verbose-only lines, pretty JSON with long ids shortened to ``abcd…wxyz``,
  ``✔``/``✘`` check lines (:meth:`Narrator.check`, :meth:`~Narrator.expect`,
  :meth:`~Narrator.expect_at`, :meth:`~Narrator.expect_error`) and :meth:`~Narrator.run_step`;
* :func:`summary` (the last line) and :func:`run_demo` (start the server, run the proxy in this
  process in front of it, walk the steps, stop everything, also on failure or Ctrl-C).

Exchanges are duck-typed: a check helper needs ``status``, ``response`` and ``error_code``; the
printing helpers also ``request_headers``, ``headers``, ``body`` and ``elapsed_s``.
"""

from __future__ import annotations

import asyncio
import copy
import json
import shlex
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

__all__ = [
    "SHORT_ID_OVER",
    "STEP_TIMEOUT_S",
    "Narrator",
    "Step",
    "StepOutcome",
    "registrar",
    "run_demo",
    "short_id",
    "summary",
]

#: Upper bound for one step.
STEP_TIMEOUT_S = 15.0
#: Ids longer than this are shown as ``abcd…wxyz``.
SHORT_ID_OVER = 16

_MISSING = object()
_NOTHING = object()  # check() was given no "got" value
_ELIDED = "\x00elided\x00"


# ------------------------------------------------------------------------------------------------
# Steps
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    """One numbered step: ``title`` (printed in every mode), ``about`` (a line of explanation,
    verbose only) and ``run``, a coroutine function of the demo (a :class:`Narrator`)."""

    title: str
    run: Callable[[Any], Awaitable[None]]
    about: str = ""


StepFunction = Callable[[Any], Awaitable[None]]


def registrar(steps: list[Step]) -> Callable[[str, str], Callable[[StepFunction], StepFunction]]:
    """The ``@step("title", "about")`` decorator that appends to ``steps`` (definition order)."""

    def step(title: str, about: str = "") -> Callable[[StepFunction], StepFunction]:
        def register(run: StepFunction) -> StepFunction:
            steps.append(Step(title, run, about))
            return run

        return register

    return step


@dataclass
class StepOutcome:
    """What one step saw: its checks as ``(passed, line)`` pairs."""

    number: int
    title: str
    checks: list[tuple[bool, str]] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return bool(self.checks) and all(ok for ok, _ in self.checks)


# ------------------------------------------------------------------------------------------------
# Display
# ------------------------------------------------------------------------------------------------


def short_id(value: str) -> str:
    """``abcd…wxyz`` for a long id, the id itself when short."""
    return value if len(value) <= SHORT_ID_OVER else f"{value[:4]}…{value[-4:]}"


def _elide(obj: Any, path: list[str]) -> None:
    """Replace the value at ``path`` (segments; ``*`` = every item) with a marker, in place."""
    if not path:
        return
    head, rest = path[0], path[1:]
    if isinstance(obj, dict):
        keys = list(obj) if head == "*" else [head] if head in obj else []
    elif isinstance(obj, list):
        keys = list(range(len(obj))) if head == "*" else []
    else:
        return
    for key in keys:
        if rest:
            _elide(obj[key], rest)
        else:
            obj[key] = _ELIDED


def _indent(text: str, prefix: str = "    ") -> str:
    return "\n".join(prefix + line for line in text.splitlines())


def _repr(value: Any) -> str:
    if value is _MISSING:
        return "(absent)"
    text = json.dumps(value, ensure_ascii=False, sort_keys=False)
    return text if len(text) <= 160 else text[:157] + "…"


# ------------------------------------------------------------------------------------------------
# The narrator: printing and checks
# ------------------------------------------------------------------------------------------------


class _Answer(Protocol):
    status: int
    response: dict[str, Any] | None

    @property
    def error_code(self) -> int | None: ...


class _Exchange(_Answer, Protocol):
    request_headers: dict[str, str]
    headers: dict[str, str]
    body: str
    elapsed_s: float


class Narrator:
    """Printing and check recording for a demo; subclasses add the clients and the talking.

    Attributes:
        verbose: print requests, answers and every check (otherwise only titles, failed checks and
            the summary).
    """

    def __init__(self, *, verbose: bool) -> None:
        self.verbose = verbose
        self._task_ids: set[str] = set()
        self._outcome: StepOutcome | None = None

    async def close(self) -> None:
        """Release what the demo holds (clients, sessions); called once after the last step."""

    # -- printing ------------------------------------------------------------------------------

    def say(self, text: str = "") -> None:
        """Print a line in verbose mode only."""
        if self.verbose:
            print(text, flush=True)

    def abbreviate(self, value: str) -> None:
        """Show ``value`` (a long opaque token, e.g. a ``requestState``) as ``abcd…wxyz`` from now on."""
        if len(value) > SHORT_ID_OVER:
            self._task_ids.add(value)

    def remember(self, *values: Any) -> None:
        """Show these long ids (task ids, a session id) as ``abcd…wxyz`` from now on; values that
        are not strings are skipped."""
        for value in values:
            if isinstance(value, str):
                self.abbreviate(value)

    def _shorten(self, text: str) -> str:
        for task_id in sorted(self._task_ids, key=len, reverse=True):
            text = text.replace(task_id, short_id(task_id))
        return text

    def pretty(self, obj: Any, elide: Iterable[str] = ()) -> str:
        """Indented JSON of ``obj`` with ``elide`` paths (``a.*.b``) shown as ``{…}`` and task ids shortened."""
        shown = copy.deepcopy(obj)
        for path in elide:
            _elide(shown, path.split("."))
        text = json.dumps(shown, indent=2, ensure_ascii=False)
        text = text.replace(json.dumps(_ELIDED), "{…}")
        return self._shorten(text)

    # The parts of printing an exchange (a subclass's ``show``), verbose mode only.

    def print_request_line(self, verb: str, exchange: _Exchange, note: str = "") -> None:
        """``  → POST  <the MCP headers sent>   (note)``."""
        headers = "  ".join(f"{k}: {v}" for k, v in exchange.request_headers.items())
        print(f"  → {verb}  {self._shorten(headers)}" + (f"   ({note})" if note else ""))

    def print_status_line(self, exchange: _Exchange, kind: str = "") -> None:
        """``  ← HTTP <status>  <headers of interest but Content-Type><kind>   (<n> ms)``."""
        answer_headers = "".join(f"  {k}: {v}" for k, v in exchange.headers.items() if k != "Content-Type")
        print(f"  ← HTTP {exchange.status}{self._shorten(answer_headers)}{kind}   ({exchange.elapsed_s * 1000:.0f} ms)")

    def print_response(self, exchange: _Exchange, elide: Iterable[str] = ()) -> None:
        """The JSON-RPC response (``elide`` paths shown as ``{…}``), or the start of a body that
        is none, then a blank line."""
        if exchange.response is not None:
            print(_indent(self.pretty(exchange.response, elide)))
        else:
            print(_indent(exchange.body[:500] or "(empty body)"))
        print(flush=True)

    def show_polls(self, polls: Sequence[_Exchange], started: float, label: Callable[[Any], str]) -> None:
        """Say how a task was followed (``label`` of each ``tasks/get``, in order) and show the
        last ``tasks/get``."""
        sequence = " → ".join(label(p) for p in polls)
        self.say(f"  … tasks/get ×{len(polls)} in {time.monotonic() - started:.1f} s: {sequence}; the last one:")
        self.show(polls[-1])

    def show(self, exchange: Any) -> None:
        """Print one exchange (subclasses: the request, the answer and what came with it)."""
        raise NotImplementedError

    # -- checks --------------------------------------------------------------------------------

    def check(self, ok: bool, expectation: str, got: Any = _NOTHING) -> bool:
        """Record one check and print its line, ``✔ expectation`` or ``✘ expectation — got …``;
        quiet (not verbose), only a failed check's line is printed (docs/decisions.md)."""
        line = f"✔ {expectation}" if ok else f"✘ {expectation}" + ("" if got is _NOTHING else f" — got {_repr(got)}")
        line = self._shorten(line)
        assert self._outcome is not None, "check() outside a step"
        self._outcome.checks.append((ok, line))
        if self.verbose or not ok:
            print(f"  {line}", flush=True)
        return ok

    def expect(self, expectation: str, actual: Any, expected: Any) -> bool:
        """Check ``actual == expected`` (``_MISSING`` stands for an absent value)."""
        return self.check(actual == expected and actual is not _MISSING, expectation, actual)

    @staticmethod
    def dig(obj: Any, path: str | Sequence[str]) -> Any:
        """The value at ``path`` (dotted string, or a sequence of segments for keys that contain
        dots; list indexes as numbers), or the absent marker."""
        for part in (path.split(".") if isinstance(path, str) else path):
            if isinstance(obj, dict) and part in obj:
                obj = obj[part]
            elif isinstance(obj, list) and part.isdigit() and int(part) < len(obj):
                obj = obj[int(part)]
            else:
                return _MISSING
        return obj

    def expect_at(self, exchange: _Answer, path: str | Sequence[str], expected: Any, expectation: str | None = None) -> bool:
        """Check the response value at ``path`` (e.g. ``result.resultType``) equals ``expected``."""
        shown = path if isinstance(path, str) else ".".join(path)
        label = expectation or f"{shown} = {json.dumps(expected, ensure_ascii=False)}"
        return self.expect(label, self.dig(exchange.response, path), expected)

    def expect_error(self, exchange: _Answer, http: int, code: int, label: str = "") -> bool:
        """Check an error answer: HTTP status ``http`` and JSON-RPC ``error.code`` ``code``
        (``label`` prefixes the check lines)."""
        prefix = f"{label}: " if label else ""
        a = self.expect(f"{prefix}HTTP {http}", exchange.status, http)
        b = self.expect(f"{prefix}error.code = {code}", exchange.error_code, code)
        return a and b

    # -- running -------------------------------------------------------------------------------

    async def run_step(self, number: int, total: int, spec: Step) -> StepOutcome:
        """Run one step with a time limit; an exception or timeout is a failed check."""
        self._outcome = outcome = StepOutcome(number, spec.title)
        if self.verbose:
            print()
            print(f"━━ Step {number}/{total} · {spec.title} " + "━" * max(3, 72 - len(spec.title)))
            if spec.about:
                print(f"  {spec.about}")
            print(flush=True)
        else:
            print(f"Step {number}/{total} · {spec.title}", flush=True)
        try:
            await asyncio.wait_for(spec.run(self), STEP_TIMEOUT_S)
        except TimeoutError:
            self.check(False, f"step finished within {STEP_TIMEOUT_S:g} s")
        except Exception as exc:  # a broken answer must fail the step, not the demo
            self.check(False, "step ran to its end", f"{type(exc).__name__}: {exc}")
        if not outcome.checks:
            self.check(False, "step checked something")
        self._outcome = None
        return outcome


# ------------------------------------------------------------------------------------------------
# Running a walkthrough
# ------------------------------------------------------------------------------------------------


def summary(outcomes: list[StepOutcome], total: int) -> str:
    """``N/N steps passed``, or ``P/N steps passed; failed: 3 (title), …``."""
    passed = sum(1 for o in outcomes if o.passed)
    line = f"{passed}/{total} steps passed"
    failed = [f"{o.number} ({o.title})" for o in outcomes if not o.passed]
    not_run = total - len(outcomes)
    if failed:
        line += "; failed: " + ", ".join(failed)
    if not_run:
        line += f"; {not_run} not run"
    return line


class _Server(Protocol):
    url: str
    pid: int

    def stop(self) -> int | None: ...


STDIO_PREFIX = "stdio: "


class StdioServer:
    """A server for `run_demo` that the proxy itself runs on stdio: `url` is ``stdio: CMD``
    (the command, shell-quoted), and there is nothing to stop (the proxy stops it)."""

    def __init__(self, argv: Sequence[str]):
        self.url = STDIO_PREFIX + shlex.join(argv)
        self.pid = "started by the proxy"

    def stop(self) -> None:
        """Nothing to do: the proxy stops its stdio backend when it stops."""


async def _walk(
    server_url: str,
    verbose: bool,
    state_dir: str,
    outcomes: list[StepOutcome],
    steps: Sequence[Step],
    make_demo: Callable[[str], Narrator],
    face_note: str,
) -> None:
    from proxy.app import start
    from proxy.config import load

    upstream: dict[str, Any] = {"name": "main", "url": server_url}
    if server_url.startswith(STDIO_PREFIX):  # a stdio server: the proxy runs it (StdioServer)
        upstream = {"name": "main", "command": shlex.split(server_url[len(STDIO_PREFIX):])}
    settings = load(None, {"listen": "127.0.0.1:0", "upstream": [upstream], "state_dir": state_dir})
    running = await start(settings)
    try:
        if verbose:
            print(f"proxy:               {running.url}  ({face_note}; state in {state_dir})", flush=True)
        demo = make_demo(running.url)
        try:
            for number, spec in enumerate(steps, start=1):
                outcomes.append(await demo.run_step(number, len(steps), spec))
        finally:
            await demo.close()
    finally:
        await running.stop()


def run_demo(
    *,
    verbose: bool,
    steps: Sequence[Step],
    make_demo: Callable[[str], Narrator],
    start_server: Callable[[], _Server],
    banner: str,
    server_name: str,
    server_note: str,
    face_note: str,
    temp_prefix: str = "mcp-tasks-proxy-demo-",
) -> int:
    """Start the server, the proxy in front of it (ephemeral port, state in a temporary directory)
    and walk ``steps`` with ``make_demo(proxy_url)``; print the summary last.

    Returns 0 when every step saw exactly what it should, 1 otherwise. The server and the proxy
    are stopped at the end, also on failure or Ctrl-C. ``banner``, ``server_name`` (e.g.
    ``reference v1 server``), ``server_note`` and ``face_note`` only shape the verbose lines.
    """
    from .processes import ServerStartError

    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(errors="replace")
    started = time.monotonic()
    outcomes: list[StepOutcome] = []
    total = len(steps)
    server = None
    try:
        if verbose:
            print(banner)
            print(f"starting the {server_name} ({server_note}; its environment is built on first use) …", flush=True)
        try:
            server = start_server()
        except (ServerStartError, RuntimeError, OSError) as exc:
            print(f"✘ the {server_name} did not start: {exc}", flush=True)
            print(summary(outcomes, total), flush=True)
            return 1
        if verbose:
            print(f"{server_name}: {server.url}  (pid {server.pid})", flush=True)
        with tempfile.TemporaryDirectory(prefix=temp_prefix) as state_dir:
            try:
                asyncio.run(_walk(server.url, verbose, state_dir, outcomes, steps, make_demo, face_note))
            except KeyboardInterrupt:
                raise
            except Exception as exc:  # the proxy did not start, or the demo itself broke
                print(f"✘ the demo stopped: {type(exc).__name__}: {exc}", flush=True)
    except KeyboardInterrupt:
        print("\ninterrupted", flush=True)
        print(summary(outcomes, total), flush=True)
        return 1
    finally:
        if server is not None:
            server.stop()
    if verbose:
        print(f"\n(finished in {time.monotonic() - started:.1f} s)")
    print(summary(outcomes, total), flush=True)
    return 0 if len(outcomes) == total and all(o.passed for o in outcomes) else 1
