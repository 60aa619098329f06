"""The package's shape: no import cycle among nmt's modules (lazy imports inside functions included), the CLI on top
of the library, models apart from data and training, and `import nmt` without torch."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO

PACKAGE = REPO / "nmt"


def _module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, name: str, modules: set[str]) -> set[str]:
    """The nmt modules `path` imports anywhere in it (a `from X import y` names module X.y when there is one)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in modules:  # `import nmt.a.b` resolves to the longest module it names
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def import_graph() -> dict[str, set[str]]:
    """Every nmt module and the nmt modules it imports."""
    paths = {_module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}
    return {name: _imports(path, name, set(paths)) for name, path in paths.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import cycle as the modules along it (first repeated last), or [] when there is none."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(module: str) -> list[str]:
        state[module] = 1
        path.append(module)
        for target in sorted(graph[module]):
            if state.get(target) == 1:
                return [*path[path.index(target):], target]
            if target not in state and (cycle := visit(target)):
                return cycle
        state[module] = 2
        path.pop()
        return []

    for module in sorted(graph):
        if module not in state and (cycle := visit(module)):
            return cycle
    return []


def test_nmt_has_no_import_cycle():
    cycle = find_cycle(import_graph())
    assert not cycle, "import cycle: " + " -> ".join(cycle)


def test_the_cycle_check_sees_lazy_and_relative_imports():
    graph = import_graph()
    assert "nmt.translator" in graph["nmt.cli"]  # a lazy import
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) == []


# The console commands; every other module is the library, which never imports them.
CLI_MODULES = {"nmt.cli", "nmt.__main__", "nmt.serve.command"}


def test_no_library_module_imports_the_command_line():
    graph = import_graph()
    assert "nmt.cli" in graph["nmt.serve.command"], "the check must see the commands' own imports"
    offenders = sorted(name for name, targets in graph.items() if name not in CLI_MODULES and targets & CLI_MODULES)
    assert not offenders, offenders


def test_models_import_no_data_or_training_code():
    graph = import_graph()
    forbidden = {"nmt.data", "nmt.trainer", "nmt.run", "nmt.optim", "nmt.checkpoint", "nmt.translator"}
    found = sorted(f"{name} -> {target}" for name, targets in graph.items() if name.startswith("nmt.models")
                   for target in targets if ".".join(target.split(".")[:2]) in forbidden)
    assert not found, found


def test_importing_nmt_and_its_config_leaves_torch_out():
    loaded = _in_a_fresh_interpreter("import sys, nmt, nmt.config, nmt.errors; nmt.config.Config(); "
                                     "print([m for m in ('torch', 'nmt.models', 'sentencepiece') if m in sys.modules])")
    assert loaded == "[]", loaded


def test_benchmarks_tools_and_scripts_use_only_public_nmt_names_and_leave_sys_path_alone():
    found = []
    for path in sorted([*(REPO / "benchmarks").glob("*.py"), *(REPO / "tools").glob("*.py"),
                        *(REPO / "scripts").glob("*.py")]):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("nmt"):
                found += [f"{path.name}: {node.module}.{a.name}" for a in node.names if a.name.startswith("_")]
            if isinstance(node, ast.Attribute) and node.attr == "path" and getattr(node.value, "id", "") == "sys":
                found.append(f"{path.name}: sys.path")
    assert not found, found


def _top_level_imports(path: Path) -> set[str]:
    """The top-level packages `path` imports anywhere in it."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level:
            found.add((node.module or "").split(".")[0])
    return found


def test_the_library_imports_neither_benchmarks_nor_tools_and_benchmarks_never_import_tools():
    """nmt at the bottom, benchmarks (measuring) above it, tools (the evidence tooling, which reads the benchmarks'
    records) on top."""
    forbidden = {"nmt": {"benchmarks", "tools"}, "benchmarks": {"tools"}}
    found = sorted(f"{path.relative_to(REPO)} -> {target}" for folder, banned in forbidden.items()
                   for path in (REPO / folder).rglob("*.py") for target in _top_level_imports(path) & banned)
    assert not found, found


def test_translating_serving_and_evaluating_do_not_import_matplotlib():
    """matplotlib takes about a second to import; only the commands that plot may load it."""
    loaded = _in_a_fresh_interpreter("import sys, nmt.cli, nmt.stream, nmt.evaluation, nmt.serve.app, "
                                     "nmt.serve.command; print(sorted(m for m in sys.modules "
                                     "if m.split('.')[0] == 'matplotlib')[:3])")
    assert loaded == "[]", loaded


def _in_a_fresh_interpreter(code: str) -> str:
    """What `code` prints when run by a new Python process in the repository."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO,
                          check=True).stdout.strip()
