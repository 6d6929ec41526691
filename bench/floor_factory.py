"""The floor: what the hardware, PostgreSQL, the driver and Litestar cost, and nothing else.

``python -m uvicorn --factory floor_factory:create``. A Litestar app over a raw asyncpg pool of
``ELICITD_DB_POOL_SIZE`` (10) connections, no ORM, no authentication, no logging, msgspec JSON:

* ``GET /flows/{uuid}`` — one ``SELECT id, kind, status, expires_at, result FROM flows WHERE id = $1``
  (a prepared statement, as asyncpg caches it), the five columns back as JSON. elicitd's status
  read, resolve and token endpoints are measured against this.
* ``POST /flows`` — the statement ``POST /v1/flows`` runs to create a flow (``INSERT … ON CONFLICT
  DO NOTHING RETURNING``, with its ``created`` audit event in the same statement), committed, the
  new id back as JSON. elicitd's create is measured against this.

* ``GET /raw/flows/{uuid}`` — the same read and answer with no framework at all: a bare ASGI
  function in front of Litestar parses the id, runs the statement on the same pool and sends the
  two ASGI messages itself. elicitd's hot routes (``service/flows/hot.py``) skip Litestar's
  per-request work, so status and resolve are also reported against this thinner reference
  (``asgi_floor_*`` in the final JSON line); the targets stay on the Litestar floor.
* ``POST /raw/flows`` — the insert the same way: the bare function reads the body, decodes it
  with msgspec, runs ``POST /flows``'s statement and sends the answer. elicitd's create is also
  reported against it (``create_asgi_floor_ratio``).

No elicitd module is imported: the floor must not get faster or slower when elicitd changes.
"""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from collections.abc import AsyncIterator
from datetime import datetime
from typing import Any

import asyncpg
import msgspec
from litestar import Litestar, Response, get, post
from litestar.exceptions import NotFoundException

READ = "SELECT id, kind, status, expires_at, result FROM flows WHERE id = $1"
# The statement of ``service.flows.repository.insert_pending``, with positional parameters.
INSERT = """
WITH f AS (
    INSERT INTO flows (id, server_client_id, kind, subject_iss, subject_sub, provider, scopes, params,
                       context, reuse_key, message, external_url, connection_id, expires_at)
    VALUES ($1, $2, 'external', $3, $4, NULL, '{}', '{}'::jsonb, $5::jsonb, $6, 'Continue in your browser',
            $7, NULL, now() + make_interval(secs => $8))
    ON CONFLICT (server_client_id, subject_iss, subject_sub, kind, reuse_key) WHERE status = 'pending'
    DO NOTHING
    RETURNING id, status
), ev AS (
    INSERT INTO flow_events (flow_id, type, actor, to_status, detail)
    SELECT f.id, 'created', 'api', 'pending', '{}'::jsonb FROM f
)
SELECT id, status FROM f
"""


class Row(msgspec.Struct):
    id: uuid.UUID
    kind: str
    status: str
    expires_at: datetime
    result: dict[str, Any] | None


class Subject(msgspec.Struct):
    iss: str
    sub: str


class CreateBody(msgspec.Struct):
    subject: Subject
    kind: str
    url: str
    context: dict[str, Any] = {}


class Created(msgspec.Struct):
    id: uuid.UUID
    status: str


_decode_json = msgspec.json.decode
_encode_json = msgspec.json.Encoder().encode


def _uuid7() -> uuid.UUID:
    """Time-ordered ids, as elicitd inserts them (random ones would scatter the B-tree inserts)."""
    value = (time.time_ns() // 1_000_000) << 80 | 0x7 << 76 | int.from_bytes(os.urandom(10), "big") & ((1 << 76) - 1)
    return uuid.UUID(int=value & ~(0b11 << 62) | 0b10 << 62)


def _encode_text(value: Any) -> str:
    return _encode_json(value).decode()


async def _init(conn: asyncpg.Connection) -> None:
    await conn.set_type_codec("jsonb", schema="pg_catalog", encoder=_encode_text, decoder=_decode_json)


def create() -> _BareRead:
    dsn = os.environ["ELICITD_DATABASE_URL"]
    pool_size = int(os.environ.get("ELICITD_DB_POOL_SIZE", "10"))
    client_id = uuid.UUID(os.environ.get("ELICITD_BENCH_CLIENT_ID", str(uuid.UUID(int=0))))
    pools: list[asyncpg.Pool] = []

    @get("/flows/{flow_id:uuid}")
    async def read_flow(flow_id: uuid.UUID) -> Row:
        row = await pools[0].fetchrow(READ, flow_id)
        if row is None:
            raise NotFoundException()
        return Row(*row)

    @post("/flows")
    async def create_flow(data: CreateBody) -> Response[Created]:
        row = await pools[0].fetchrow(
            INSERT, _uuid7(), client_id, data.subject.iss, data.subject.sub, data.context, "bench", data.url, 900
        )
        if row is None:
            raise NotFoundException()
        return Response(Created(*row), status_code=201)

    @get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @contextlib.asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        pool = await asyncpg.create_pool(
            dsn.replace("postgresql+asyncpg://", "postgresql://"),
            min_size=pool_size,
            max_size=pool_size,
            init=_init,
        )
        pools.append(pool)
        try:
            yield
        finally:
            await pool.close()

    app = Litestar(
        route_handlers=[read_flow, create_flow, healthz], lifespan=[lifespan], debug=False, logging_config=None
    )
    return _BareRead(app, pools, client_id)


_RAW_PREFIX = "/raw/flows/"
_RAW_INSERT = "/raw/flows"
_JSON_HEADERS = [(b"content-type", b"application/json")]


class _BareRead:
    """``GET /raw/flows/{uuid}`` and ``POST /raw/flows`` answered as plain ASGI; everything else
    (and the lifespan) is Litestar's."""

    def __init__(self, app: Litestar, pools: list[asyncpg.Pool], client_id: uuid.UUID) -> None:
        self.app = app
        self.pools = pools
        self.client_id = client_id

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"] == _RAW_INSERT and scope["method"] == "POST":
            await self._insert(receive, send)
            return
        if scope["type"] != "http" or not scope["path"].startswith(_RAW_PREFIX):
            await self.app(scope, receive, send)
            return
        try:
            flow_id = uuid.UUID(scope["path"][len(_RAW_PREFIX) :])
        except ValueError:
            row = None
        else:
            row = await self.pools[0].fetchrow(READ, flow_id)
        status, body = (200, _encode_json(Row(*row))) if row is not None else (404, b'{"status":404}')
        headers = [*_JSON_HEADERS, (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body, "more_body": False})

    async def _insert(self, receive: Any, send: Any) -> None:
        chunks = []
        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        data = msgspec.json.decode(b"".join(chunks), type=CreateBody)
        row = await self.pools[0].fetchrow(
            INSERT, _uuid7(), self.client_id, data.subject.iss, data.subject.sub, data.context, "bench", data.url, 900
        )
        status, body = (201, _encode_json(Created(*row))) if row is not None else (409, b'{"status":409}')
        headers = [*_JSON_HEADERS, (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body, "more_body": False})
