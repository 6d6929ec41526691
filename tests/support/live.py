"""Steps against an elicitd running outside the test process: a ``serve`` subprocess, an
installed wheel, a container, a compose project, a fleet of two releases.

Each such test waits for ``/readyz`` and then makes an ``external`` flow to have something to read
or park on; the steps are the same everywhere, so they are written once here.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable

import httpx

from service.settings import KeyRing

CLI = [sys.executable, "-m", "service.cli"]


def serve_env(database_url: str, redis_url: str, port: int, **settings: str) -> dict[str, str]:
    """The environment of an ``elicitd`` subprocess on these backends and this port: nothing
    ``ELICITD_*`` inherited, a key ring of its own, a Redis channel of its own; ``settings`` are
    more ``ELICITD_*`` values by their names without the prefix."""
    return {k: v for k, v in os.environ.items() if not k.startswith("ELICITD_")} | {
        "ELICITD_DATABASE_URL": database_url,
        "ELICITD_REDIS_URL": redis_url,
        "ELICITD_PUBLIC_URL": f"http://127.0.0.1:{port}",
        "ELICITD_KEYS": KeyRing.generate_entry("k1"),
        "ELICITD_REDIS_CHANNEL": f"elicitd:live:{port}",
        **{f"ELICITD_{name}": value for name, value in settings.items()},
    }


async def unproven_client(env: dict[str, str], name: str) -> dict[str, str]:
    """``elicitd servers create NAME --subject-proof none`` in ``env``: its ``Authorization`` header."""
    created = await asyncio.to_thread(
        subprocess.run,
        [*CLI, "servers", "create", name, "--subject-proof", "none", "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert created.returncode == 0, created.stderr
    return {"Authorization": f"Bearer {json.loads(created.stdout)['api_key']}"}


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
