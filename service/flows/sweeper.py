"""Expire overdue flows in the background. Every replica runs one; ``SKIP LOCKED`` keeps them apart."""

from __future__ import annotations

import asyncio
import logging

from service.flows.service import FlowService

logger = logging.getLogger("elicitd.sweeper")


async def run_sweeper(flows: FlowService, interval: float) -> None:
    while True:
        try:
            # Drain in batches so a backlog clears quickly without one huge transaction.
            while await flows.sweep_once() >= flows.settings.sweep_batch_size:
                await asyncio.sleep(0)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # keep sweeping after a database hiccup
            logger.warning("sweep failed", extra={"error_type": type(exc).__name__})
        await asyncio.sleep(interval)
