"""Per-server-client quotas shared by every replica.

Flow creations per minute are counted in ``rate_limit_counters``, one row per (client, minute),
by a single conditional upsert: it increments only while the count is under the limit, so two
replicas can never both take the last slot. It runs inside the creating transaction, so a
creation that rolls back does not use up the quota. The same statement drops the client's
windows older than a few minutes. ``pending_per_subject`` is enforced by ``FlowService``.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from service.errors import RateLimited
from service.identity.keys import AuthenticatedClient

_HIT = """
WITH w AS (SELECT date_trunc('minute', now()) AS start),
gc AS (
    DELETE FROM rate_limit_counters
     WHERE server_client_id = :client AND window_start < (SELECT start FROM w) - interval '5 minutes'
),
hit AS (
    INSERT INTO rate_limit_counters (server_client_id, window_start, count)
    SELECT :client, start, 1 FROM w
    ON CONFLICT (server_client_id, window_start)
    DO UPDATE SET count = rate_limit_counters.count + 1 WHERE rate_limit_counters.count < :limit
    RETURNING count
)
SELECT (SELECT count FROM hit) AS count,
       ceil(extract(epoch FROM (SELECT start FROM w) + interval '1 minute' - now()))::int AS retry_after
"""


class FlowRateLimiter:
    """``FlowService.rate_limiter``: raises ``RateLimited`` (429 + Retry-After) when over quota."""

    def __init__(self, on_limited: Callable[[str], None] | None = None) -> None:
        self.on_limited = on_limited

    async def __call__(self, session: AsyncSession, client: AuthenticatedClient) -> None:
        limit = client.flows_per_minute
        if not limit:
            return
        row = (await session.execute(text(_HIT), {"client": client.id, "limit": limit})).one()
        if row.count is None:
            if self.on_limited is not None:
                self.on_limited("flows_per_minute")
            raise RateLimited("Too many flows created this minute.", retry_after=int(row.retry_after or 1))
