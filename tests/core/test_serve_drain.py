"""``elicitd serve`` on SIGTERM: an open event stream ends at once (its client resumes elsewhere
from ``Last-Event-ID``), a parked long-poll is answered at once with its flow as it stands (its
client asks again, elsewhere), and the process ends within ``drain_seconds`` plus the app's own
shutdown — the bound terminationGracePeriodSeconds
is sized from (docs/deploy.md). Before, one open event stream kept the process running until it
was killed."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import time

import httpx

from service.services import BACKGROUND_STOP_SECONDS, SHUTDOWN_SECONDS
from service.serving import drain_seconds
from tests.support import backends
from tests.support.apps import free_port
from tests.support.live import CLI, external_flow, serve_env, unproven_client, until_ready

MAX_WAIT = 10


async def test_sigterm_answers_the_long_poll_cuts_the_stream_and_ends_in_time(
    backend: backends.Backends, database_url: str
) -> None:
    port = free_port()
    env = serve_env(database_url, backend.redis_url, port, MAX_WAIT_SECONDS=str(MAX_WAIT))
    auth = await unproven_client(env, f"drain-{port}")
    server = subprocess.Popen(
        [*CLI, "serve", "--host", "127.0.0.1", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as http:
            await until_ready(http, what="elicitd serve", alive=lambda: server.poll() is None)
            flow = await external_flow(http, auth, "drain")

            async def stream() -> tuple[bytes, float]:
                received = b""
                async with http.stream("GET", "/v1/events", headers=auth) as events:
                    assert events.status_code == 200
                    async for chunk in events.aiter_bytes():  # a cut stream raises here
                        received += chunk
                return received, time.monotonic()

            streaming = asyncio.create_task(stream())
            parked = asyncio.create_task(http.get(f"/v1/flows/{flow}?wait_seconds={MAX_WAIT}", headers=auth))
            await asyncio.sleep(0.5)
            sent = time.monotonic()
            server.send_signal(signal.SIGTERM)
            answer = await parked
            answered = time.monotonic() - sent
            # Answered at once, as it stands, not at the end of its wait.
            assert (answer.status_code, answer.json()["flow"]["status"]) == (200, "pending")
            assert answered < 1.5, answered
            received, ended = await asyncio.wait_for(streaming, 30)
            # Ended by the server at once, whole, not cut when the stop ran out.
            assert received.startswith(b": elicitd events") and ended - sent < 1.5, ended - sent
        code = await asyncio.to_thread(server.wait, 30)
        took = time.monotonic() - sent
        # uvicorn raises SIGTERM again once the app has shut down (as PID 1 in a container, the
        # kernel ignores it and the exit code is 0): the log says the shutdown was complete.
        assert code == -signal.SIGTERM
        # Nothing waited for its deadline: the stop is the app's own shutdown, well inside the
        # bound uvicorn would hold it to (drain_seconds).
        assert took < 1.5 + BACKGROUND_STOP_SECONDS + SHUTDOWN_SECONDS < drain_seconds(MAX_WAIT), took
        assert server.stderr is not None
        log = server.stderr.read()
        assert "Application shutdown complete" in log and "Traceback" not in log
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
