"""Two rules of ``service/`` read from the code itself: no import circle, and no long module
without its reason.

* **No import circle.** Every ``import`` in every module counts: at the top, inside a function
  and under ``if TYPE_CHECKING:`` alike, since a circle of type-only imports still ties the
  modules together for a reader and for the type checker. A circle is reported by the names of
  its modules, one arrow at a time.
* **Module size.** A module over ``LIMIT`` lines starts with one line saying why it stays whole,
  ``# size: <reason>`` (docs/architecture.md, "Module size"); a longer module without one is
  named with its length, so it is split or given its reason in the change that grew it.

Each rule also runs on a small planted tree, so a checker that stopped seeing anything fails too.
"""

from __future__ import annotations

import ast
from pathlib import Path

SERVICE = Path(__file__).resolve().parents[2] / "service"
LIMIT = 450
MARKER = "# size: "


def _modules(root: Path) -> dict[str, Path]:
    """Every module below ``root`` (a package directory) by its dotted name."""
    found: dict[str, Path] = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The modules of the tree that ``name`` imports, wherever the import statement stands."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    top = next(iter(modules)).partition(".")[0]

    def known(dotted: str) -> str | None:
        while dotted and dotted not in modules:
            dotted = dotted.rpartition(".")[0]
        return dotted or None

    found: set[str | None] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found.update(known(alias.name) for alias in node.names if alias.name.partition(".")[0] == top)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                kept = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*kept, base] if base else kept)
            if base.partition(".")[0] != top:
                continue
            for alias in node.names:
                whole = f"{base}.{alias.name}"
                found.add(whole if whole in modules else known(base))
    found.discard(None)
    found.discard(name)
    return {module for module in found if module is not None}


def import_circles(root: Path) -> list[list[str]]:
    """Each circle as the modules along it, first module repeated at the end (a → b → a)."""
    modules = _modules(root)
    graph = {name: sorted(_imports(name, path, modules)) for name, path in modules.items()}
    # Tarjan's strongly connected components, iteratively (no recursion limit on a deep chain).
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    for start, targets in graph.items():
        if start in index:
            continue
        work = [(start, iter(targets))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for target in edges:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(graph[target])))
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            else:
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
                        components.append(component)
    return [_one_loop(sorted(component), graph) for component in components]


def _one_loop(component: list[str], graph: dict[str, list[str]]) -> list[str]:
    """A shortest circle through the component's first module, to name the arrows that close it."""
    inside = set(component)
    first = component[0]
    paths = {first: [first]}
    frontier = [first]
    while frontier:
        following = []
        for node in frontier:
            for target in graph[node]:
                if target == first:
                    return [*paths[node], first]
                if target in inside and target not in paths:
                    paths[target] = [*paths[node], target]
                    following.append(target)
        frontier = following
    return [*component, first]  # not reached: every member of a component reaches the first


def oversized(root: Path) -> list[str]:
    """Modules over ``LIMIT`` lines whose first line gives no reason, with their length."""
    long = []
    for path in sorted(root.rglob("*.py")):
        lines = path.read_text(encoding="utf-8").splitlines()
        reason = lines[0].removeprefix(MARKER).strip() if lines and lines[0].startswith(MARKER) else ""
        if len(lines) > LIMIT and not reason:
            long.append(f"{path.relative_to(root.parent)}: {len(lines)} lines")
    return long


# Circles known today, each with what removing it takes; the list only shrinks (one that no longer
# exists must leave it too).
KNOWN_CIRCLES: set[tuple[str, ...]] = set()


def test_no_import_circle_in_service() -> None:
    circles = {tuple(circle) for circle in import_circles(SERVICE)}
    assert circles - KNOWN_CIRCLES == set(), "import circles:\n" + "\n".join(
        " -> ".join(circle) for circle in sorted(circles - KNOWN_CIRCLES)
    )
    assert KNOWN_CIRCLES - circles == set(), "gone, so off KNOWN_CIRCLES"


def test_no_long_module_without_its_reason() -> None:
    assert oversized(SERVICE) == []


def _plant(root: Path, files: dict[str, str]) -> Path:
    package = root / "pkg"
    for name, text in {"__init__.py": "", **files}.items():
        (package / name).parent.mkdir(parents=True, exist_ok=True)
        (package / name).write_text(text, encoding="utf-8")
    return package


def test_a_planted_circle_is_named_type_checking_and_function_imports_included(tmp_path: Path) -> None:
    package = _plant(
        tmp_path,
        {
            "a.py": "from pkg.b import thing\n",
            "b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import c\n",
            "c.py": "def late():\n    import pkg.a\n",
            "d.py": "from pkg import a\n",  # into the circle, not part of it
            "sub/__init__.py": "",
            "sub/e.py": "from . import f\n",
            "sub/f.py": "from .e import name\n",
        },
    )
    assert sorted(import_circles(package)) == [
        ["pkg.a", "pkg.b", "pkg.c", "pkg.a"],
        ["pkg.sub.e", "pkg.sub.f", "pkg.sub.e"],
    ]


def test_a_planted_long_module_is_named_until_it_gives_its_reason(tmp_path: Path) -> None:
    body = "x = 1\n" * LIMIT
    package = _plant(
        tmp_path,
        {
            "long.py": '"""Long."""\n' + body,
            "reasoned.py": MARKER + "one table read top to bottom\n" + body,
            "empty_reason.py": MARKER + "\n" + body,
            "at_limit.py": body,
        },
    )
    assert oversized(package) == [f"pkg/empty_reason.py: {LIMIT + 1} lines", f"pkg/long.py: {LIMIT + 1} lines"]
