"""The package layout (README "Layout"): no import circles between the project's modules, counting
imports inside functions too (the engine-overhead model once made calibrate ↔ point ↔ engine CLI ↔
verify a circle), and the layers point one way: the core packages never import `experiments`, and
`experiments`' planning and verification code never imports its command line."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("traces", "profiler", "simulator", "gpu_engine", "experiments")


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}


def _imports(path: Path, name: str, known: set[str]) -> set[str]:
    """Project modules `path` imports anywhere in its body (`from x import y` counts x.y when that is a module)."""
    found = set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            targets = [f"{base}.{alias.name}" for alias in node.names] + [base]
        else:
            continue
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules)
    # A package's __init__ is imported with any of its modules; edges to it are not circles by themselves.
    return {name: {t for t in _imports(path, name, known) if not name.startswith(t + ".")}
            for name, path in modules.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, on_stack, stack, out, counter = {}, {}, set(), [], [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_cycle_finder_finds_a_planted_circle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_circles():
    assert _cycles(_graph()) == []


def test_layers_point_one_way():
    graph = _graph()
    core_to_experiments = sorted((m, t) for m, ts in graph.items() for t in ts
                                 if not m.startswith("experiments") and t.startswith("experiments"))
    work_to_cli = sorted((m, t) for m, ts in graph.items() for t in ts
                         if not m.startswith("experiments.cli") and t.startswith("experiments.cli"))
    assert core_to_experiments == [] and work_to_cli == []


def test_the_file_helpers_import_nothing_of_the_project():
    """The atomic writer and the JSON-object reader serve the profiler's own modules and every layer
    above it, so they import no other project module (any import could close a circle)."""
    graph = _graph()
    helpers = ("profiler.atomic_write", "profiler.json_object")
    assert {m: graph[m] for m in helpers} == {m: set() for m in helpers}
    assert "profiler.atomic_write" in graph["experiments.outputs"]


def test_experiments_has_its_three_roles():
    for role in ("cli", "planning", "verification"):
        assert (ROOT / "experiments" / role / "__init__.py").is_file()
    assert (ROOT / "profiler" / "engine_overhead.py").is_file()


MAX_FILE_LINES = 800  # issue 30: a longer file says at its top why it is one piece


def test_no_module_is_longer_than_800_lines_unless_it_says_why():
    """Every module of the project (and every test file) is at most 800 lines, or its docstring
    says why it is one piece ("one piece" in the module docstring)."""
    files = [p for pkg in (*PACKAGES, "tests", "benchmarks") for p in (ROOT / pkg).rglob("*.py")]
    assert len(files) > 100
    too_long = {}
    for path in files:
        text = path.read_text()
        lines = text.count("\n")
        if lines > MAX_FILE_LINES and "one piece" not in (ast.get_docstring(ast.parse(text)) or ""):
            too_long[str(path.relative_to(ROOT))] = lines
    assert too_long == {}
