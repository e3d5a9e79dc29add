"""The tree's structure rules (issue 40, "rules as a report, not a cap"), as data the test and people can both read.

Hard rules (`violations()`, the structure test fails on any): no import of another module's `_private` name, the
layering below, and no import cycle, counting every import wherever it is written (module level, `if
TYPE_CHECKING:`, inside a function: a function-level import only defers a cycle, it does not remove it), between
modules and between packages (the top-level packages, and the core's stages one by one).

Sizes are a report, not a cap (`size_report()`): modules over `MODULE_LINES_GUIDE` lines and functions over
`FUNCTION_LINES_GUIDE` lines, largest first, with no exemption list. A long module or function is a prompt to look
for a second concept in it, not a failure: compressing code to fit a number made it harder to read.

`python -m tests.packaging.structure_rules` prints every violation, then the size report.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "toolkit"
MODULE_LINES_GUIDE = 350
FUNCTION_LINES_GUIDE = 60

# Which top-level packages each may import (anywhere in the module): the layering, bottom to top.
# A package not listed may import anything. Names are the first component under `toolkit.`.
BASE = {"limits", "strict_load", "private_fs", "locations", "progress", "host_cpu", "errors", "scoped_env"}
ALLOWED_IMPORTS = {
    "core": {"errors"},  # the one leaf every package may raise from (toolkit/errors.py imports nothing)
    "models": {"core"} | BASE,
    "workloads": {"models", "core"} | BASE,
    "perfmodel": {"models", "core"} | BASE,
    "copy": {"core"} | BASE,
    "tiers": BASE,  # the disk tier (and tiers below it) is called by the connector, never calls into it
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


def _targets(mod: str, names: list[str], mods: dict[str, Path]) -> set[str]:
    """The toolkit modules an import runs: `from pkg import module` runs the submodule; `import a.b.c` or a name
    taken from a module runs the nearest enclosing module that exists."""
    out = set()
    for imported in names or [None]:
        target = f"{mod}.{imported}" if imported and f"{mod}.{imported}" in mods else mod
        while target and target not in mods:
            target = target.rpartition(".")[0]
        if target.startswith("toolkit"):
            out.add(target)
    return out


def package_of(module: str) -> str:
    """The unit the package-level cycle check works on: the core's stages one by one (`toolkit.core.store`), every
    other top-level package as a whole (`toolkit.experiments`), a top-level module as itself."""
    parts = module.split(".")
    if len(parts) > 2 and parts[1] == "core":
        return ".".join(parts[:3])
    return ".".join(parts[:2])


def import_graph(mods: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the toolkit modules it imports, every import statement counted."""
    graph: dict[str, set[str]] = {}
    for name, path in mods.items():
        tree = ast.parse(path.read_text())
        deps: set[str] = set()
        for mod, names in _imports(tree, name, path.name == "__init__.py"):
            deps |= _targets(mod, names, mods)
        graph[name] = deps - {name}
    return graph


def package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for name, deps in graph.items():
        here = package_of(name)
        out.setdefault(here, set()).update(package_of(d) for d in deps if package_of(d) != here)
    return out


def violations() -> list[str]:
    mods = modules()
    found: list[str] = []
    for name, path in mods.items():
        tree = ast.parse(path.read_text())
        is_package = path.name == "__init__.py"
        for mod, names in _imports(tree, name, is_package):
            if not mod.startswith("toolkit"):
                continue
            for imported in names:
                if imported.startswith("_") and not imported.startswith("__") and mod != name:
                    found.append(f"private import {name}: {imported} from {mod}")
        found.extend(_private_module_reads(tree, name, mods))
        top = name.split(".")[1] if name.count(".") >= 1 else ""
        allowed = ALLOWED_IMPORTS.get(top)
        if allowed is not None:
            for mod, _ in _imports(tree, name, is_package):
                parts = mod.split(".")
                if parts[0] == "toolkit" and len(parts) > 1 and parts[1] != top and parts[1] not in allowed:
                    found.append(f"layering {name}: imports {mod} ({top} may import {sorted(allowed) or 'nothing'})")
    graph = import_graph(mods)
    found.extend(f"import cycle: {' -> '.join(cycle)}" for cycle in _cycles(graph))
    found.extend(f"package import cycle: {' -> '.join(cycle)}" for cycle in _cycles(package_graph(graph)))
    return found


def size_report(limit: int = 40) -> list[str]:
    """Modules over `MODULE_LINES_GUIDE` lines and functions over `FUNCTION_LINES_GUIDE` lines, largest first (at
    most `limit` of each): a report to read, not a rule."""
    big_modules: list[tuple[int, str]] = []
    big_functions: list[tuple[int, str]] = []
    for name, path in modules().items():
        text = path.read_text()
        lines = len(text.splitlines())
        if lines > MODULE_LINES_GUIDE:
            big_modules.append((lines, name))
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > FUNCTION_LINES_GUIDE:
                    big_functions.append((length, f"{name}:{node.name} (line {node.lineno})"))
    out = [f"modules over {MODULE_LINES_GUIDE} lines: {len(big_modules)}"]
    out += [f"  {n:5d} lines  {what}" for n, what in sorted(big_modules, reverse=True)[:limit]]
    out.append(f"functions over {FUNCTION_LINES_GUIDE} lines: {len(big_functions)}")
    out += [f"  {n:5d} lines  {what}" for n, what in sorted(big_functions, reverse=True)[:limit]]
    return out


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
    """One cycle per strongly connected component of more than one node (Tarjan's algorithm)."""
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
        for w in sorted(graph.get(v, ())):
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


if __name__ == "__main__":
    for line in violations():
        print(line)
    for line in size_report():
        print(line)
