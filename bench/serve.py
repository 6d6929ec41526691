"""One benchmark server process: ``python bench/serve.py FACTORY --port N [--workers N] [--impl …]``.

elicitd's apps (``elicitd_factory:create``) are served as ``elicitd serve`` serves them:
``uvicorn.run`` with ``service.serving.server_options()`` (uvloop, and httptools through elicitd's
request-head-bounding protocol, which also writes each response in one write), ``proxy_headers``,
no server header, no access log. The floor and the ORM baseline are plain Litestar apps on the
same serving layer (all but ``proxy_headers``, which is elicitd's own work). ``--impl stdlib``
serves every app with asyncio + h11, to measure what the compiled loop and parser are worth.
With ``--workers N`` elicitd runs as ``elicitd serve --workers N`` does (``supervised``); the
floor and the baseline run as uvicorn's own N workers.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

import uvicorn

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def options(factory: str, impl: str) -> dict[str, Any]:
    if impl == "stdlib":
        return {"loop": "asyncio", "http": "h11"}
    from service.serving import server_options

    # Every app on elicitd's serving layer (its protocol writes a response in one write where
    # stock uvicorn takes two): the floor is the cheapest the stack can answer, not a slower one.
    served = {**server_options(), "server_header": False}
    return {**served, "proxy_headers": True} if factory.startswith("elicitd_factory:") else served


def served(args: argparse.Namespace) -> dict[str, Any]:
    """What every benchmark server is given, one process or several."""
    return {
        "factory": True,
        "host": args.host,
        "port": args.port,
        "log_config": None,
        "log_level": "warning",
        "access_log": False,
        "timeout_graceful_shutdown": 2,
        **options(args.factory, args.impl),
    }


def supervised(args: argparse.Namespace) -> None:
    """elicitd with ``--workers N`` as ``elicitd serve --workers N`` runs it
    (``service.serve_command.Supervisor``): one socket, N forked processes, the upkeep in the first."""
    import socket

    from service.serve_command import Supervisor, preload
    from service.settings import Settings

    listening = socket.create_server((args.host, args.port), backlog=2048)
    sys.path.insert(0, str(Path(__file__).resolve().parent))  # what uvicorn.run's app_dir does
    preload()

    def serve(settings: Settings) -> None:
        if not settings.background_tasks:
            os.environ["ELICITD_BACKGROUND_TASKS"] = "false"  # the factory reads its settings itself
        uvicorn.Server(uvicorn.Config(args.factory, **served(args))).run(sockets=[listening])

    sys.exit(Supervisor(Settings.from_env(), listening, args.workers, serve).run())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("factory")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--impl", choices=["auto", "stdlib"], default="auto")
    args = parser.parse_args()
    if args.workers > 1 and args.factory.startswith("elicitd_factory:"):
        supervised(args)
        return
    uvicorn.run(args.factory, app_dir=str(Path(__file__).resolve().parent), workers=args.workers, **served(args))


if __name__ == "__main__":
    main()
