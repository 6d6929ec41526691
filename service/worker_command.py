"""``elicitd worker``: a serving replica's upkeep without the serving."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal

from service.settings import Settings

logger = logging.getLogger("elicitd.worker")


def cmd_worker(args: argparse.Namespace) -> None:
    """The upkeep every serving replica runs, in a process of its own: ``services.background()``
    until SIGTERM or SIGINT. Its work is the same statements and claims as a replica's (each
    pass claims with ``SKIP LOCKED``), so workers and replicas that still run upkeep share it.

    A replica runs its upkeep on the event loop that answers its requests, so a refresh wave's
    work waits requests behind it (the governor in ``service.connections.refresher`` only thins
    it). A worker takes that work to another process, which the kernel preempts; ``--nice`` lowers
    its priority so that on a shared machine the serving processes get the CPU first."""
    from service.logs import configure_logging
    from service.services import open_services

    settings = Settings.from_env()
    configure_logging(settings)
    if args.nice:
        os.nice(args.nice)

    async def work() -> None:
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        async with open_services(settings) as services, services.upkeep():
            logger.info("worker started")
            await stop.wait()
        logger.info("worker stopped")

    asyncio.run(work())
