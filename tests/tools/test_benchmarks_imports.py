"""The benchmarks modules import one another without a circle.

The graph is read from the source with ``ast``, so it holds every import, at module level
and inside functions alike: a circle closed by an import inside a function still makes the
modules depend on each other, only later and more quietly.
"""

import ast
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def imported_benchmarks(source: str, modules: set[str]) -> set[str]:
    """The benchmarks modules (names in ``modules``) that ``source`` imports anywhere."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            # ``from benchmarks import run`` names the module in the alias,
            # ``from benchmarks.run import measure`` in the module.
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            continue
        for name in names:
            parts = name.split(".")
            if parts[0] == "benchmarks" and len(parts) > 1 and parts[1] in modules:
                found.add(parts[1])
    return found


def import_graph(folder: Path) -> dict[str, set[str]]:
    """Each module of ``folder`` and the modules of ``folder`` it imports."""
    files = {path.stem: path for path in folder.glob("*.py") if path.stem != "__init__"}
    return {
        name: imported_benchmarks(path.read_text(), set(files)) - {name}
        for name, path in files.items()
    }


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One circle of imports in ``graph`` (its modules in order, the first repeated at
    the end), or ``None`` when there is none."""
    state = {}  # a module absent: not seen; "open": on the current path; "done": no cycle

    def visit(name, path):
        state[name] = "open"
        for other in sorted(graph[name]):
            if state.get(other) == "open":
                return path[path.index(other) :] + [other]
            if other not in state:
                cycle = visit(other, path + [other])
                if cycle:
                    return cycle
        state[name] = "done"
        return None

    for name in sorted(graph):
        if name not in state:
            cycle = visit(name, [name])
            if cycle:
                return cycle
    return None


def test_the_benchmarks_modules_import_one_another_without_a_circle():
    graph = import_graph(BENCHMARKS)
    # The reader sees the modules it expects, and some edges: the graph is really read.
    assert {"run", "contenders", "lstm_programs", "backward", "forward"} <= set(graph)
    assert "contenders" in graph["run"] and "lstm_programs" in graph["contenders"]
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph))


@pytest.mark.parametrize(
    "sources, cycle",
    [
        # A circle closed by an import inside a function is found as well.
        (
            {
                "a": "from benchmarks.b import f\n",
                "b": "def f():\n    from benchmarks.a import g\n",
            },
            ["a", "b", "a"],
        ),
        (
            {
                "a": "from benchmarks import b\n",
                "b": "import benchmarks.c\n",
                "c": "def h():\n    import benchmarks.a as a\n",
            },
            ["a", "b", "c", "a"],
        ),
        # No circle: a chain, an import of a module outside the folder, a self-import.
        (
            {
                "a": "from benchmarks import b\nimport rnnlib\n",
                "b": "from benchmarks.c import x\n",
                "c": "import benchmarks.c\n",
            },
            None,
        ),
    ],
)
def test_the_cycle_check_finds_a_circle_of_function_level_imports(tmp_path, sources, cycle):
    for name, source in sources.items():
        (tmp_path / f"{name}.py").write_text(source)
    assert find_cycle(import_graph(tmp_path)) == cycle
