"""Read the documentation the way tests check it: whole files, sections under a heading, and the
code blocks in them. Every helper fails loudly when what it looks for is gone, so a test that reads
the documentation cannot pass by finding nothing."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def documents() -> list[Path]:
    """The README and every page under ``docs/``."""
    pages = sorted(DOCS.glob("*.md"))
    assert pages, "docs/ has no pages"
    return [ROOT / "README.md", *pages]


def read(relative: str) -> str:
    return (ROOT / relative).read_text()


def section(text: str, heading: str) -> str:
    """The body under the heading whose title is ``heading``, up to the next heading of the same or
    a higher level (so subsections stay inside)."""
    lines = text.splitlines()
    for index, line in enumerate(lines):
        match = re.fullmatch(r"(#+) (.+)", line)
        if match and match.group(2).strip() == heading:
            level = len(match.group(1))
            body: list[str] = []
            in_fence = False
            for following in lines[index + 1 :]:
                if following.startswith("```"):
                    in_fence = not in_fence
                found = None if in_fence else re.match(r"(#+) ", following)
                if found and len(found.group(1)) <= level:
                    break
                body.append(following)
            return "\n".join(body)
    raise AssertionError(f"no heading {heading!r}")


def code_blocks(text: str, info: str) -> list[str]:
    """Fenced blocks whose info string is exactly ``info`` (``sh``, ``python verify``, …)."""
    return re.findall(rf"^```{re.escape(info)}\n(.*?)^```", text, re.S | re.M)


def code_block(text: str, info: str) -> str:
    blocks = code_blocks(text, info)
    assert len(blocks) == 1, f"expected one ```{info} block, found {len(blocks)}"
    return blocks[0]
