"""The rules of docs/architecture.md that a machine can check, read off the source: no import cycle in the
package (imports inside functions count), and each stage imports only from the stages it may."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "perfsight"

#: stage -> the stages it must not import (top-level modules such as run.py and cli.py are above every stage)
FORBIDDEN = {
    "core": {"options", "launch", "collect", "ingest", "analysis", "mapreduce", "views", "tune", "demo", "run", "cli"},
    "options": {"launch", "collect", "ingest", "analysis", "mapreduce", "views", "tune", "demo", "run", "cli"},
    "ingest": {"launch", "collect", "analysis", "mapreduce", "views", "tune", "demo", "run", "cli"},
    "analysis": {"launch", "collect", "ingest", "mapreduce", "views", "tune", "demo", "run", "cli"},
    "mapreduce": {"launch", "collect", "views", "tune", "demo", "cli"},
    "collect": {"ingest", "analysis", "mapreduce", "views", "tune", "demo", "cli"},
}
#: crossings allowed on purpose, with the reason
ALLOWED = {
    ("perfsight.collect.profiler", "perfsight.views.export"):
        "Profiler.analyse() exports the run it collected, as MindSpore's Profiler.analyse does (seed 002)",
}


def modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        name = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__")
        found[name] = path
    return found


def imports(path: Path, known: dict[str, Path]) -> set[str]:
    """The package's modules ``path`` imports (``from a.b import c`` counts a.b.c when that is a module)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            targets = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
        else:
            continue
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target:
                found.add(target)
    return found


def stage(module: str) -> str:
    return module.split(".")[1] if "." in module else module


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: {t for t in imports(path, known) if t != name and not name.startswith(t + ".")}
            for name, path in known.items()}


def test_no_import_cycle(graph):
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles = []

    def visit(node: str) -> None:   # Tarjan's strongly connected components
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in graph[node]:
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in graph:
        if node not in index:
            visit(node)
    assert cycles == []


def test_each_stage_imports_only_what_it_may(graph):
    crossings = sorted(f"{module} imports {target}" for module, targets in graph.items() for target in targets
                       if stage(target) in FORBIDDEN.get(stage(module), ()) and (module, target) not in ALLOWED)
    assert crossings == []


def test_the_checks_see_a_cycle_and_a_crossing(tmp_path):
    """The two checks above would fail on a package that had either."""
    package = tmp_path / "perfsight"
    (package / "analysis").mkdir(parents=True)
    (package / "views").mkdir()
    (package / "analysis" / "a.py").write_text("from perfsight.views import v\n")
    (package / "views" / "v.py").write_text("from perfsight.analysis import a\n")
    known = {"perfsight.analysis.a": package / "analysis" / "a.py", "perfsight.views.v": package / "views" / "v.py"}
    assert imports(known["perfsight.analysis.a"], known) == {"perfsight.views.v"}
    assert "views" in FORBIDDEN[stage("perfsight.analysis.a")]


def test_no_name_of_the_api_is_also_a_module_of_the_package():
    """``perfsight.cluster`` and ``perfsight.compare`` are functions: a submodule of the same name would replace
    one on the package as soon as anything imported it (Python binds a submodule's name on its package), and
    ``perfsight.cluster(...)`` would then call a module."""
    import perfsight

    submodules = {path.stem if path.name != "__init__.py" else path.parent.name
                  for path in PACKAGE.iterdir() if path.suffix == ".py" or (path / "__init__.py").is_file()}
    assert set(perfsight._LAZY) & submodules == set()
    import perfsight.comparison
    import perfsight.mapreduce  # noqa: F401 - imported for the binding it makes

    assert callable(perfsight.cluster) and callable(perfsight.compare)
