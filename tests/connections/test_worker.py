"""``elicitd worker``: the upkeep in a process of its own. A replica serving with its upkeep off
(``ELICITD_BACKGROUND_TASKS=false``) refreshes nothing by itself; a worker process on the same
database refreshes the due tokens (each once, at the real OAuth test server) and stops cleanly on
SIGTERM. On a database of its own: a worker takes every due token it finds."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import uuid
from collections.abc import Callable

from service.settings import Settings
from tests.connections.conftest import Env, register_provider
from tests.connections.test_refresh_wave import refresh_starts, seed_due, wave_rows
from tests.support import backends
from tests.support.apps import running_app
from tests.support.oauth_server import OAuthServer
from tests.support.providers import register_issuer
from tests.support.waiting import until

KEYS = "test2:" + "A" * 43 + ",test1:" + "B" * 43  # tests/conftest.py's TEST_KEYS


async def stopped(worker: asyncio.subprocess.Process) -> tuple[bytes, bytes]:
    """Its output once it has exited; killed, and its log's end in the failure, when SIGTERM did
    not stop it within 30 s."""
    try:
        return await asyncio.wait_for(worker.communicate(), 30)
    except TimeoutError:
        worker.kill()
        _, err = await worker.communicate()
        raise AssertionError(f"the worker did not stop on SIGTERM: {err.decode()[-3000:]}") from None


async def test_a_worker_refreshes_what_a_serving_only_replica_leaves_and_stops_on_sigterm(
    make_settings: Callable[..., Settings], oauth: OAuthServer, backend: backends.Backends
) -> None:
    async with backends.migrated_database(backend.server_url) as url:
        serving_only = make_settings(database_url=url, background_tasks=False, extra={"REFRESH_PROACTIVE": "true"})
        async with running_app(serving_only) as app:
            await register_issuer(app, oauth)
            env = Env(app=app, oauth=oauth, provider=f"files-{uuid.uuid4().hex[:8]}")
            await register_provider(app, oauth, env.provider)
            ids = await seed_due(env, 5)
            seen = len(oauth.token_requests())
            await asyncio.sleep(1.0)  # a replica without upkeep: no pass runs
            assert await wave_rows(env, ids) == [(False, False)] * 5

            worker = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "service.cli",
                "worker",
                "--nice",
                "5",
                env={
                    **os.environ,
                    "ELICITD_DATABASE_URL": url,
                    "ELICITD_REDIS_URL": backend.redis_url or "",
                    "ELICITD_KEYS": KEYS,
                    "ELICITD_PUBLIC_URL": "http://127.0.0.1:8000",
                    "ELICITD_LOG_JSON": "true",
                    "ELICITD_REFRESH_PASS_SECONDS": "0.2",
                    "ELICITD_PROBE_ENABLED": "false",
                },
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
            try:

                async def refreshed() -> bool:
                    return await wave_rows(env, ids) == [(True, False)] * 5

                await until(refreshed, timeout=60, what="the worker's refreshes")
            finally:
                worker.send_signal(signal.SIGTERM)
                out, err = await stopped(worker)
    assert worker.returncode == 0, err.decode()[-2000:]
    assert len(refresh_starts(env, seen)) == 5  # each refresh token used once
    logged = [json.loads(line) for line in (out + err).decode().splitlines() if line.startswith("{")]
    messages = [entry.get("msg") for entry in logged]
    assert "worker started" in messages
    assert messages[-1] == "worker stopped"


def test_a_replica_is_told_to_leave_its_upkeep_by_the_environment() -> None:
    base = {
        "ELICITD_DATABASE_URL": "postgresql://db/x",
        "ELICITD_KEYS": KEYS,
        "ELICITD_PUBLIC_URL": "https://e.example",
    }
    assert Settings.from_env(base).background_tasks is True
    assert Settings.from_env({**base, "ELICITD_BACKGROUND_TASKS": "false"}).background_tasks is False
