"""The MCP-server code the docs show imports only what ``pip install 'elicitd[mcp]'`` installs:
the standard library, ``elicitd_client``, and the distributions the ``mcp`` extra pulls in (its own
requirements and theirs, as installed here)."""

from __future__ import annotations

import ast
import sys
import tomllib
from importlib import metadata

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.support.docs import ROOT, code_blocks, read, section


def mcp_extra_closure() -> set[str]:
    """Every distribution ``elicitd[mcp]`` brings, by canonical name."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    todo = [Requirement(raw) for raw in [*project["dependencies"], *project["optional-dependencies"]["mcp"]]]
    seen: set[str] = set()
    while todo:
        requirement = todo.pop()
        name = canonicalize_name(requirement.name)
        if name in seen:
            continue
        seen.add(name)
        extras = requirement.extras or {""}
        for raw in metadata.requires(requirement.name) or []:
            needed = Requirement(raw)
            if needed.marker is None or any(needed.marker.evaluate({"extra": extra}) for extra in extras):
                todo.append(needed)
    return seen


def imported_modules(source: str) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return found


def not_installed_by_the_extra(source: str) -> list[str]:
    provided = mcp_extra_closure()
    owners = metadata.packages_distributions()
    missing = []
    for module in sorted(imported_modules(source)):
        if module in sys.stdlib_module_names or module == "elicitd_client":
            continue
        if not {canonicalize_name(d) for d in owners.get(module, [])} & provided:
            missing.append(module)
    return missing


def test_the_mcp_quick_start_imports_only_what_the_extra_installs() -> None:
    blocks = [b for b in code_blocks(section(read("docs/mcp.md"), "Quick start"), "python") if "MCPServer(" in b]
    assert len(blocks) == 1
    assert "from elicitd_client.auth import JwtVerifier" in blocks[0]
    assert not_installed_by_the_extra(blocks[0]) == []


def test_the_example_server_imports_only_what_the_extra_installs() -> None:
    assert not_installed_by_the_extra((ROOT / "examples/mcp_server/server.py").read_text()) == []


def test_the_check_notices_a_module_the_extra_does_not_install() -> None:
    assert not_installed_by_the_extra("from examples.mcp_server.auth import JwtVerifier\nimport litestar\n") == [
        "examples",
        "litestar",
    ]
