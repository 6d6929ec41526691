"""Steps against an elicitd running outside the test process: a ``serve`` subprocess, an
installed wheel, a container, a compose project, a fleet of two releases.

Each such test waits for ``/readyz`` and then makes an ``external`` flow to have something to read
or park on; the steps are the same everywhere, so they are written once here.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import httpx


async def until_ready(
    http: httpx.AsyncClient,
    *,
    what: str,
    timeout: float = 60.0,
    alive: Callable[[], bool] = lambda: True,
    wanted: Callable[[httpx.Response], bool] = lambda ready: True,
    pause: float = 0.2,
) -> httpx.Response:
    """``GET /readyz`` until it answers 200 (and ``wanted`` holds); its answer. Fails at once when
    ``alive()`` says the process has ended, else after ``timeout`` seconds, naming ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            ready = await http.get("/readyz")
            if ready.status_code == 200 and wanted(ready):
                return ready
        except httpx.TransportError:
            pass
        assert alive() and time.monotonic() < deadline, f"{what} did not become ready"
        await asyncio.sleep(pause)


async def external_flow(http: httpx.AsyncClient, auth: dict[str, str], sub: str) -> str:
    """A new pending ``external`` flow of ``sub`` at the test issuer; its ``fl_…`` id."""
    made = await http.post(
        "/v1/flows",
        headers=auth,
        json={
            "subject": {"iss": "https://id.example.com", "sub": sub},
            "kind": "external",
            "url": "https://app.example.com/step",
        },
    )
    assert made.status_code == 201, made.text
    return str(made.json()["flow"]["id"])
