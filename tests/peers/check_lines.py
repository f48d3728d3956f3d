"""The JSON-line check harness the peer client check scripts share.

Imported by plain name by ``fastmcp4_client_checks.py`` and ``mcp1_client_checks.py``, which run as
scripts in their own peer environments (``proxy/demo/peers.py``); it needs only the stdlib.

A check is a coroutine function of the endpoint URL that returns ``(True, detail)`` or raises
:class:`CheckFailed` (through :func:`expect`). :func:`run` runs the selected checks in order, each
bounded in time, and prints one JSON line per check on stdout,
``{"check": name, "ok": bool, "detail": ...}``; :func:`parse_args` reads the command line every
script takes (``--url``, ``--check NAME`` repeatable, ``--timeout``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
import traceback
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

Detail = dict[str, Any]
Check = Callable[[str], Awaitable[tuple[bool, Detail]]]
#: Describes an exception for a check's detail (``type``, ``message``, ...).
ExcDetail = Callable[[BaseException], Detail]


class CheckFailed(Exception):
    """A check's expectation did not hold; ``detail`` says what was seen."""

    def __init__(self, message: str, detail: Detail | None = None) -> None:
        super().__init__(message)
        self.detail = detail or {}


def expect(condition: bool, message: str, detail: Detail) -> None:
    """Fail the check with ``message`` and ``detail`` unless ``condition`` holds."""
    if not condition:
        raise CheckFailed(message, detail)


def texts(content: Any) -> list[str]:
    """The texts of the ``text`` blocks of a result's ``content``."""
    return [block.text for block in content or [] if getattr(block, "type", None) == "text"]


def form_answer(schema: Mapping[str, Any], text: str) -> dict[str, Any]:
    """Fill in a form question: a boolean property ``True``, a number ``1``, anything else ``text``."""
    answer: dict[str, Any] = {}
    for key, prop in (schema.get("properties") or {}).items():
        kind = prop.get("type") if isinstance(prop, dict) else None
        if kind == "boolean":
            answer[key] = True
        elif kind in ("number", "integer"):
            answer[key] = 1
        else:
            answer[key] = text
    return answer


# --------------------------------------------------------------------------------------------
# Runner
# --------------------------------------------------------------------------------------------


def _first_leaf(exc: BaseException) -> BaseException:
    """The first leaf of an exception group (anyio task groups wrap the session's errors)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


async def run_check(
    name: str,
    check: Check,
    url: str,
    timeout_s: float,
    exc_detail: ExcDetail,
    *,
    unwrap_groups: bool = False,
    traceback_by_line: bool = True,
) -> dict[str, Any]:
    """Run one check; never raises. Returns the JSON line's object.

    ``unwrap_groups``: judge the first leaf of an exception group instead of the group.
    ``traceback_by_line``: the detail's ``traceback`` lists lines; otherwise the chunks of
    ``traceback.format_exception`` (a frame's location and source line together).
    """
    try:
        ok, detail = await asyncio.wait_for(check(url), timeout_s)
    except TimeoutError as exc:
        ok, detail = False, {"failure": f"timed out after {timeout_s:g} s", **exc_detail(exc)}
    except Exception as exc:
        leaf = _first_leaf(exc) if unwrap_groups else exc
        if isinstance(leaf, CheckFailed):
            ok, detail = False, {"failure": str(leaf), **leaf.detail}
        else:  # the client raised something unexpected: report it
            detail = {"failure": f"raised {type(leaf).__name__}", **exc_detail(leaf)}
            chunks = traceback.format_exception(leaf)
            detail["traceback"] = ("".join(chunks).splitlines() if traceback_by_line else chunks)[-12:]
            ok = False
    return {"check": name, "ok": ok, "detail": detail}


async def run(
    checks: Mapping[str, Check],
    url: str,
    names: Sequence[str],
    timeout_s: float,
    exc_detail: ExcDetail,
    **options: bool,
) -> bool:
    """Run ``names`` in order, print each one's JSON line; ``True`` iff every check is ok.
    ``options`` go to :func:`run_check`."""
    all_ok = True
    for name in names:
        line = await run_check(name, checks[name], url, timeout_s, exc_detail, **options)
        all_ok = all_ok and line["ok"]
        print(json.dumps(line, default=str), flush=True)
    return all_ok


def parse_args(
    doc: str | None, checks: Mapping[str, Check], choices: Sequence[str], default_timeout_s: float, argv: list[str] | None
) -> tuple[str, list[str], float]:
    """``(url, names, timeout_s)`` from the command line; ``names`` are the selected checks in
    the order of ``checks`` (all by default). ``choices`` is how ``--check`` lists them."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0] if doc else None)
    parser.add_argument("--url", required=True, help="the MCP endpoint, e.g. http://127.0.0.1:8000/mcp")
    parser.add_argument(
        "--check",
        action="append",
        choices=choices,
        help="run only this check (repeatable); default: all, in order",
    )
    parser.add_argument("--timeout", type=float, default=default_timeout_s, help="bound for one check, seconds")
    args = parser.parse_args(argv)
    names = [name for name in checks if args.check is None or name in args.check]
    return args.url, names, args.timeout


def mcp1_main(
    doc: str | None, checks: Mapping[str, Check], default_timeout_s: float, exc_detail: ExcDetail, argv: list[str] | None
) -> int:
    """The entry point of a check script that drives the ``mcp`` 1.30 client: parse the command
    line, run the selected checks in order, exit status 0 iff every one is ok. anyio task groups
    wrap the session's errors, so the first leaf of a group is judged."""
    url, names, timeout_s = parse_args(doc, checks, list(checks), default_timeout_s, argv)
    logging.basicConfig(level=logging.ERROR, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")
    run_all = run(checks, url, names, timeout_s, exc_detail, unwrap_groups=True, traceback_by_line=False)
    return 0 if asyncio.run(run_all) else 1
