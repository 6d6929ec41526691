"""``make demo`` (``python -m examples.demo``): run against the ``make run`` instance.

Options come from make variables or the environment: ``HEADLESS=1`` lets headless Chromium play
the person, ``SCREENSHOTS=DIR`` saves each page it sees, ``DEMO_USER`` picks the user (alice),
``ELICITD_URL`` (http://127.0.0.1:8000) and ``ELICITD_DATA_DIR`` (.data, for the dev API key)
find the instance.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path

from examples.demo.host import DemoError, Options, dev_api_key, run
from examples.demo.person import ChromiumMissing


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="make demo", description="An MCP tool call that needs Demo Files.")
    parser.add_argument("--elicitd", default=os.environ.get("ELICITD_URL") or "http://127.0.0.1:8000")
    parser.add_argument("--data-dir", type=Path, default=Path(os.environ.get("ELICITD_DATA_DIR") or ".data"))
    parser.add_argument("--user", default=os.environ.get("DEMO_USER") or "alice")
    parser.add_argument("--headless", action="store_true", help="headless Chromium plays the person")
    parser.add_argument("--screenshots", type=Path, help="save a screenshot of every page (with --headless)")
    args = parser.parse_args(argv)
    try:
        options = Options(
            elicitd_url=args.elicitd.rstrip("/"),
            api_key=os.environ.get("ELICITD_API_KEY") or dev_api_key(args.data_dir),
            user=args.user,
            headless=args.headless,
            screenshots=args.screenshots,
        )
        asyncio.run(run(options))
    except (DemoError, ChromiumMissing) as problem:
        print(f"make demo: {problem}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("\nmake demo: stopped. The link stays valid: run `make demo` again to pick it up.", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
