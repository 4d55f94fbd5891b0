"""The import graph of meltwater's own modules: layers only import downward, and no two
modules import each other, directly or through others (lazy imports inside functions
count: a cycle hidden in a function is still a cycle).

Layers, from the top: cli > service > sinks > stream.spark > stream.watch > stream.engine >
planner. A module may import from its own layer or any layer below it; the top-level
`meltwater.stream` package is the Python API and may import `stream.engine` and, lazily,
`stream.spark`. `meltwater.stream.errors`, the stream layer's one errors module, sits with
the engine so that all three stream subpackages can raise its errors. `meltwater.output`,
the CLI's writers (whose Debezium envelope the Kafka sink borrows), sits on the engine
beside stream.watch, and the read path (planner, stream.engine, stream.watch, stream.spark)
never imports it.

Inside the two largest layers, rooms (`ROOMS`): the kernel's and the engine's subpackages,
each importing only the rooms below it; the few modules at a package's root serve every room
and import none.

And one Spark adapter: only `meltwater.stream.spark` imports pyspark or py4j, or reaches
into Spark's JVM through pyspark's private members (`_jvm`, `_gateway`, `_jsq`...).

And nothing outside tests/ uses tests/: the product, deploy/ (`make demo`), bench/ and
testbed/ (what the tests, the demo and the benchmarks share) import no module of the test
suite and put no path into tests/ on sys.path (or anywhere else).
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = {"planner": "planner", "stream": "stream", "output": "output", "sinks": "sinks",
           "service": "service", "cli": "cli"}
# Higher number = higher layer.
LAYERS = {"meltwater.planner": 0, "meltwater.stream.errors": 1, "meltwater.stream.engine": 1,
          "meltwater.stream.watch": 2, "meltwater.output": 2,
          "meltwater.stream.spark": 3, "meltwater.stream": 3,
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


@functools.cache
def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), str(path))


def _imports(path: Path) -> set[str]:
    """The meltwater modules a file imports, at any depth of its code."""
    imported: set[str] = set()
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # `from meltwater.stream.engine.decode import formats` imports a module, not a name
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
    assert ("meltwater.stream.engine.scans.reader"
            in GRAPH["meltwater.stream.engine.changes.task_rows"])


@pytest.mark.parametrize("module", sorted(GRAPH))
def test_no_upward_import(module):
    own, level = _layer(module)
    upward = sorted(target for target in GRAPH[module]
                    if _layer(target)[1] > level
                    and not (own == "meltwater.stream" and module == "meltwater.stream"))
    assert not upward, f"{module} ({own}) imports a higher layer: {upward}"


# -- rooms inside the kernel and the engine -------------------------------------------------

# Each package's rooms from the bottom, and the modules at its root, below every room.
ROOMS = {
    "meltwater.planner": ("spec", "expressions", "table", "scans", "changes"),
    "meltwater.stream.engine": ("decode", "keys", "deletes", "scans", "changes"),
}
ROOT_MODULES = {
    "meltwater.planner": {"errors", "str_enum"},
    "meltwater.stream.engine": {"local_cache"},
}


def _floor(module: str) -> tuple[str, int] | None:
    """(package, floor) of a module inside a package with rooms: 0 for the package's root
    modules, 1 + the room's index for a room's modules; None outside such packages."""
    for package, rooms in ROOMS.items():
        if not module.startswith(package + "."):
            continue
        first = module[len(package) + 1:].split(".")[0]
        if first in rooms:
            return package, 1 + rooms.index(first)
        assert first in ROOT_MODULES[package], (
            f"{module} is in no room of {package}: put it in one of {rooms}")
        return package, 0
    return None


def test_the_rooms_hold_every_module():
    """Guards the next test: every module of a package with rooms has a floor, each room
    has modules, and the room order is what the packages' docstrings say."""
    for package, rooms in ROOMS.items():
        inside = [m for m in MODULES if m.startswith(package + ".")]
        assert all(_floor(m) is not None for m in inside)
        for room in rooms:
            assert any(m.startswith(f"{package}.{room}.") for m in inside), room
        doc = ast.get_docstring(_tree(MODULES[package])) or ""
        named = [doc.index(f"`{room}/`") for room in rooms]
        assert named == sorted(named), f"{package}'s docstring lists its rooms out of order"


@pytest.mark.parametrize("module", sorted(m for m in GRAPH if _floor(m) is not None))
def test_rooms_import_only_rooms_below_them(module):
    package, floor = _floor(module)
    upward = sorted(target for target in GRAPH[module]
                    if (_floor(target) or ("", 0))[0] == package and _floor(target)[1] > floor)
    assert not upward, f"{module} imports a room above its own: {upward}"


@pytest.mark.parametrize("room", sorted(f"{package}.{room}" for package, rooms in ROOMS.items()
                                        for room in rooms))
def test_each_room_names_its_modules(room):
    """A room's `__init__` says what it offers: every module of the room is named in its
    docstring, and no module that is not there."""
    doc = ast.get_docstring(_tree(MODULES[room])) or ""
    modules = {m.rsplit(".", 1)[1] for m in MODULES if m.startswith(room + ".")}
    named = set(re.findall(r"^\s*- `(\w+)`", doc, re.M)) | set(
        re.findall(r"^\s*- `\w+`, `(\w+)`", doc, re.M))
    assert modules <= named, f"{room}'s docstring does not name {sorted(modules - named)}"
    assert named <= modules, f"{room}'s docstring names modules it lacks: {sorted(named - modules)}"


# -- the engine reads, the CLI writes -------------------------------------------------------

READ_PATH = ("meltwater.planner", "meltwater.stream.engine", "meltwater.stream.errors",
             "meltwater.stream.watch", "meltwater.stream.spark")


def _in(module: str, packages: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


@pytest.mark.parametrize("module", sorted(m for m in GRAPH if _in(m, READ_PATH)))
def test_the_read_path_does_not_import_the_writers(module):
    writers = sorted(t for t in GRAPH[module] if _in(t, ("meltwater.output",)))
    assert not writers, f"{module} is on the read path and imports the CLI's writers: {writers}"


# -- one Spark adapter -----------------------------------------------------------------------

SPARK_ADAPTER = ("meltwater.stream.spark",)
SPARK_PACKAGES = {"pyspark", "py4j"}
# pyspark's private handles on the JVM (py4j objects): SparkContext's gateway and JVM, a
# context's, session's, query's, frame's... Java counterpart.
JVM_MEMBERS = {"_gateway", "_jvm", "_jsc", "_jconf", "_jsparkSession", "_jsqlContext",
               "_jcatalog", "_jsq", "_jdf", "_jrdd", "_jreader", "_jwrite", "_jwriter"}


def spark_references(tree: ast.AST) -> list[str]:
    """Where `source` uses pyspark or Spark's JVM itself: imports of pyspark or py4j at any
    depth (a lazy import in a function, under TYPE_CHECKING, through importlib), and
    pyspark's private members that reach into the JVM (`JVM_MEMBERS`)."""
    found = []
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        elif (isinstance(node, ast.Call) and node.args
              and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)
              and ast.unparse(node.func) in ("importlib.import_module", "import_module",
                                             "__import__")):
            names = [node.args[0].value]
        elif isinstance(node, ast.Attribute) and node.attr in JVM_MEMBERS:
            found.append(f"line {node.lineno}: .{node.attr}")
        found += [f"line {node.lineno}: imports {name}" for name in names
                  if name.split(".")[0] in SPARK_PACKAGES]
    return found


def test_the_spark_check_catches_what_the_service_did():
    """Guards the next test: the service's old gateway start and query stop are found."""
    old_service = ("def start(conf):\n"
                   "    from pyspark.java_gateway import launch_gateway\n"
                   "    SparkContext._jvm = launch_gateway(conf).jvm\n"
                   "def logs(query):\n"
                   "    return query._jsq.streamingQuery().offsetLog()\n"
                   "if TYPE_CHECKING:\n"
                   "    import py4j.protocol\n")
    assert sorted(spark_references(ast.parse(old_service))) == [
        "line 2: imports pyspark.java_gateway", "line 3: ._jvm", "line 5: ._jsq",
        "line 7: imports py4j.protocol"]
    assert spark_references(ast.parse("import pysparkling\nx._json = 1\n")) == []


@pytest.mark.parametrize("module", sorted(m for m in MODULES if not _in(m, SPARK_ADAPTER)))
def test_only_the_spark_adapter_touches_pyspark(module):
    found = spark_references(_tree(MODULES[module]))
    assert not found, (f"{module} uses pyspark or Spark's JVM; that belongs in "
                       f"meltwater.stream.spark: {found}")


def test_the_spark_adapter_does_touch_pyspark():
    """Guards the test above against an adapter that moved (the check would then pass on
    everything)."""
    assert any(spark_references(_tree(MODULES[m])) for m in MODULES
               if _in(m, SPARK_ADAPTER))


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


MAX_MODULE_LINES = 450  # a module past this holds more than one concern: split it


def test_no_product_module_is_over_the_size_limit():
    """Small modules, one concern each (README, "Layout"): a module growing past the limit
    is split by concern, not trimmed."""
    sizes = {name: len(path.read_text().splitlines()) for name, path in MODULES.items()}
    over = sorted(f"{name} ({lines} lines)" for name, lines in sizes.items()
                  if lines > MAX_MODULE_LINES)
    assert not over, f"modules over {MAX_MODULE_LINES} lines: {over}"


# -- nothing outside tests/ uses tests/ ------------------------------------------------------
# `make demo` once imported the tests' service harness and broke when a test refactor moved
# a function. What the demo and the benchmarks share with the tests lives in testbed/.

TESTS = ROOT / "tests"
OUTSIDE_TESTS = (*FOLDERS.values(), "deploy", "bench", "testbed")
# A path naming the tests folder: "tests", "../tests/x", f"{ROOT}/tests"; not "my_tests".
TESTS_PATH = re.compile(r"(^|/)tests(/|$)")


def _top_level_names(folder: Path) -> set[str]:
    """The modules and packages `folder` provides when it is on sys.path."""
    return ({p.stem for p in folder.glob("*.py")}
            | {p.name for p in folder.iterdir() if p.is_dir() and p.name != "__pycache__"})


TEST_NAMES = _top_level_names(TESTS)


def _docstrings(tree: ast.AST) -> set[int]:
    """The ids of the docstring nodes (prose may name a test file)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def references_to_tests(source: str, own_names: set[str]) -> list[str]:
    """What in `source` reaches into tests/: imports of a module only tests/ provides (at any
    depth, `importlib.import_module("x")` and `__import__` included) and string constants
    that are a path into tests/ (a sys.path entry, a script to run, PYTHONPATH). `own_names`:
    the modules the file's own folder provides, which its imports mean first."""
    tree = ast.parse(source)
    docstrings = _docstrings(tree)
    found = []
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        elif (isinstance(node, ast.Call) and node.args
              and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)
              and ast.unparse(node.func) in ("importlib.import_module", "import_module",
                                             "__import__")):
            names = [node.args[0].value]
        elif (isinstance(node, ast.Constant) and isinstance(node.value, str)
              and id(node) not in docstrings and TESTS_PATH.search(node.value)):
            found.append(f"line {node.lineno}: path into tests/ {node.value!r}")
        for name in names:
            top = name.split(".")[0]
            if top in TEST_NAMES and top not in own_names:
                found.append(f"line {node.lineno}: imports {name} (tests/{top})")
    return found


def _outside_files() -> list[Path]:
    return sorted(p for folder in OUTSIDE_TESTS for p in (ROOT / folder).rglob("*.py"))


def test_the_tests_references_check_catches_what_broke_the_demo():
    """Guards the next test: the old demo's lines are found (it put tests/ on sys.path and
    imported the service tests' harness), a docstring naming a test file is not."""
    old_demo = ('"""Checks like tests/live/client.py."""\n'
                'sys.path.insert(0, str(ROOT / "tests"))\n'
                "from service_tests.harness import Pipeline\n"
                "from live.client import LiveWriter\n")
    found = references_to_tests(old_demo, set())
    assert sorted(line.split(":")[0] for line in found) == ["line 2", "line 3"]
    assert len(_outside_files()) > 100


@pytest.mark.parametrize("path", _outside_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_nothing_outside_tests_uses_tests(path):
    found = references_to_tests(path.read_text(), _top_level_names(path.parent))
    assert not found, (f"{path.relative_to(ROOT)} reaches into tests/ (move what it needs "
                       f"to testbed/): {found}")


def test_tests_and_testbed_share_no_module_name():
    """Both are on the tests' sys.path (pyproject's pytest pythonpath): a name in both
    would import whichever comes first, silently."""
    assert not TEST_NAMES & _top_level_names(ROOT / "testbed")


def test_no_product_folder_is_a_top_level_module_in_tests(pytestconfig):
    """The tests' sys.path entries (pyproject's pytest pythonpath) hold no folder of the
    product: from the repository's root, `import service` would load service/ a second time,
    as another module than meltwater.service, with its own state."""
    entries = [Path(entry) for entry in pytestconfig.getini("pythonpath")]
    assert {entry.name for entry in entries} >= {"tests", "testbed"}
    shadowing = [str(entry / folder) for entry in entries for folder in FOLDERS
                 if (entry / folder / "__init__.py").exists()]
    assert not shadowing, f"product folders importable by their bare name: {shadowing}"
