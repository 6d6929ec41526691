"""``elicitd serve``: one serving process, or (``--workers N``) N of them on one listening socket.

One process runs one event loop on one core. ``--workers N`` binds the socket once and forks N
serving processes after the imports (``preload``), so each accepts from the same socket and the
kernel spreads connections between them, and they share the imported code's pages until one
writes them. Each process is a replica in every
other sense: its own pools, its own Redis subscription (a wake-up reaches a long-poll whichever
process holds it, as it reaches one on another machine), its own caches. The upkeep (expiry
sweeps, webhook delivery, proactive refresh, probes) runs in the first process only, so its paces
(``ELICITD_REFRESH_PROVIDER_RATE``) stay one process's, as with one worker; with
``ELICITD_BACKGROUND_TASKS=false`` none runs it (``elicitd worker`` does).

The supervisor (the first process, which serves nothing) forwards SIGTERM and SIGINT to the
serving processes, waits for their drain, and starts another in place of one that died. One that
exits with uvicorn's startup failure (3) stops them all with that code: a bad setting is not
retried forever. See docs/scaling.md, "Processes per machine".
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import Callable

from service.settings import Settings

logger = logging.getLogger("elicitd.serve")

STARTUP_FAILURE = 3
# A process that dies this soon after its start waits this long before it is started again.
QUICK_EXIT_SECONDS = 5.0
RESTART_PAUSE_SECONDS = 1.0
_POLL_SECONDS = 0.1


def cmd_serve(args: argparse.Namespace) -> None:
    from service.cli_exits import ensure_port_free
    from service.logs import configure_logging

    settings = Settings.from_env()
    ensure_port_free(args.host, args.port)
    configure_logging(settings)
    if args.migrate:
        from service.db.migrate import upgrade

        upgrade(settings.database_url)
    if settings.config_file:
        from service.config_file import apply_before_serving

        # Here, not only in the app's lifespan: a broken file then stops `serve` with one line
        # naming the file and the entry (exit 3), where a failing lifespan prints the server's
        # startup traceback.
        asyncio.run(apply_before_serving(settings))
    if args.workers == 1:
        serve_one(settings, host=args.host, port=args.port)
        return
    listening = socket.create_server((args.host, args.port), backlog=2048)
    preload()

    def serve(settings: Settings) -> None:
        serve_one(settings, host=args.host, port=args.port, sockets=[listening])

    sys.exit(Supervisor(settings, listening, args.workers, serve).run())


def preload() -> None:
    """Import what every serving process imports, once, before the fork, and freeze it: the
    processes then share those pages until one writes them, and no process's garbage collector
    walks (and so writes to) the objects made here (``gc.freeze``, as Python's documentation
    advises for a pre-forking server)."""
    import gc
    import importlib

    for name in ("uvicorn", "service.app", "service.services", "service.serving"):
        importlib.import_module(name)
    gc.collect()
    gc.freeze()


def serve_one(settings: Settings, *, host: str, port: int, sockets: list[socket.socket] | None = None) -> None:
    """One serving process until SIGTERM/SIGINT (``service.serving.serve``)."""
    import uvicorn

    from service.app import create_app
    from service.services import build_services
    from service.serving import drain_seconds, serve, server_options

    services = build_services(settings)
    config = uvicorn.Config(
        create_app(services),
        host=host,
        port=port,
        log_config=None,
        access_log=False,
        proxy_headers=True,
        server_header=False,
        timeout_graceful_shutdown=drain_seconds(settings.max_wait_seconds),
        **server_options(),
    )

    def drain() -> None:
        services.events.drain()
        services.flows.drain()

    serve(config, drain, sockets)


class Supervisor:
    """Forks ``count`` serving processes on ``listening`` and keeps that many until told to stop."""

    def __init__(
        self, settings: Settings, listening: socket.socket, count: int, serve: Callable[[Settings], None]
    ) -> None:
        self.settings = settings
        self.listening = listening
        self.count = count
        self._serve = serve
        self.children: dict[int, tuple[int, float]] = {}  # pid -> (index, started at)
        self.stopping = False
        self.code = 0

    def run(self) -> int:
        """The exit code: 0 after a stop, 3 when a process could not start."""
        # Before the first fork: a stop that arrives while the processes start reaches those
        # already started, and no more are started after it.
        signal.signal(signal.SIGTERM, self._stop)
        signal.signal(signal.SIGINT, self._stop)
        for index in range(self.count):
            if not self.stopping:
                self._start(index)
        logger.info("serving processes started", extra={"count": self.count})
        while self.children:
            self._reap()
            time.sleep(_POLL_SECONDS)  # the supervisor's only work: noticing a process that ended
        return self.code

    def _start(self, index: int) -> None:
        # The first process keeps the upkeep (when the settings run it here at all).
        settings = self.settings if index == 0 else self.settings.with_(background_tasks=False)
        pid = os.fork()
        if pid == 0:  # the serving process: it never returns into the supervisor's code
            code = 1
            try:
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                signal.signal(signal.SIGINT, signal.SIG_DFL)
                role = "upkeep" if settings.background_tasks else "serving"
                logger.info("serving process started", extra={"role": role, "count": index})
                self._serve(settings)
                code = 0
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 1
            except BaseException:
                logger.exception("serving process failed")
            finally:
                logging.shutdown()
                os._exit(code)
        self.children[pid] = (index, time.monotonic())

    def _stop(self, signum: int, frame: object) -> None:
        self.stopping = True
        for pid in self.children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)

    def _reap(self) -> None:
        for pid in list(self.children):
            try:
                done, status = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                done, status = pid, 0
            if done == 0:
                continue
            index, started = self.children.pop(pid)
            code = os.waitstatus_to_exitcode(status)
            if self.stopping:
                continue
            if code == STARTUP_FAILURE:
                logger.error("a serving process could not start; stopping the others", extra={"code": code})
                self.code = STARTUP_FAILURE
                self._stop(signal.SIGTERM, None)
                continue
            logger.warning("serving process ended; starting another", extra={"code": code})
            if time.monotonic() - started < QUICK_EXIT_SECONDS:
                time.sleep(RESTART_PAUSE_SECONDS)
            if not self.stopping:  # a stop may have come during the pause
                self._start(index)
