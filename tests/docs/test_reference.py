"""What the README and ``docs/`` name must exist: every ``elicitd`` command parses, every ``make``
target and ``pip`` extra exists, every link between pages leads somewhere."""

from __future__ import annotations

import contextlib
import io
import re
import shlex
import tomllib
from pathlib import Path

import pytest

from service.cli import build_parser
from tests.support.docs import ROOT, documents

PAGES = documents()


def _without_fences(text: str) -> str:
    return re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)


def _snippets(text: str) -> list[str]:
    """Inline code spans (joined across line breaks) and the lines of shell blocks."""
    spans = [" ".join(span.split()) for span in re.findall(r"`([^`]+)`", _without_fences(text))]
    lines: list[str] = []
    for block in re.findall(r"^```(?:sh|bash|shell)\n(.*?)^```", text, re.S | re.M):
        for line in block.replace("\\\n", " ").splitlines():
            # The command itself: a comment, a redirection (`> audit.jsonl`) or a pipe is the shell's.
            lines.append(re.split(r"\s(?:#|>|\|)\s", f"{line} ", maxsplit=1)[0].strip())
    return spans + lines


def documented_commands(text: str) -> list[str]:
    """``elicitd …`` commands as written; a span ending in `` …`` only names a group of them."""
    return [s for s in _snippets(text) if s.startswith("elicitd ") and not s.endswith(" …")]


def _arguments(command: str) -> list[str]:
    # A synopsis marks options `[--flag VALUE]` and repeatable ones `[--flag VALUE]…`.
    return shlex.split(re.sub(r"\[([^\]]*)\]…?", r"\1", command))[1:]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_documented_elicitd_command_parses(page: Path) -> None:
    text = page.read_text()
    refused: list[str] = []
    for command in documented_commands(text):
        errors = io.StringIO()
        try:
            with contextlib.redirect_stderr(errors), contextlib.redirect_stdout(io.StringIO()):
                build_parser().parse_args(_arguments(command))
        except SystemExit as stopped:
            if stopped.code:  # `--version` and `--help` stop parsing with 0
                refused.append(f"{command}: {errors.getvalue().strip().splitlines()[-1]}")
    assert refused == []


def test_the_command_check_sees_the_documented_commands() -> None:
    found = {command for page in PAGES for command in documented_commands(page.read_text())}
    assert {"elicitd keys rotate", "elicitd admin tokens list", "elicitd migrate"} <= found
    assert len(found) >= 30
    with pytest.raises(SystemExit), contextlib.redirect_stderr(io.StringIO()):
        build_parser().parse_args(_arguments("elicitd admin tokens mint --name x"))


def test_documented_make_targets_and_extras_exist() -> None:
    makefile = (ROOT / "Makefile").read_text()
    targets = set(re.findall(r"^([A-Za-z][\w-]*):", makefile, re.M))
    extras = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"])
    named_targets: set[str] = set()
    named_extras: set[str] = set()
    for page in PAGES:
        text = page.read_text()
        for snippet in _snippets(text):
            named_targets.update(re.findall(r"(?:^|[;&|(]\s*)make ([a-z][\w-]*)", snippet))
        named_extras.update(re.findall(r"elicitd\[(\w+)\]", text))
    assert {"run", "test", "check"} <= named_targets
    assert named_targets <= targets
    assert {"server", "client", "mcp"} <= named_extras
    assert named_extras <= extras


def _anchors(text: str) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens."""
    headings = re.findall(r"^#+ (.+)$", _without_fences(text), re.M)
    return {re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-") for heading in headings}


def _resolves(page: Path, target: str) -> bool:
    path, _, anchor = target.partition("#")
    linked = (page.parent / path).resolve() if path else page
    if not linked.exists():
        return False
    return not anchor or linked.suffix != ".md" or anchor in _anchors(linked.read_text())


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_links_between_pages_resolve(page: Path) -> None:
    targets = re.findall(r"\]\(([^)\s]+)\)", _without_fences(page.read_text()))
    local = [target for target in targets if not re.match(r"[a-z]+:", target)]
    assert [target for target in local if not _resolves(page, target)] == []
