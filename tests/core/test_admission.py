"""Admission control (``service.admission``) on a real server: with ``ELICITD_MAX_IN_FLIGHT=2``,
two slow requests in progress make the next short one get ``503 overloaded`` at once, while
health, metrics, the event stream and parked long-polls go on as before."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
from litestar import get

from service.admission import Admission
from service.errors import ConfigurationError
from service.flows.schemas import Subject
from service.settings import KeyRing, Settings
from tests.flows.helpers import create_external, resolve_body
from tests.support.apps import RunningApp, ServerClientHandle, new_server_client, running_app

BOUND = 2


class Gate:
    """What the slow test route waits on: the test sees how many entered and lets them go."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """Made again inside each test's event loop."""
        self.entered = 0
        self.open = asyncio.Event()


GATE = Gate()


@get("/test/slow", include_in_schema=False)
async def slow() -> dict[str, bool]:
    GATE.entered += 1
    await GATE.open.wait()
    return {"ok": True}


@pytest.fixture
async def bounded(make_settings: Callable[..., Settings]) -> AsyncIterator[RunningApp]:
    GATE.reset()
    async with running_app(make_settings(max_in_flight=BOUND), routes=[slow]) as app:
        yield app


async def _until(check: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 10
    while not check():
        assert time.monotonic() < deadline
        await asyncio.sleep(0.01)


async def _timed(http: httpx.AsyncClient, method: str, path: str, **kwargs: Any) -> tuple[httpx.Response, float]:
    started = time.perf_counter()
    response = await http.request(method, path, **kwargs)
    return response, time.perf_counter() - started


def _overloaded(response: httpx.Response) -> None:
    assert response.status_code == 503, response.text
    assert response.headers["retry-after"] == "1"
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json() == {
        "type": "https://elicitd.dev/problems/overloaded",
        "title": "Service Unavailable",
        "status": 503,
        "code": "overloaded",
        "detail": "This server is at its limit of requests in progress; retry after the time in Retry-After.",
    }


async def _refusals(http: httpx.AsyncClient) -> float:
    text = (await http.get("/metrics")).text
    return float(next(line.split()[1] for line in text.splitlines() if line.startswith("elicitd_overloaded_total ")))


async def test_beyond_the_bound_a_short_request_is_refused_at_once_and_the_admitted_ones_succeed(
    bounded: RunningApp, subject: Subject
) -> None:
    client: ServerClientHandle = await new_server_client(bounded)
    async with bounded.http(client.api_key) as http, bounded.http(client.api_key) as probe:
        flow_id = (await create_external(http, subject))["flow"]["id"]
        admitted = [asyncio.create_task(http.get("/test/slow")) for _ in range(BOUND)]
        await _until(lambda: GATE.entered == BOUND)

        refused, seconds = await _timed(probe, "GET", "/test/slow")
        _overloaded(refused)
        assert seconds < 0.05, seconds
        status, seconds = await _timed(probe, "GET", f"/v1/flows/{flow_id}")
        _overloaded(status)
        assert seconds < 0.05, seconds
        resolve, _ = await _timed(probe, "POST", "/v1/flows/resolve", json={"subject": {}})
        _overloaded(resolve)
        # Probes and the scrape are never refused; the refusals so far are counted.
        assert (await probe.get("/healthz")).status_code == 200
        assert (await probe.get("/readyz")).status_code == 200
        assert await _refusals(probe) == 3.0
        # The event stream is not a short request: it opens while the bound is full.
        async with probe.stream("GET", "/v1/events") as stream:
            assert stream.status_code == 200
            assert stream.headers["content-type"].startswith("text/event-stream")

        assert GATE.entered == BOUND
        GATE.open.set()
        assert [r.status_code for r in await asyncio.gather(*admitted)] == [200] * BOUND
        # Their slots are free again.
        assert (await probe.get(f"/v1/flows/{flow_id}")).status_code == 200
        assert (await probe.get("/test/slow")).status_code == 200


async def test_long_polls_are_not_counted_against_the_bound(bounded: RunningApp, subject: Subject) -> None:
    client = await new_server_client(bounded)
    auth = {"Authorization": f"Bearer {client.api_key}"}
    async with httpx.AsyncClient(base_url=bounded.url, headers=auth, timeout=30) as http:
        created = await create_external(http, subject)
        flow_id = created["flow"]["id"]
        admitted = [asyncio.create_task(http.get("/test/slow")) for _ in range(BOUND)]
        await _until(lambda: GATE.entered == BOUND)

        # The bound is full, yet three long-polls arriving together are all taken and parked.
        parked = [
            asyncio.create_task(http.get(f"/v1/flows/{flow_id}", params={"wait_seconds": 20})) for _ in range(BOUND + 1)
        ]
        await _until(lambda: bounded.state.hub.waiter_count == BOUND + 1)
        _overloaded((await _timed(http, "GET", "/test/slow"))[0])

        GATE.open.set()
        assert [r.status_code for r in await asyncio.gather(*admitted)] == [200] * BOUND
        # A resolve that waits counts until it parks, then frees its slot.
        waiting = asyncio.create_task(http.post("/v1/flows/resolve", json=resolve_body(created, subject, wait=20)))
        await _until(lambda: bounded.state.hub.waiter_count == BOUND + 2)
        # It registers as a waiter before its first read; once that read is done it holds no slot.
        admission = bounded.app.asgi_handler
        assert isinstance(admission, Admission)
        await _until(lambda: admission.in_flight == 0)
        # Parked, none holds a slot: two short requests are admitted beside them.
        GATE.open = asyncio.Event()
        more = [asyncio.create_task(http.get("/test/slow")) for _ in range(BOUND)]
        await _until(lambda: GATE.entered == 2 * BOUND)
        GATE.open.set()
        assert [r.status_code for r in await asyncio.gather(*more)] == [200] * BOUND

        done = await http.post(f"/v1/flows/{flow_id}/complete", json={"result": {"ok": True}})
        assert done.status_code == 200, done.text
        answers = await asyncio.gather(*parked)
        assert [(r.status_code, r.json()["flow"]["status"]) for r in answers] == [(200, "completed")] * (BOUND + 1)
        resolved = await waiting
        assert (resolved.status_code, resolved.json()["outcome"]) == (200, "completed"), resolved.text


def test_the_setting_reads_zero_as_no_bound() -> None:
    env = {
        "ELICITD_DATABASE_URL": "postgresql://u@db/elicitd",
        "ELICITD_PUBLIC_URL": "https://elicitd.example.com",
        "ELICITD_KEYS": KeyRing.generate_entry("k1"),
    }
    assert Settings.from_env(env | {"ELICITD_MAX_IN_FLIGHT": "0"}).max_in_flight == 0
    assert Settings.from_env(env).max_in_flight == 64
    with pytest.raises(ConfigurationError, match="ELICITD_MAX_IN_FLIGHT must not be negative"):
        Settings.from_env(env | {"ELICITD_MAX_IN_FLIGHT": "-1"})
