"""A part of the suite runs the ways docs/development.md shows: plain ``pytest`` from the
virtualenv, and ``make test TESTS=…``; ``make test tests/core`` stops and says how instead of
quietly running the whole suite."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from service.dev_instance import hold
from tests.support.docs import ROOT

VENV = Path(sys.executable).parent.parent
ONE = "tests/docs/test_demo_mcp_snippet.py::test_the_check_notices_a_module_the_extra_does_not_install"


def make(*arguments: str) -> subprocess.CompletedProcess[str]:
    """``make`` at the repository root with this run's virtualenv (``-o`` keeps it from reinstalling)."""
    return subprocess.run(
        ["make", "-s", "-o", f"{VENV}/.installed", *arguments, f"VENV={VENV}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_plain_pytest_imports_the_tests_package() -> None:
    ran = subprocess.run(
        [str(VENV / "bin" / "pytest"), "-q", "-p", "no:cacheprovider", ONE],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "1 passed" in ran.stdout


def test_make_test_tests_runs_only_that_part() -> None:
    dry = make("-n", "test", f"TESTS={ONE}")
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.splitlines()[-1] == f"{VENV}/bin/python -m pytest -q {ONE}"
    ran = make("test", f"TESTS={ONE}")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "1 passed" in ran.stdout


def test_make_test_with_a_path_as_a_goal_stops_and_names_tests() -> None:
    for target in ("test", "test-backends"):
        stopped = make(target, "tests/core")
        assert stopped.returncode == 2
        assert f'make {target}: to run only tests/core, use: make {target} TESTS="tests/core"' in stopped.stdout
        assert "passed" not in stopped.stdout


def test_make_clean_refuses_while_make_run_holds_the_data_directory(tmp_path: Path) -> None:
    """In a scratch directory (``make clean`` deletes ``.data`` and the virtualenv where it runs)."""
    data = tmp_path / ".data"
    (data / "postgres").mkdir(parents=True)
    clean = ["make", "-s", "-f", str(ROOT / "Makefile"), "clean", f"VENV={tmp_path / '.venv'}"]
    with hold(data, url="http://127.0.0.1:8000"):  # what `elicitd dev` holds while it runs
        refused = subprocess.run(clean, cwd=tmp_path, capture_output=True, text=True, timeout=30, check=False)
        assert refused.returncode == 2
        assert refused.stdout == (
            "make clean: elicitd dev (make run) is running on .data; stop it first (Ctrl+C in its terminal), "
            "then make clean.\n"
        )
        assert (data / "postgres").is_dir()
    cleaned = subprocess.run(clean, cwd=tmp_path, capture_output=True, text=True, timeout=30, check=False)
    assert cleaned.returncode == 0, cleaned.stderr
    assert not data.exists()
