"""The shape of the code, checked from its source with `ast` (docs/development.md, "Rules of shape").

* The imports among the modules of `proxy/` and `translators/` form no cycle. Every import counts:
  module-level, inside functions, and under `if TYPE_CHECKING:` (a type-only back-reference is
  still a dependency that points the wrong way).
* `translators/` is sans-IO: it imports nothing of `proxy`, no network, event loop, file system,
  process or thread module, no clock and no source of randomness, and calls no `now()`/`today()`.
* No source module of `proxy/` or `translators/` is over 500 lines.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path


def _repository() -> Path:
    """The checkout this test file lives in: the nearest folder above it holding pyproject.toml."""
    for folder in Path(__file__).resolve().parents:
        if (folder / "pyproject.toml").is_file():
            return folder
    raise AssertionError(f"no pyproject.toml above {__file__}")


REPOSITORY = _repository()
PACKAGES = ("proxy", "translators")
MAX_LINES = 500

#: Top-level modules `translators/` must not import, each with the reason.
FORBIDDEN_IN_TRANSLATORS: dict[str, str] = {
    "proxy": "translators/ is below proxy/: proxy calls translators, never the other way",
    "aiohttp": "network I/O",
    "asyncio": "event loop",
    "anyio": "event loop",
    "uvloop": "event loop",
    "socket": "network I/O",
    "ssl": "network I/O",
    "select": "network I/O",
    "selectors": "network I/O",
    "http": "network I/O",
    "urllib": "network I/O",
    "subprocess": "processes",
    "multiprocessing": "processes",
    "threading": "threads",
    "concurrent": "threads and processes",
    "signal": "process signals",
    "os": "environment, files and os.urandom",
    "pathlib": "file system",
    "shutil": "file system",
    "tempfile": "file system",
    "sqlite3": "storage",
    "logging": "side effects belong to proxy/, which logs what translators return",
    "prometheus_client": "metrics are proxy/'s",
    "importlib": "dynamic imports hide dependencies from this test",
    "time": "clock",
    "random": "randomness",
    "secrets": "randomness",
    "uuid": "clock and randomness (uuid1, uuid4)",
    "cachetools": "TTL caches read the clock",
}

#: Calls that read a clock or draw randomness whatever module they come from
#: (`datetime.now()`, `date.today()`, `AESSIV.generate_key()`, ...).
FORBIDDEN_CALLS_IN_TRANSLATORS = frozenset({"now", "utcnow", "today", "generate_key", "urandom"})


@dataclass(frozen=True)
class Module:
    name: str  # dotted, e.g. "proxy.faces.modern"; a package is named by its __init__.py
    path: Path
    is_package: bool

    @property
    def package(self) -> str:
        """The package relative imports in this module start from."""
        return self.name if self.is_package else self.name.rpartition(".")[0]

    def tree(self) -> ast.Module:
        return ast.parse(self.path.read_text(encoding="utf-8"), filename=str(self.path))


def _modules() -> dict[str, Module]:
    found: dict[str, Module] = {}
    for top in PACKAGES:
        for path in sorted((REPOSITORY / top).rglob("*.py")):
            parts = path.relative_to(REPOSITORY).with_suffix("").parts
            is_package = parts[-1] == "__init__"
            name = ".".join(parts[:-1] if is_package else parts)
            found[name] = Module(name, path, is_package)
    return found


def _imported_names(module: Module) -> Iterator[tuple[int, str]]:
    """(line, absolute dotted name) of every import in `module`, anywhere in it.

    `from X import a` yields `X.a` (which is a module or a name in `X`); relative imports are
    resolved against the module's package."""
    for node in ast.walk(module.tree()):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.package.split(".")
                base = base[: len(base) - (node.level - 1)]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            for alias in node.names:
                yield node.lineno, f"{prefix}.{alias.name}" if alias.name != "*" else prefix


def _target(name: str, importer: Module, modules: dict[str, Module]) -> str | None:
    """The module of ours that importing `name` loads: the longest dotted prefix that is one of
    ours. A bare name that is a sibling file counts as that sibling (scripts under proxy/demo/servers/ run
    inside peer environments with their own folder on `sys.path`)."""
    parts = name.split(".")
    if parts[0] not in PACKAGES:
        sibling = f"{importer.package}.{parts[0]}"
        if sibling not in modules or sibling == importer.name:
            return None
        parts = sibling.split(".") + parts[1:]
    for end in range(len(parts), 0, -1):
        candidate = ".".join(parts[:end])
        if candidate in modules:
            return candidate
    return None


def import_graph(modules: dict[str, Module]) -> dict[str, dict[str, int]]:
    """importer → {imported module: line of the first such import}, among our modules only."""
    graph: dict[str, dict[str, int]] = {name: {} for name in modules}
    for module in modules.values():
        for line, name in _imported_names(module):
            target = _target(name, module, modules)
            if target is not None and target != module.name:
                graph[module.name].setdefault(target, line)
    return graph


def _strongly_connected(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """Tarjan's algorithm, iteratively; components of more than one module, each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(sorted(component))
    return components


def _shortest_cycle(graph: dict[str, dict[str, int]], component: list[str]) -> list[str]:
    """The shortest cycle through the first module of `component`, as [a, b, ..., a]."""
    start, members = component[0], set(component)
    previous: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for child in sorted(graph[node]):
                if child not in members:
                    continue
                if child == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(previous[path[-1]])
                    return [*reversed(path), start]
                if child not in previous:
                    previous[child] = node
                    following.append(child)
        frontier = following
    raise AssertionError(f"no cycle through {start} in {component}")


def _describe(graph: dict[str, dict[str, int]], modules: dict[str, Module], cycle: list[str]) -> str:
    return "\n".join(f"  {a} ({modules[a].path.relative_to(REPOSITORY)}:{graph[a][b]}) imports {b}" for a, b in pairwise(cycle))


# --- the helpers themselves, on made-up graphs --------------------------------------------------


def test_cycle_finder_reports_each_cycle_once_and_shortest() -> None:
    graph = {"a": {"b": 1}, "b": {"c": 2, "a": 3}, "c": {"a": 4}, "d": {"a": 5}, "e": {"f": 6}, "f": {}}
    components = _strongly_connected(graph)
    assert components == [["a", "b", "c"]]
    assert _shortest_cycle(graph, components[0]) == ["a", "b", "a"]


def test_cycle_finder_accepts_a_dag() -> None:
    assert _strongly_connected({"a": {"b": 1, "c": 1}, "b": {"c": 1}, "c": {}}) == []


def test_relative_and_function_level_imports_are_resolved(tmp_path: Path) -> None:
    source = (
        "from __future__ import annotations\n"
        "from typing import TYPE_CHECKING\n"
        "import json\n"
        "from . import jsonrpc\n"
        "from ..store import TaskStateStore\n"
        "from check_lines import expect\n"
        "if TYPE_CHECKING:\n"
        "    from ..fleet import Fleet\n"
        "def late():\n"
        "    import translators.errors\n"
        "    from proxy.faces import session\n"
    )
    (tmp_path / "modern.py").write_text(source, encoding="utf-8")
    importer = Module("proxy.faces.modern", tmp_path / "modern.py", is_package=False)
    ours = {
        name: Module(name, tmp_path / "x.py", is_package=name in ("proxy", "proxy.faces", "translators"))
        for name in (
            "proxy",
            "proxy.faces",
            "proxy.faces.jsonrpc",
            "proxy.faces.check_lines",
            "proxy.faces.session",
            "proxy.fleet",
            "proxy.faces.modern",
            "proxy.store",
            "translators",
            "translators.errors",
        )
    }
    targets = sorted({_target(name, importer, ours) for _, name in _imported_names(importer)} - {None})
    assert targets == [
        "proxy.faces.check_lines",
        "proxy.faces.jsonrpc",
        "proxy.faces.session",
        "proxy.fleet",
        "proxy.store",
        "translators.errors",
    ]


# --- the rules, on the code as it is ----------------------------------------------------------


def test_imports_of_proxy_and_translators_form_no_cycle() -> None:
    modules = _modules()
    graph = import_graph(modules)
    components = _strongly_connected(graph)
    cycles = [_shortest_cycle(graph, component) for component in components]
    report = "\n".join(
        f"cycle among {len(component)} modules, e.g.:\n{_describe(graph, modules, cycle)}\n"
        "  all imports among them: "
        + "; ".join(f"{a} → {', '.join(b for b in sorted(graph[a]) if b in component)}" for a in component)
        for component, cycle in zip(components, cycles, strict=True)
    )
    assert cycles == [], "imports must form a DAG (entry → routing → pairings → faces/state/upstream → translators):\n" + report


def test_translators_import_no_io_clock_or_randomness() -> None:
    offences = []
    for module in _modules().values():
        if not module.name.startswith("translators"):
            continue
        where = module.path.relative_to(REPOSITORY)
        for line, name in _imported_names(module):
            top = name.split(".")[0]
            if top in FORBIDDEN_IN_TRANSLATORS:
                offences.append(f"{where}:{line} imports {name} ({FORBIDDEN_IN_TRANSLATORS[top]})")
        for node in ast.walk(module.tree()):
            if isinstance(node, ast.Call):
                called = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
                if called in FORBIDDEN_CALLS_IN_TRANSLATORS:
                    offences.append(f"{where}:{node.lineno} calls {called}() (a clock or randomness)")
    assert offences == [], "translators/ is sans-IO: pure functions of their arguments:\n" + "\n".join(offences)


def test_translators_are_found() -> None:
    """Guards the two tests above against passing on an empty or misplaced tree."""
    modules = _modules()
    assert {"translators", "translators.jsonrpc", "translators.sealing", "proxy", "proxy.app"} <= set(modules)
    assert "translators.errors" in import_graph(modules)["translators.jsonrpc"]


def test_no_source_module_over_500_lines() -> None:
    offenders = []
    for module in _modules().values():
        lines = len(module.path.read_text(encoding="utf-8").splitlines())
        if lines > MAX_LINES:
            offenders.append(f"{module.path.relative_to(REPOSITORY)}: {lines} lines")
    assert sorted(offenders) == [], f"split these modules (at most {MAX_LINES} lines each):\n" + "\n".join(sorted(offenders))


def _assertions_in_finally(source: str) -> list[int]:
    """The lines of `assert` statements inside `finally` blocks of `source`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Try | ast.TryStar):
            found += [sub.lineno for stmt in node.finalbody for sub in ast.walk(stmt) if isinstance(sub, ast.Assert)]
    return sorted(found)


def test_the_finally_finder_sees_an_assertion_there() -> None:
    source = "try:\n    pass\nfinally:\n    x = 1\n    if x:\n        assert x == 1\nassert True\n"
    assert _assertions_in_finally(source) == [6]


def test_no_test_asserts_in_a_finally_block() -> None:
    """An assertion in `finally` replaces the failure that brought the test there: the stop's status
    is asserted after the block instead (issue 46)."""
    offenders = [
        f"{path.relative_to(REPOSITORY)}:{line}"
        for path in sorted((REPOSITORY / "tests").rglob("*.py"))
        for line in _assertions_in_finally(path.read_text(encoding="utf-8"))
    ]
    assert offenders == []
