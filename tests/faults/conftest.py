"""Fault tests run on dependencies of their own: each module starts a private PostgreSQL and a
private Redis (``tests/support/faults.py``), which its tests stop, pause and kill. The session's
shared servers (or the machine's) are never touched, whichever the rest of the suite uses."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from service.admin.tokens import Role, create_token, parse_lifetime
from service.settings import KeyRing, Settings
from tests.conftest import TEST_KEYS, TEST_SIGNING_KEY
from tests.support.apps import RunningApp
from tests.support.faults import PrivatePostgres, PrivateRedis, private_postgres, private_redis


@pytest.fixture(scope="module")
def postgres(request: pytest.FixtureRequest) -> Iterator[PrivatePostgres]:
    with private_postgres(request.module.__name__.rsplit(".", 1)[-1]) as server:
        yield server


@pytest.fixture(scope="module")
def redis(request: pytest.FixtureRequest) -> Iterator[PrivateRedis]:
    with private_redis(request.module.__name__.rsplit(".", 1)[-1]) as server:
        yield server


@pytest.fixture(scope="module")
async def fault_database(postgres: PrivatePostgres) -> str:
    """A migrated database on the module's PostgreSQL (its SQLAlchemy URL)."""
    return await postgres.create_database()


def fault_settings(database_url: str, redis_url: str | None, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "database_url": database_url,
        "redis_url": redis_url,
        "public_url": "http://127.0.0.1:0",
        "keys": TEST_KEYS,
        "redis_channel": f"elicitd:faults:{uuid.uuid4().hex[:8]}",
        "api_key_cache_seconds": 0,
        "log_json": True,
        "signing_key": TEST_SIGNING_KEY,
    }
    values.update(overrides)
    return Settings(**values)


@pytest.fixture(scope="module")
def make_fault_settings(fault_database: str, redis: PrivateRedis) -> Callable[..., Settings]:
    channel = f"elicitd:faults:{uuid.uuid4().hex[:8]}"

    def make(**overrides: Any) -> Settings:
        database_url = overrides.pop("database_url", fault_database)
        return fault_settings(database_url, redis.url, **{"redis_channel": channel, **overrides})

    return make


# TEST_KEYS as ELICITD_KEYS spells it, for replicas started as processes.
TEST_KEYS_ENV = "test2:" + "A" * 43 + ",test1:" + "B" * 43


def replica_env(settings: Settings) -> dict[str, str]:
    """The ELICITD_* variables that give an ``elicitd serve`` process the same settings."""
    assert KeyRing.parse(TEST_KEYS_ENV, name="test keys") == settings.keys
    return {
        "ELICITD_DATABASE_URL": settings.database_url,
        "ELICITD_REDIS_URL": settings.redis_url or "",
        "ELICITD_REDIS_CHANNEL": settings.redis_channel,
        "ELICITD_KEYS": TEST_KEYS_ENV,
        "ELICITD_SIGNING_KEY": settings.signing_key or "",
        "ELICITD_POLL_INTERVAL_SECONDS": str(settings.poll_interval_seconds),
        "ELICITD_API_KEY_CACHE_SECONDS": str(settings.api_key_cache_seconds),
        "ELICITD_DB_POOL_TIMEOUT_SECONDS": str(settings.db_pool_timeout_seconds),
    }


async def admin_token(app: RunningApp, role: str = "viewer") -> str:
    async with app.state.sessions() as session:
        created = await create_token(
            session, name=f"faults-{role}", role=Role.parse(role), lifetime=parse_lifetime("1h")
        )
        await session.commit()
    return created.secret
