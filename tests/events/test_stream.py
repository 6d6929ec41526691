"""``GET /v1/events`` against real elicitd instances, PostgreSQL and Redis: every event once, in
order, to every consumer; resumable by ``Last-Event-ID``; a consumer that stops reading delays
neither transitions nor other consumers."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from sqlalchemy import text
from standardwebhooks import Webhook

from elicitd_client import ElicitdClient
from elicitd_client.events import Event, EventsExpired, SseParser
from service.events import repository as events_repo
from service.settings import Settings
from service.signals.webhooks import EVENT_ID
from tests.admin.conftest import complete_flow, create_flow, hooked_client
from tests.support.apps import RunningApp, ServerClientHandle, new_server_client, running_app
from tests.support.waiting import until

FAST = {"EVENTS_HEARTBEAT_SECONDS": "0.3"}


@dataclass
class Reader:
    """One consumer over raw HTTP: what it received, frame by frame."""

    events: list[Event] = field(default_factory=list)
    heartbeats: int = 0
    opened_at: int | None = None
    status: int | None = None
    # The server ended the stream (the response's body finished).
    ended: bool = False


@contextlib.asynccontextmanager
async def reading(
    app: RunningApp, client: ServerClientHandle, *, last_event_id: int | None = None
) -> AsyncIterator[Reader]:
    """Read the stream in the background until the block ends (then disconnect)."""
    reader = Reader()
    opened = asyncio.Event()

    async def run() -> None:
        headers = {"Authorization": f"Bearer {client.api_key}"}
        if last_event_id is not None:
            headers["Last-Event-ID"] = str(last_event_id)
        async with (
            httpx.AsyncClient(base_url=app.url, timeout=httpx.Timeout(30)) as http,
            http.stream("GET", "/v1/events", headers=headers) as response,
        ):
            reader.status = response.status_code
            parser = SseParser()
            async for line in response.aiter_lines():
                if line.startswith(": keepalive"):
                    reader.heartbeats += 1
                message = parser.feed_line(line)
                if reader.opened_at is None and parser.last_event_id is not None:
                    reader.opened_at = int(parser.last_event_id)
                    opened.set()
                if message is not None:
                    seq, kind, data = message
                    assert seq is not None
                    reader.events.append(Event.parse(int(seq), kind, data))
            reader.ended = True

    task = asyncio.get_running_loop().create_task(run())
    done = asyncio.ensure_future(opened.wait())
    await asyncio.wait((task, done), return_when=asyncio.FIRST_COMPLETED)
    done.cancel()
    if task.done():
        task.result()
    try:
        yield reader
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def finish(app: RunningApp, client: ServerClientHandle, count: int) -> list[str]:
    """``count`` flows created and completed; their ids in completion order."""
    done = []
    for _ in range(count):
        flow_id = await create_flow(app, client)
        assert (await complete_flow(app, client, flow_id)).status_code == 200
        done.append(flow_id)
    return done


def flow_ids(events: list[Event]) -> list[str]:
    return [str(e.data["flow_id"]) for e in events]


async def test_each_terminal_transition_is_an_event_signed_like_its_webhook(
    make_settings: Callable[..., Settings],
) -> None:
    async with running_app(make_settings(extra=FAST)) as app:
        client, secret = await hooked_client(app)
        async with reading(app, client) as reader:
            completed = await create_flow(app, client)
            assert (await complete_flow(app, client, completed, {"answer": 42})).status_code == 200
            failed = await create_flow(app, client)
            async with app.http(client.api_key) as http:
                response = await http.post(f"/v1/flows/{failed}/fail", json={"code": "nope", "message": "no"})
            assert response.status_code == 200
            await until(lambda: len(reader.events) == 2, what="two events")
        async with app.state.sessions() as session:
            outbox: dict[uuid.UUID, uuid.UUID] = dict(
                (
                    await session.execute(
                        text("SELECT flow_id, id FROM webhook_outbox WHERE server_client_id = :c"), {"c": client.id}
                    )
                ).all()
            )
    first, second = reader.events
    assert reader.opened_at == 0
    assert [first.seq, second.seq] == [1, 2]
    assert [first.type, second.type] == ["flow.completed", "flow.failed"]
    assert (first.data["flow_id"], first.data["status"]) == (completed, "completed")
    assert (second.data["flow_id"], second.data["error_code"]) == (failed, "nope")
    # The same event id as the webhook delivery of that transition, and a body any Standard
    # Webhooks library verifies with the client's webhook secret.
    assert first.id == EVENT_ID.format(outbox[uuid.UUID(completed[3:])])
    assert Webhook(secret).verify(first.body, first.headers)["data"]["flow_id"] == completed
    assert first.verify(secret)["id"] == first.id


async def test_resume_after_a_disconnect_loses_and_repeats_nothing(make_settings: Callable[..., Settings]) -> None:
    async with running_app(make_settings(extra=FAST)) as app:
        client = await new_server_client(app)
        async with reading(app, client) as before:
            early = await finish(app, client, 3)
            await until(lambda: len(before.events) == 3, what="the first three events")
        resume_after = before.events[-1].seq
        missed = await finish(app, client, 4)  # while nobody is connected
        async with reading(app, client, last_event_id=resume_after) as after:
            await until(lambda: len(after.events) == 4, what="the missed events")
            later = await finish(app, client, 2)
            await until(lambda: len(after.events) == 6, what="the live events")
        # Resuming in the middle of what the first reader saw repeats only what came after.
        async with reading(app, client, last_event_id=before.events[0].seq) as middle:
            await until(lambda: len(middle.events) == 8, what="everything after the first")
    assert flow_ids(before.events) == early
    assert flow_ids(after.events) == missed + later
    assert [e.seq for e in before.events + after.events] == list(range(1, 10))
    assert flow_ids(middle.events) == early[1:] + missed + later
    assert after.opened_at == resume_after


async def test_the_client_iterator_resumes_by_itself_across_a_cut_connection(
    make_settings: Callable[..., Settings],
) -> None:
    """``ElicitdClient.events()`` through a proxy that drops the connection mid-stream."""
    async with running_app(make_settings(extra=FAST)) as app, cutting_proxy(app.url) as proxy:
        client = await new_server_client(app)
        got: list[Event] = []
        async with ElicitdClient(proxy.url, client.api_key) as api:
            stream = api.events()

            async def consume() -> None:
                async for event in stream:
                    got.append(event)

            task = asyncio.get_running_loop().create_task(consume())
            await until(lambda: stream.connections == 1, what="the stream open")
            first = await finish(app, client, 2)
            await until(lambda: len(got) == 2, what="two events")
            proxy.cut()
            second = await finish(app, client, 3)  # while the connection is down or reopening
            await until(lambda: len(got) == 5, what="the events after the cut")
            task.cancel()
    assert stream.connections >= 2
    assert flow_ids(got) == first + second
    assert [e.seq for e in got] == [1, 2, 3, 4, 5]


async def test_two_consumers_each_receive_every_event(make_settings: Callable[..., Settings]) -> None:
    async with running_app(make_settings(extra=FAST)) as app:
        client = await new_server_client(app)
        other = await new_server_client(app)
        async with reading(app, client) as one, reading(app, client) as two, reading(app, other) as stranger:
            done = await finish(app, client, 5)
            await until(lambda: len(one.events) == 5 and len(two.events) == 5, what="both consumers")
            assert app.state.events.consumers_of(client.id) == 2
        assert stranger.events == []  # another server client's stream says nothing of these
    assert flow_ids(one.events) == flow_ids(two.events) == done


async def test_consumers_on_another_replica_are_woken_and_without_redis_still_served(
    make_settings: Callable[..., Settings],
) -> None:
    """Replica A moves the flows; the stream is read on replica B: woken through Redis, and when
    neither has Redis, found by B's poll."""
    for redis in (True, False):
        overrides: dict[str, Any] = {"extra": {**FAST, "EVENTS_POLL_SECONDS": "600"}}
        if not redis:
            overrides["redis_url"] = None
        settings = make_settings(**overrides)
        async with running_app(settings) as a, running_app(settings) as b:
            client = await new_server_client(a)
            async with reading(b, client) as reader:
                done = await finish(a, client, 3)
                await until(lambda: len(reader.events) == 3, timeout=15, what="the events on the other replica")
            assert flow_ids(reader.events) == done


async def test_a_consumer_that_stops_reading_slows_nothing(make_settings: Callable[..., Settings]) -> None:
    # No heartbeat while the test runs: the stalled consumer's one read is an event.
    settings = make_settings(extra={"EVENTS_HEARTBEAT_SECONDS": "600", "EVENTS_BUFFER_SIZE": "4"})
    async with running_app(settings) as app:
        client = await new_server_client(app)
        hub = app.state.events
        async with stalled_socket(app, client), reading(app, client) as live:
            # A consumer in this process that takes one batch and then stops reading.
            stalled = hub.stream(client.id, await hub.start(client.id, None))
            assert isinstance(stalled, AsyncGenerator)
            first = asyncio.ensure_future(anext(stalled))
            await until(lambda: hub.consumers_of(client.id) == 3, what="three consumers")
            loop = asyncio.get_running_loop()
            started = loop.time()
            done = await finish(app, client, 30)
            elapsed = loop.time() - started
            await until(lambda: len(live.events) == 30, what="the live consumer has everything")
            batch = await first
            assert batch is not None and len(batch) >= 1
            # It fell behind (its buffer of 4 overflowed) and now catches up from PostgreSQL.
            rest: list[events_repo.Row] = list(batch)
            try:
                while len(rest) < 30:
                    more = await anext(stalled)
                    if more is not None:
                        rest.extend(more)
            finally:
                await stalled.aclose()
    assert flow_ids(live.events) == done
    assert [r.payload["flow_id"] for r in rest] == done
    assert [r.seq for r in rest] == list(range(1, 31))
    assert elapsed < 30  # bounded only against a hang: no transition waited for a consumer


async def test_heartbeats_keep_an_idle_stream_alive(make_settings: Callable[..., Settings]) -> None:
    async with running_app(make_settings(extra=FAST)) as app:
        client = await new_server_client(app)
        async with reading(app, client) as reader:
            await until(lambda: reader.heartbeats >= 2, what="two heartbeats")
    assert reader.events == []


async def test_a_position_past_retention_is_gone_and_one_ahead_is_refused(
    make_settings: Callable[..., Settings],
) -> None:
    async with running_app(make_settings(extra=FAST)) as app:
        client = await new_server_client(app)
        await finish(app, client, 3)
        async with app.state.sessions() as session:
            await session.execute(
                text(
                    "UPDATE events SET created_at = now() - interval '30 days' WHERE server_client_id = :c AND seq < 3"
                ),
                {"c": client.id},
            )
            purged = await app.state.events.purge(session)
            await session.commit()
        assert purged >= 2
        async with app.http(client.api_key) as http:
            gone = await http.get("/v1/events", headers={"Last-Event-ID": "0"})
            ahead = await http.get("/v1/events", headers={"Last-Event-ID": "99"})
            garbage = await http.get("/v1/events", headers={"Last-Event-ID": "x1"})
            anonymous = await http.get("/v1/events", headers={"Authorization": ""})
        assert (gone.status_code, gone.json()["code"]) == (410, "events_expired")
        assert (ahead.status_code, ahead.json()["code"]) == (400, "invalid_last_event_id")
        assert (garbage.status_code, garbage.json()["code"]) == (400, "invalid_last_event_id")
        assert anonymous.status_code == 401
        # From the last purged position on, the stream still resumes.
        async with reading(app, client, last_event_id=2) as reader:
            await until(lambda: len(reader.events) == 1, what="the kept event")
        assert reader.events[0].seq == 3
        async with ElicitdClient(app.url, client.api_key) as api:
            with pytest.raises(EventsExpired) as expired:
                async for _ in api.events(last_event_id=0):
                    pass
        assert (expired.value.status, expired.value.code) == (410, "events_expired")


# ---- helpers ------------------------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def stalled_socket(app: RunningApp, client: ServerClientHandle) -> AsyncIterator[None]:
    """A consumer that sends its request and never reads a byte, with a tiny receive window."""
    port = int(app.url.rsplit(":", 1)[1])
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)
    sock.setblocking(False)
    loop = asyncio.get_running_loop()
    await loop.sock_connect(sock, ("127.0.0.1", port))
    request = f"GET /v1/events HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {client.api_key}\r\n\r\n"
    await loop.sock_sendall(sock, request.encode())
    try:
        yield
    finally:
        sock.close()


@dataclass
class CuttingProxy:
    url: str
    server: asyncio.Server
    writers: list[asyncio.StreamWriter] = field(default_factory=list)

    def cut(self) -> None:
        """Drop every connection in flight (as a restarting load balancer would)."""
        for writer in self.writers:
            writer.transport.abort()
        self.writers.clear()


@contextlib.asynccontextmanager
async def cutting_proxy(target: str) -> AsyncIterator[CuttingProxy]:
    host, port = target.removeprefix("http://").split(":")
    proxy: CuttingProxy

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, OSError):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        writer.transport.abort()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        upstream_reader, upstream_writer = await asyncio.open_connection(host, int(port))
        proxy.writers.extend([writer, upstream_writer])
        await asyncio.gather(pipe(reader, upstream_writer), pipe(upstream_reader, writer))

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    bound = server.sockets[0].getsockname()[1]
    proxy = CuttingProxy(url=f"http://127.0.0.1:{bound}", server=server)
    try:
        yield proxy
    finally:
        proxy.cut()
        server.close()
