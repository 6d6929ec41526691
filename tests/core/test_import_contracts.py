"""The layer rules of ``.importlinter`` hold on the code, and a wrong import breaks them.

``make check`` runs ``lint-imports`` on the tree; here the same contracts run on a copy of
``service/`` with one deliberately wrong import added, so a rule that stopped checking anything
(a layer left out, an ignore that matches too much) fails this test rather than passing quietly.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT = [
    sys.executable,
    "-c",
    "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())",
]


def _lint(cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(cwd)}
    command = [*LINT, "--config", str(cwd / ".importlinter"), "--no-cache"]
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=120, check=False)


def test_the_tree_keeps_every_contract() -> None:
    run = _lint(ROOT)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "Contracts: 3 kept, 0 broken." in run.stdout


# (where the wrong import goes, what it imports, the contract it breaks)
WRONG = [
    ("service/text.py", "import litestar", "The kernel imports no framework, database or network library BROKEN"),
    ("service/settings.py", "import sqlalchemy", "The kernel imports no framework, database or network library BROKEN"),
    ("service/consent/kind.py", "import service.payments.kind", "Kinds never import each other BROKEN"),
    (
        "service/grants/pages.py",
        "import service.app",
        "Layers: a module imports only its own layer or those below it BROKEN",
    ),
    (
        "service/db/unit.py",
        "import service.flows.states",
        "Layers: a module imports only its own layer or those below it BROKEN",
    ),
    (
        "service/flows/states.py",
        "import service.connections",
        "Layers: a module imports only its own layer or those below it BROKEN",
    ),
]


@pytest.mark.parametrize(("module", "statement", "broken"), WRONG, ids=[w[0] + ": " + w[1] for w in WRONG])
def test_a_wrong_import_fails_the_contracts(tmp_path: Path, module: str, statement: str, broken: str) -> None:
    shutil.copytree(ROOT / "service", tmp_path / "service", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / ".importlinter", tmp_path / ".importlinter")
    target = tmp_path / module
    assert target.exists(), module
    target.write_text(target.read_text() + f"\n{statement}  # noqa\n")
    run = _lint(tmp_path)
    assert run.returncode == 1, run.stdout + run.stderr
    assert broken in run.stdout
