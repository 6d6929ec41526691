"""The console's Overview (``/console/``): how flows, connections and webhooks are doing, and
whether PostgreSQL and Redis are ready, over a window (1 h, 24 h, 7 d).

Everything is drawn on the server (the charts are inline SVG with a table beside them), so the
page reads the same without a script; a small script (``/static/console-overview.js``) only
reloads the figures every 30 seconds while the page is visible.
"""

from __future__ import annotations

import logging
from typing import Annotated, Any

from litestar import Request, Response, get
from litestar.params import Parameter
from sqlalchemy import text

from service.console.deps import ConsoleDeps
from service.console.flow_words import STATES
from service.console.overview_data import STATUSES, WINDOWS, chart_bars, duration, overview, window_of
from service.console.render import render
from service.i18n import N_

logger = logging.getLogger("elicitd.console")

NAV = (0, "/console/", N_("Overview"))

CONNECTION_STATUS_NAMES = {
    "active": N_("Active"),
    "reauthorization_required": N_("Needs reauthorization"),
    "revoked": N_("Revoked"),
}
WINDOW_NAMES = {"1h": N_("Last hour"), "24h": N_("Last 24 hours"), "7d": N_("Last 7 days")}


async def _readiness(services: ConsoleDeps) -> dict[str, str]:
    """``ok`` / ``down`` / ``not_configured`` for PostgreSQL and Redis, as ``/readyz`` judges them."""
    postgres = "ok"
    try:
        async with services.read_sessions() as session:
            await session.execute(text("SELECT 1"))
    except Exception as exc:  # not ready, whatever the reason; the reason's type goes to the log
        logger.warning("console readiness: postgres down", extra={"error_type": type(exc).__name__})
        postgres = "down"
    hub = services.hub
    redis = "not_configured" if not hub.redis_configured else ("ok" if hub.redis_failure is None else "down")
    return {"postgres": postgres, "redis": redis}


@get("/", name="console-overview", include_in_schema=False)
async def overview_page(
    request: Request[Any, Any, Any],
    services: ConsoleDeps,
    window: Annotated[str | None, Parameter(query="window")] = None,
) -> Response[Any]:
    chosen = window_of(window)
    async with services.read_sessions() as session:
        figures = await overview(session, chosen)
    figures.readiness.update(await _readiness(services))
    return render(
        request,
        "console/overview.html",
        area="overview",
        o=figures,
        chart=chart_bars(figures.series),
        statuses=STATUSES,
        status_names=STATES,
        connection_status_names=CONNECTION_STATUS_NAMES,
        windows=list(WINDOWS),
        window_names=WINDOW_NAMES,
        duration=duration,
    )


ROUTES = [overview_page]
