"""axe-core for the accessibility tests: the pinned npm package (``tests/support/axe-core``), installed
with ``npm ci`` on first use and injected into every page of a Playwright context.

The script is added as an init script (through the DevTools protocol, so a page's own
``Content-Security-Policy: default-src 'self'`` stays exactly what elicitd sends) and run with
the WCAG 2.0, 2.1 and 2.2 A/AA rule tags.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

from playwright.async_api import BrowserContext, Page

AXE_DIR = Path(__file__).parent / "axe-core"
AXE_SCRIPT = AXE_DIR / "node_modules" / "axe-core" / "axe.min.js"
WCAG_TAGS = ("wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "wcag22aa")


class AxeNotInstalledError(RuntimeError):
    """npm could not install axe-core; the accessibility tests need it and must not be skipped."""


def axe_source() -> str:
    if not AXE_SCRIPT.is_file():
        npm = shutil.which("npm")
        if npm is None:
            raise AxeNotInstalledError(
                "npm is not on PATH: install Node.js 20+ with npm to run the accessibility tests."
            )
        result = subprocess.run(
            [npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"],
            cwd=AXE_DIR,
            capture_output=True,
            text=True,
            check=False,
            timeout=600,
        )
        if result.returncode != 0 or not AXE_SCRIPT.is_file():
            raise AxeNotInstalledError(f"npm ci failed in {AXE_DIR}:\n{result.stdout}\n{result.stderr}")
    return AXE_SCRIPT.read_text(encoding="utf-8")


async def with_axe(context: BrowserContext) -> None:
    await context.add_init_script(script=axe_source())


async def violations(page: Page, tags: tuple[str, ...] = WCAG_TAGS) -> list[dict[str, Any]]:
    """axe's violations on the page as it is now: rule id, impact and the offending nodes' HTML."""
    found: list[dict[str, Any]] = await page.evaluate(
        """async (tags) => {
            const result = await axe.run(document, {runOnly: {type: "tag", values: tags}, resultTypes: ["violations"]});
            return result.violations.map(v => ({
                id: v.id, impact: v.impact, help: v.help,
                nodes: v.nodes.map(n => n.html.slice(0, 200) + " — " + n.failureSummary),
            }));
        }""",
        list(tags),
    )
    return found
