"""The request path's shape, read from the source with `ast` (docs/architecture.md "The request path").

* The request path's layers import downwards only: entry → routing → fleet → pairings → faces →
  state → upstream (`proxy.observe` and `translators` sit beside and below them).
* Functions on the request path take few parameters: the call and the route, not their pieces.
  Every function defined in `proxy/entry.py`, `proxy/routing.py`, `proxy/pairings/`,
  `proxy/faces/` and `proxy/upstream/` takes at most five besides `self`/`cls` (`*args` and
  `**kwargs` count one each). Records (dataclasses, named tuples) are values, not signatures.
* Lower layers report, the observer counts: no module under `proxy/pairings/`, `proxy/faces/` or
  `proxy/upstream/` imports the metrics, the status recorder, the lasting figures, the failure
  counts or the observer itself.
* A call's outcome is counted in one module: `proxy/observe/outcome.py` is the only caller of
  the request and failure counters (`metrics.request`, `metrics.failure`, `metrics.repaired`,
  `recorder.request`).
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.structure.test_structure import REPOSITORY, _modules, import_graph

MAX_PARAMETERS = 5
REQUEST_PATH = ("proxy/entry.py", "proxy/routing.py", "proxy/pairings", "proxy/faces", "proxy/upstream")
REPORTING = ("proxy.pairings", "proxy.faces", "proxy.upstream")
COUNTING = frozenset(
    {
        "proxy.metrics",
        "proxy.observe.recorder",
        "proxy.observe.lasting",
        "proxy.observe.failures",
        "proxy.observe.outcome",
        "proxy.observe.held",
        "proxy.observe.figures",
        "proxy.observe.metric_totals",
    }
)
"""What counts (Prometheus metrics, the status page's recorder and its lasting figures, failures,
held-task counters) and the observer that feeds them."""
COUNTERS = frozenset({("metrics", "request"), ("metrics", "failure"), ("metrics", "repaired"), ("recorder", "request")})
"""(the object's last name, the method) of each request and failure counter."""
OBSERVER = "proxy/observe/outcome.py"
LAYERS = ("proxy.entry", "proxy.routing", "proxy.fleet", "proxy.pairings", "proxy.faces", "proxy.state", "proxy.upstream")
"""The request path's layers, highest first."""


def _layer(module: str) -> int | None:
    for depth, layer in enumerate(LAYERS):
        if module == layer or module.startswith(layer + "."):
            return depth
    return None


def test_the_request_path_s_layers_import_downwards_only() -> None:
    upwards = []
    for importer, imports in import_graph(_modules()).items():
        depth = _layer(importer)
        if depth is None:
            continue
        for imported in imports:
            target = _layer(imported)
            if target is not None and target < depth:
                upwards.append(f"{importer} imports {imported}")
    assert sorted(upwards) == []


def _request_path_files() -> list[Path]:
    files: list[Path] = []
    for entry in REQUEST_PATH:
        path = REPOSITORY / entry
        files.extend([path] if path.is_file() else sorted(path.rglob("*.py")))
    return files


def _parameters(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    arguments = node.args
    names = [a.arg for a in (*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs)]
    if names and names[0] in ("self", "cls"):
        names = names[1:]
    return len(names) + (arguments.vararg is not None) + (arguments.kwarg is not None)


def test_no_function_on_the_request_path_takes_more_than_five_parameters() -> None:
    wide = []
    for path in _request_path_files():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and _parameters(node) > MAX_PARAMETERS:
                wide.append(f"{path.relative_to(REPOSITORY)}:{node.lineno} {node.name} takes {_parameters(node)}")
    assert wide == []


def test_the_request_path_has_functions_to_check() -> None:
    """The check above reads real files: the request path's modules are where it looks."""
    assert [entry for entry in REQUEST_PATH if not (REPOSITORY / entry).exists()] == []
    assert len(_request_path_files()) > 40


def test_pairings_faces_and_upstream_import_nothing_that_counts() -> None:
    graph = import_graph(_modules())
    found = sorted(
        f"{importer} imports {imported}"
        for importer, imports in graph.items()
        if importer.startswith(REPORTING)
        for imported in imports
        if imported in COUNTING
    )
    assert found == []


def _counter_calls(path: Path) -> list[str]:
    calls = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            owner = node.func.value
            owner_name = owner.attr if isinstance(owner, ast.Attribute) else owner.id if isinstance(owner, ast.Name) else None
            if (owner_name, node.func.attr) in COUNTERS:
                calls.append(f"{path.relative_to(REPOSITORY)}:{node.lineno} {owner_name}.{node.func.attr}")
    return calls


def test_outcomes_are_counted_in_one_module() -> None:
    calls = [call for path in sorted((REPOSITORY / "proxy").rglob("*.py")) for call in _counter_calls(path)]
    assert sorted({call.split(":")[0] for call in calls}) == [OBSERVER]
    assert len(calls) == 4
