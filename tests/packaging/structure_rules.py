"""The tree's structure rules (issue "A house a newcomer can walk"), as data the test and people can both read.

`python -m tests.packaging.structure_rules` prints every violation, one a line.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "toolkit"
MAX_MODULE_LINES = 350
MAX_FUNCTION_LINES = 60

# The hot paths: run once per engine step per request, where a call boundary costs measurable time
# (`kvtk bench scheduler`), so one long function is kept on purpose.
HOT_PATHS = {
    "toolkit.core.manager:build_step",
    "toolkit.core.store.selection:select_positional",
    "toolkit.core.store.batch:admit",
    "toolkit.core.store.handoffs:take",
    "toolkit.core.lookup.hybrid:find",
    "toolkit.core.sim:step",
}

# Which top-level packages each may import (module-level or under TYPE_CHECKING): the layering, bottom to top.
# A package not listed may import anything. Names are the first component under `toolkit.`.
BASE = {"limits", "strict_load", "private_fs", "locations", "progress", "host_cpu"}
ALLOWED_IMPORTS = {
    "core": set(),
    "models": {"core"} | BASE,
    "workloads": {"models", "core"} | BASE,
    "perfmodel": {"models", "core"} | BASE,
    "copy": {"core"} | BASE,
    "engines": {"core", "models", "workloads", "perfmodel", "vllm", "copy", "serve"} | BASE,
    # the base helpers every package may use import only each other
    **{name: BASE for name in BASE},
}


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _imports(tree: ast.AST, name: str, is_package: bool) -> list[tuple[str, list[str]]]:
    """(module imported, names taken from it) for every import statement anywhere in the module."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.extend((alias.name, []) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_package else name.split(".")[:-1]
                base = base[: len(base) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            out.append((mod, [alias.name for alias in node.names]))
    return out


def _top_level_imports(tree: ast.Module) -> list[ast.stmt]:
    """Imports that run when the module is imported: at module level, including `if TYPE_CHECKING:` blocks
    (a cycle hidden behind TYPE_CHECKING is still a cycle), but not inside functions."""
    out = []
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            out.append(node)
        elif isinstance(node, (ast.If, ast.Try)):
            for sub in ast.walk(node):
                if isinstance(sub, (ast.Import, ast.ImportFrom)):
                    out.append(sub)
    return out


def violations() -> list[str]:
    mods = modules()
    found: list[str] = []
    graph: dict[str, set[str]] = {}
    for name, path in mods.items():
        text = path.read_text()
        tree = ast.parse(text)
        lines = len(text.splitlines())
        if lines > MAX_MODULE_LINES:
            found.append(f"module {name}: {lines} lines (max {MAX_MODULE_LINES})")
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES and f"{name}:{node.name}" not in HOT_PATHS:
                    found.append(
                        f"function {name}:{node.name} line {node.lineno}: {length} lines (max {MAX_FUNCTION_LINES})"
                    )
        is_package = path.name == "__init__.py"
        for mod, names in _imports(tree, name, is_package):
            if not mod.startswith("toolkit"):
                continue
            for imported in names:
                if imported.startswith("_") and not imported.startswith("__") and mod != name:
                    found.append(f"private import {name}: {imported} from {mod}")
        found.extend(_private_module_reads(tree, name, mods))
        deps = set()
        for node in _top_level_imports(tree):
            for mod, names in _imports(ast.Module(body=[node], type_ignores=[]), name, is_package):
                if not mod.startswith("toolkit"):
                    continue
                # `from toolkit.pkg import module` imports the submodule
                for imported in names or [None]:
                    target = f"{mod}.{imported}" if imported and f"{mod}.{imported}" in mods else mod
                    if target in mods and target != name:
                        deps.add(target)
        graph[name] = deps
        top = name.split(".")[1] if name.count(".") >= 1 else ""
        allowed = ALLOWED_IMPORTS.get(top)
        if allowed is not None:
            for mod, _ in _imports(tree, name, is_package):
                parts = mod.split(".")
                if parts[0] == "toolkit" and len(parts) > 1 and parts[1] != top and parts[1] not in allowed:
                    found.append(f"layering {name}: imports {mod} ({top} may import {sorted(allowed) or 'nothing'})")
    found.extend(f"import cycle: {' -> '.join(cycle)}" for cycle in _cycles(graph))
    return found


def _private_module_reads(tree: ast.AST, name: str, mods: dict[str, Path]) -> list[str]:
    """`module._private` where `module` is another toolkit module bound by an import (a private import by another
    spelling)."""
    bound: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname and alias.name in mods:
                    bound[alias.asname] = alias.name
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                target = f"{node.module}.{alias.name}"
                if target in mods:
                    bound[alias.asname or alias.name] = target
    out = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in bound
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
            and bound[node.value.id] != name
        ):
            out.append(f"private import {name}: {node.attr} read from {bound[node.value.id]}")
    return sorted(set(out))


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected component of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    sys.setrecursionlimit(10_000)

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
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
            # a package's __init__ importing its own submodules is not a cycle worth naming
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


if __name__ == "__main__":
    for line in violations():
        print(line)
