"""One benchmark server process: ``python bench/serve.py FACTORY --port N [--workers N] [--impl …]``.

elicitd's apps (``elicitd_factory:create``) are served as ``elicitd serve`` serves them:
``uvicorn.run`` with ``service.serving.server_options()`` (uvloop, and httptools through elicitd's
request-head-bounding protocol), ``proxy_headers``, no server header, no access log. The floor
and the ORM baseline are plain Litestar apps and get plain uvloop + httptools. ``--impl stdlib``
serves every app with asyncio + h11, to measure what the compiled loop and parser are worth.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import uvicorn

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def options(factory: str, impl: str) -> dict[str, Any]:
    if impl == "stdlib":
        return {"loop": "asyncio", "http": "h11"}
    if factory.startswith("elicitd_factory:"):
        from service.serving import server_options

        return {**server_options(), "proxy_headers": True, "server_header": False}
    from service.serving import uvicorn_options

    return dict(uvicorn_options())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("factory")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--impl", choices=["auto", "stdlib"], default="auto")
    args = parser.parse_args()
    uvicorn.run(
        args.factory,
        factory=True,
        app_dir=str(Path(__file__).resolve().parent),
        host=args.host,
        port=args.port,
        workers=args.workers,
        log_config=None,
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=2,
        **options(args.factory, args.impl),
    )


if __name__ == "__main__":
    main()
