"""The import graph of meltwater's own modules: layers only import downward, and no two
modules import each other, directly or through others (lazy imports inside functions
count: a cycle hidden in a function is still a cycle).

Layers, from the top: cli > service > sinks > stream.spark > stream.watch > stream.engine
> planner. A module may import from its own layer or any layer below it; the top-level
`meltwater.stream` package is the Python API and may import `stream.engine` and, lazily,
`stream.spark`. `meltwater.stream.errors`, the stream layer's one errors module, sits with
the engine so that all three stream subpackages can raise its errors.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = {"planner": "planner", "stream": "stream", "sinks": "sinks", "service": "service",
           "cli": "cli"}
# Higher number = higher layer.
LAYERS = {"meltwater.planner": 0, "meltwater.stream.errors": 1, "meltwater.stream.engine": 1,
          "meltwater.stream.watch": 2, "meltwater.stream.spark": 3, "meltwater.stream": 3,
          "meltwater.sinks": 4,
          "meltwater.service": 5, "meltwater.cli": 6}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(["meltwater", *parts])


def _modules() -> dict[str, Path]:
    found = {}
    for folder in FOLDERS.values():
        for path in sorted((ROOT / folder).rglob("*.py")):
            found[_module_name(path)] = path
    return found


MODULES = _modules()


def _imports(path: Path) -> set[str]:
    """The meltwater modules a file imports, at any depth of its code."""
    imported: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # `from meltwater.stream.engine import formats` imports a module, not a name
            names = [f"{node.module}.{alias.name}" for alias in node.names] + [node.module]
        else:
            continue
        imported.update(name for name in names if name in MODULES)
    return imported


GRAPH = {name: _imports(path) - {name} for name, path in MODULES.items()}


def _layer(module: str) -> tuple[str, int]:
    best = max((prefix for prefix in LAYERS if module == prefix or module.startswith(prefix + ".")),
               key=len)
    return best, LAYERS[best]


def test_the_graph_is_not_empty():
    """Guards the other two tests against a graph that finds nothing (a wrong ROOT)."""
    assert len(MODULES) > 80
    assert "meltwater.stream.engine.reader" in GRAPH["meltwater.stream.engine.reconstruction"]


@pytest.mark.parametrize("module", sorted(GRAPH))
def test_no_upward_import(module):
    own, level = _layer(module)
    upward = sorted(target for target in GRAPH[module]
                    if _layer(target)[1] > level
                    and not (own == "meltwater.stream" and module == "meltwater.stream"))
    assert not upward, f"{module} ({own}) imports a higher layer: {upward}"


def test_no_cycles():
    """Tarjan's strongly connected components; any component of two or more is a cycle."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    counter = 0

    def visit(node: str) -> None:
        nonlocal counter
        index[node] = low[node] = counter
        counter += 1
        stack.append(node)
        on_stack.add(node)
        for target in sorted(GRAPH[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in sorted(GRAPH):
        if node not in index:
            visit(node)
    assert not cycles, f"import cycles: {cycles}"
