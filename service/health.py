"""Liveness and readiness. Readiness reports PostgreSQL and Redis separately: without Redis the
service still works (by polling), so it stays ready and says it is degraded. ``redis`` and
``wakeups`` come from the same fact (the waiter hub's subscription is healthy), as does the
``elicitd_redis_fallback`` metric, so the three always agree.

A replica is not ready while the database's schema is older than its code expects (``"schema":
"behind"``): during a rolling upgrade the new replicas wait for ``elicitd migrate`` before they take
traffic, instead of failing requests on a column that is not there yet. A schema newer than the code
(``"ahead"``: the migration of the next release has run while this replica still serves) is ready:
every migration is written so that the previous release keeps working on it (docs/deploy.md).

The answer says only ``down``; the server log says why — once when a dependency goes down (or
fails for a new reason) and once when it is back, not on every probe: an orchestrator probes every
few seconds, and a line per probe would bury everything else during an outage.
"""

from __future__ import annotations

import functools
import logging
import weakref
from typing import TYPE_CHECKING, Annotated, Protocol

import msgspec
from litestar import Response, get
from litestar.params import Dependency
from sqlalchemy import text
from sqlalchemy.exc import ProgrammingError

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

    from service.signals.bus import WaiterHub


logger = logging.getLogger("elicitd.health")


class DependencyLog:
    """What readiness last logged per dependency, so that it logs changes only."""

    def __init__(self) -> None:
        self._down: dict[str, str] = {}

    def down(self, dependency: str, reason: str, exc: BaseException | None = None) -> None:
        """Log ``dependency`` as down (with the stack of ``exc``) unless it already is for ``reason``."""
        if self._down.get(dependency) == reason:
            return
        self._down[dependency] = reason
        logger.warning("dependency down", extra={"dependency": dependency, "reason": reason}, exc_info=exc)

    def up(self, dependency: str) -> None:
        if self._down.pop(dependency, None) is not None:
            logger.info("dependency back", extra={"dependency": dependency})


# One log per serving instance (two apps in one process probe different servers); keyed by the
# instance's waiter hub and gone with it.
_LOGS: weakref.WeakKeyDictionary[object, DependencyLog] = weakref.WeakKeyDictionary()


def dependency_log(instance: object) -> DependencyLog:
    log = _LOGS.get(instance)
    if log is None:
        log = _LOGS[instance] = DependencyLog()
    return log


def why(exc: BaseException) -> str:
    """A reason safe to log: exception types and the SQLSTATE, never a message (a connection
    error can quote the address, the user or the whole DSN)."""
    names = [type(exc).__name__]
    orig = getattr(exc, "orig", None)
    if isinstance(orig, BaseException):
        names.append(type(orig).__name__)
    sqlstate = getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)
    return "/".join(names) + (f" (sqlstate {sqlstate})" if isinstance(sqlstate, str) else "")


# Also the database probe: counts over tables of tens of rows.
_UNPROVEN = text(
    "SELECT (SELECT count(*) FROM server_clients WHERE subject_proof = 'none' AND NOT disabled), "
    "(SELECT count(*) FROM trust_groups WHERE allow_unproven)"
)
_SCHEMA_VERSION = text("SELECT version_num FROM alembic_version")


@functools.cache
def known_revisions() -> tuple[str, frozenset[str]]:
    """The head revision this code migrates to, and every revision it knows (the chain is linear:
    a known revision other than the head is older). Read from the shipped scripts once."""
    from alembic.script import ScriptDirectory

    from service.db.migrate import migrations_dir

    scripts = ScriptDirectory(str(migrations_dir()))
    (head,) = scripts.get_heads()
    return head, frozenset(script.revision for script in scripts.walk_revisions())


def schema_state(versions: list[str]) -> str:
    """``current``, ``behind`` (no version, or one this code knows that is not its head) or
    ``ahead`` (a revision only a newer release knows)."""
    head, known = known_revisions()
    if versions == [head]:
        return "current"
    if not versions or all(version in known for version in versions):
        return "behind"
    return "ahead"


async def _schema(session: AsyncSession) -> str:
    try:
        versions = list((await session.execute(_SCHEMA_VERSION)).scalars())
    except ProgrammingError as exc:
        if getattr(exc.orig, "sqlstate", None) != "42P01":  # undefined_table: never migrated
            raise
        versions = []
    return schema_state(versions)


# A warning: what an operator chose and should know about; readiness does not depend on it.
WARNING_UNPROVEN_GROUPS = "trust_groups_allow_unproven_members"


class Readiness(msgspec.Struct, omit_defaults=True):
    status: str
    postgres: str
    redis: str
    wakeups: str
    # Enabled server clients whose API key alone may name any user (subject proof off): a count,
    # not names, since this answer needs no credentials. The admin API lists them. Absent when
    # PostgreSQL is down.
    clients_without_subject_proof: int | None = None
    # Trust groups that allow members without subject proof (whose API key alone reads every grant
    # of the group): a count, as above; the admin API's group answers name them.
    trust_groups_allowing_unproven: int | None = None
    # ``current``, ``behind`` (not ready: ``elicitd migrate`` has not run yet) or ``ahead`` (a newer
    # release's migration has run; still ready). Absent when PostgreSQL is down.
    schema: str | None = None
    # Stable codes, absent when there is none; a warning never makes the answer 503.
    warnings: list[str] = []


class ReadinessServices(Protocol):
    """The parts of the container readiness checks: PostgreSQL through a session, Redis through the hub."""

    @property
    def hub(self) -> WaiterHub: ...

    @property
    def sessions(self) -> async_sessionmaker[AsyncSession]: ...


# The ``services`` dependency as ReadinessServices (see ``service.flows.deps``).
ReadinessDeps = Annotated[ReadinessServices, Dependency(skip_validation=True)]


@get("/healthz", operation_id="healthz", tags=["ops"], summary="Liveness: the process answers")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@get("/readyz", operation_id="readyz", tags=["ops"], summary="Readiness: PostgreSQL and Redis, reported apart")
async def readyz(services: ReadinessDeps) -> Response[Readiness]:
    state = services
    hub = state.hub
    log = dependency_log(hub)
    unproven: int | None = None
    unproven_groups: int | None = None
    schema: str | None = None
    try:
        async with state.sessions() as session:
            schema = await _schema(session)
            if schema != "behind":  # an older schema may lack what the counts read
                unproven, unproven_groups = (await session.execute(_UNPROVEN)).one()
        postgres = "ok"
        log.up("postgres")
    except Exception as exc:  # any failure means "not ready"; why goes to the server log, not here
        postgres = "down"
        log.down("postgres", why(exc), exc)
    # Redis is judged by the subscription itself, which hears from Redis at least every second
    # (``WaiterHub.heartbeat``): a probe of its own could disagree with the wake-ups it reports,
    # and would wait on a hung Redis.
    redis = "not_configured"
    if hub.redis_configured:
        failure = hub.redis_failure
        redis = "ok" if failure is None else "down"
        if failure is None:
            log.up("redis")
        else:
            log.down("redis", failure)
    wakeups = "redis" if hub.healthy else "polling"
    ready = postgres == "ok" and schema != "behind"
    body = Readiness(
        status="ready" if ready else "unavailable",
        postgres=postgres,
        redis=redis,
        wakeups=wakeups,
        clients_without_subject_proof=unproven,
        trust_groups_allowing_unproven=unproven_groups,
        schema=schema,
        warnings=[WARNING_UNPROVEN_GROUPS] if unproven_groups else [],
    )
    return Response(body, status_code=200 if ready else 503)
