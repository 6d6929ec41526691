# size: every statement on flows (ORM and driver) and the one statements object that runs them, SQL beside its method
"""SQL for flows. Repositories never commit; the service owns the unit of work.

Every state change is one statement: a data-modifying CTE that updates the flow only while it is
still ``pending`` and, in the same statement, appends the audit event, (for server clients
with a webhook) the outbox row and the event-stream row (``service.events``). Two racing completers
cannot both win, and a transition can never exist without its events.

``FlowStatements`` is the one way to these statements: its methods take typed values and give
back ``Flow`` instances (the ORM path, on the caller's session) or ``FlowSnapshot`` rows (the hot
path, one constant ``Statement`` each on the statement pool, ``service.db.direct``). The SQL, its
parameters' order and the driver's rows stay in this module.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, NamedTuple, Protocol, TypeVar

import asyncpg
from sqlalchemy import Boolean, bindparam, column, select, text
from sqlalchemy.ext.asyncio import AsyncSession

from service.db.base import FLOW_ID
from service.db.direct import DirectStatements, Statement
from service.events.repository import stream_tail
from service.flows.models import Flow
from service.flows.states import Actor, FlowStatus, can_transition
from service.signals.routing import outbox_endpoints, outbox_row_id

# Whether the transition queued a completion webhook for its flow: the last column of every
# transition's rows, so the replica that made it wakes its webhook worker only when there is
# something to deliver (a claim round is a transaction on both sides).
_QUEUED = "t.id IN (SELECT flow_id FROM ob) AS webhook_queued"

# Shared tail of every transition: the audit event, then one event per moved flow (``pl``, built
# once so the webhook and the stream carry the same id and payload) for the completion-webhook
# outbox and the server client's event stream.
_TRANSITION_TAIL = f"""
, ev AS (
    INSERT INTO flow_events (flow_id, type, actor, from_status, to_status, detail)
    SELECT t.id, 'transition', :actor, 'pending', t.status, CAST(:detail AS jsonb) FROM t
), pl AS (
    SELECT t.id AS flow_id, t.server_client_id, gen_random_uuid() AS event_id, 'flow.' || t.status AS type,
           jsonb_build_object(
               'type', 'flow.' || t.status,
               'flow_id', {FLOW_ID.sql("t.id")},
               'elicitation_id', {FLOW_ID.sql("t.id")},
               'kind', t.kind,
               'status', t.status,
               'provider', t.provider,
               'subject', jsonb_build_object('iss', t.subject_iss, 'sub', t.subject_sub),
               'error_code', t.error_code,
               'occurred_at', t.completed_at) AS payload
    FROM t
), ob AS (
    INSERT INTO webhook_outbox (id, server_client_id, flow_id, event_type, payload, endpoint_id, event_id)
    SELECT {outbox_row_id("pl")}, pl.server_client_id, pl.flow_id, pl.type, pl.payload, e.id, pl.event_id
    FROM pl JOIN webhook_endpoints e ON {outbox_endpoints("pl")}
    RETURNING flow_id
){stream_tail("pl")}
SELECT t.*, {_QUEUED} FROM t
"""

_SET_TERMINAL = """
    status = :to_status,
    result = COALESCE(CAST(:result AS jsonb), flows.result),
    error_code = :error_code,
    error_message = :error_message,
    connection_id = COALESCE(CAST(:connection_id AS uuid), flows.connection_id),
    completed_at = now(),
    updated_at = now()
"""


@dataclass(frozen=True, slots=True)
class Transition:
    to: FlowStatus
    actor: Actor
    result: dict[str, Any] | None = None
    error_code: str | None = None
    error_message: str | None = None
    connection_id: uuid.UUID | None = None
    detail: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        # Every transition leaves ``pending`` (the SQL guarantees it); which actor may cause which
        # terminal state is decided by the pure table in ``states.py``, nowhere else.
        if not can_transition(FlowStatus.PENDING, self.to, self.actor):
            raise ValueError(f"{self.actor.value} may not move a flow to {self.to.value}")

    def params(self) -> dict[str, Any]:
        return {
            "to_status": self.to.value,
            "actor": self.actor.value,
            "result": None if self.result is None else json.dumps(self.result),
            "error_code": self.error_code,
            "error_message": self.error_message,
            "connection_id": None if self.connection_id is None else str(self.connection_id),
            "detail": json.dumps(self.detail or {}),
        }


# Built once: this is the hot path's only query, and building the expression per call (three
# comparisons, a conjunction, a text clause) cost ~10% of a status request's CPU.
_GET = (
    select(Flow, (Flow.status == "pending") & (Flow.expires_at <= text("now()")))
    .where(Flow.id == bindparam("flow_id"))
    .execution_options(populate_existing=True)
)


class FlowFields(Protocol):
    """What views, answers and waits read of a flow: an ORM ``Flow`` or a ``FlowSnapshot``."""

    @property
    def id(self) -> uuid.UUID: ...
    @property
    def server_client_id(self) -> uuid.UUID: ...
    @property
    def kind(self) -> str: ...
    @property
    def status(self) -> str: ...
    @property
    def subject_iss(self) -> str: ...
    @property
    def subject_sub(self) -> str: ...
    @property
    def provider(self) -> str | None: ...
    @property
    def scopes(self) -> list[str]: ...
    @property
    def message(self) -> str: ...
    @property
    def external_url(self) -> str | None: ...
    @property
    def result(self) -> dict[str, Any] | None: ...
    @property
    def error_code(self) -> str | None: ...
    @property
    def error_message(self) -> str | None: ...
    @property
    def expires_at(self) -> datetime: ...
    @property
    def created_at(self) -> datetime: ...
    @property
    def completed_at(self) -> datetime | None: ...


@dataclass(frozen=True, slots=True)
class FlowSnapshot:
    """What the hot path reads of a flow (``SNAPSHOT``): the view, the result, whose it is.

    A plain row, not an ORM instance: building one costs a tuple of values, with no session,
    identity map or instrumented attributes, and a parked waiter holds none between two reads.
    """

    id: uuid.UUID
    server_client_id: uuid.UUID
    kind: str
    status: str
    subject_iss: str
    subject_sub: str
    provider: str | None
    scopes: list[str]
    message: str
    external_url: str | None
    result: dict[str, Any] | None
    error_code: str | None
    error_message: str | None
    expires_at: datetime
    created_at: datetime
    completed_at: datetime | None


_SNAPSHOT_COLUMNS = (
    "id, server_client_id, kind, status, subject_iss, subject_sub, provider, scopes, message, external_url, "
    "result, error_code, error_message, expires_at, created_at, completed_at"
)

F = TypeVar("F", Flow, FlowSnapshot)


class Moved(NamedTuple, Generic[F]):
    """A flow a transition moved (an ORM ``Flow`` or a ``FlowSnapshot``), and whether the same
    statement queued a completion webhook for it."""

    flow: F
    webhook_queued: bool


def _snapshot_row(row: asyncpg.Record) -> FlowSnapshot:
    return FlowSnapshot(*row)


def _snapshot_and_due(row: asyncpg.Record) -> tuple[FlowSnapshot, bool]:
    return FlowSnapshot(*row[:16]), bool(row[16])


def _moved_row(row: asyncpg.Record) -> Moved[FlowSnapshot]:
    return Moved(FlowSnapshot(*row[:16]), bool(row[16]))


# The columns of ``FlowSnapshot`` in order, then whether the flow is pending past its expiry by the
# *database* clock.
_SNAPSHOT = Statement.named(
    f"SELECT {_SNAPSHOT_COLUMNS}, status = 'pending' AND expires_at <= now() AS due FROM flows WHERE id = :flow_id",
    _snapshot_and_due,
)

# An audit event that is not a transition, as one autocommit statement (``add_event``'s SQL).
_ADD_EVENT = Statement.command(
    "INSERT INTO flow_events (flow_id, type, actor, detail) VALUES (:flow_id, :type, :actor, CAST(:detail AS jsonb))"
)


def _transition_sql(conditions: list[str]) -> str:
    return (
        f"WITH t AS (UPDATE flows SET {_SET_TERMINAL} WHERE {' AND '.join(conditions)} RETURNING flows.*)"
        + _TRANSITION_TAIL
    )


# The four shapes of ``transition``'s conditions, written once each.
_TRANSITIONS = {
    (live, due): _transition_sql(
        ["id = :flow_id", "status = 'pending'"]
        + (["expires_at > now()"] if live else [])
        + (["expires_at <= now()"] if due else [])
    )
    for live in (False, True)
    for due in (False, True)
}

# ``pg_try_advisory_xact_lock`` key of the sweep's gate (``_EXPIRE_DUE``): fixed, so every replica and
# version agrees on it (the first eight bytes of sha256(b"elicitd:sweep"), as a signed bigint).
SWEEP_LOCK_KEY = 5991534074078405868

# Expiring a batch of overdue flows: one statement (its own transaction) run on the driver by the
# sweeper; the moved flows come back as snapshots, not ORM instances (a sweep of 100,000 flows spent
# a third of its Python time building and tracking instances nobody kept).
#
# One batch at a time in the whole fleet: the statement first tries a transaction-scoped advisory
# lock (``gate``) and, when another replica's batch holds it, expires nothing (its scan is skipped:
# the uncorrelated ``(SELECT open FROM gate)`` is a one-time filter). Two batches at once were
# slower than one: every batch appends to its server clients' event streams, so the second waits
# on the first's counter row, and each scans past rows the other has locked. Measured with
# bench/scale.py ``--parts sweep`` (100,000 due at once, two replicas, the same pacing): 24.3 s and
# status p99 2.46x idle concurrently, 11.7-12.7 s and 2.05-2.08x one batch at a time.
# ``SKIP LOCKED`` stays: a flow completed by a request at the same moment is skipped, not waited on.
_EXPIRE_DUE = Statement.named(
    f"WITH gate AS MATERIALIZED (SELECT pg_try_advisory_xact_lock({SWEEP_LOCK_KEY}) AS open), "
    "due AS (SELECT id FROM flows WHERE (SELECT open FROM gate) AND status = 'pending' AND expires_at <= now() "
    "ORDER BY expires_at LIMIT :batch FOR UPDATE SKIP LOCKED), "
    f"t AS (UPDATE flows SET {_SET_TERMINAL} FROM due WHERE flows.id = due.id "
    "AND flows.status = 'pending' RETURNING flows.*)"
    + _TRANSITION_TAIL.replace("SELECT t.*,", f"SELECT {_SNAPSHOT_COLUMNS},"),
    _moved_row,
)
_EXPIRED_BY_SWEEPER = Transition(FlowStatus.EXPIRED, Actor.SWEEPER, error_code="expired")

# Completing or failing an ``external`` flow through the API (``transition`` with the caller's
# server client and a live flow, plus its kind), as one autocommit statement on the driver: the
# moved flow comes back as a snapshot. Through a session the same change took BEGIN, the
# statement, an ORM row and COMMIT: three round trips where one does (`bench/README.md`).
_FINISH_EXTERNAL = Statement.named(
    f"WITH t AS (UPDATE flows SET {_SET_TERMINAL} WHERE id = :flow_id AND status = 'pending' "
    "AND server_client_id = :server_client_id AND kind = 'external' AND expires_at > now() RETURNING flows.*)"
    + _TRANSITION_TAIL.replace("SELECT t.*,", f"SELECT {_SNAPSHOT_COLUMNS},"),
    _moved_row,
)

_EXPIRE_STALE_REUSABLE = (
    f"WITH t AS (UPDATE flows SET {_SET_TERMINAL} WHERE status = 'pending' AND expires_at <= now() "
    "AND server_client_id = :server_client_id AND subject_iss = :iss AND subject_sub = :sub "
    "AND kind = :kind AND reuse_key = :reuse_key RETURNING flows.*)" + _TRANSITION_TAIL
)
_EXPIRED_BY_API = Transition(FlowStatus.EXPIRED, Actor.API, error_code="expired")

_INSERT_PENDING = """
WITH f AS (
    INSERT INTO flows (id, server_client_id, kind, subject_iss, subject_sub, provider, scopes, params,
                       context, reuse_key, message, external_url, connection_id, expires_at)
    VALUES (:id, :server_client_id, :kind, :subject_iss, :subject_sub, :provider, :scopes,
            CAST(:params AS jsonb), CAST(:context AS jsonb), :reuse_key, :message, :external_url,
            :connection_id, now() + make_interval(secs => :ttl_seconds))
    ON CONFLICT (server_client_id, subject_iss, subject_sub, kind, reuse_key) WHERE status = 'pending'
    DO NOTHING
    RETURNING *
), ev AS (
    INSERT INTO flow_events (flow_id, type, actor, to_status, detail)
    SELECT f.id, 'created', 'api', 'pending', '{{}}'::jsonb FROM f
)
SELECT {returning} FROM f
"""
_INSERT_PENDING_ROW = _INSERT_PENDING.format(returning="*")
# The same statement on its own, returning the snapshot: ``FlowService.create`` runs it first, in
# autocommit, when the client has no quota to count (most creates make a new flow).
_INSERT_PENDING_ALONE = Statement.named(_INSERT_PENDING.format(returning=_SNAPSHOT_COLUMNS), _snapshot_row)

_LOCK_SUBJECT = text("SELECT pg_advisory_xact_lock(hashtextextended(:c || chr(31) || :i || chr(31) || :s, 0))")
_COUNT_PENDING_FOR_SUBJECT = text(
    "SELECT count(*) FROM flows WHERE server_client_id = :c AND subject_iss = :i AND subject_sub = :s "
    "AND status = 'pending' AND expires_at > now()"
)
_ADD_EVENT_ORM = text("INSERT INTO flow_events (flow_id, type, actor, detail) VALUES (:f, :t, :a, CAST(:d AS jsonb))")
_FINISHED_AMONG = text("SELECT id FROM flows WHERE id = ANY(:ids) AND (status <> 'pending' OR expires_at <= now())")


def _insert_params(values: dict[str, Any]) -> dict[str, Any]:
    params = dict(values)
    params["params"] = json.dumps(params["params"])
    params["context"] = json.dumps(params["context"])
    return params


async def _moved(session: AsyncSession, sql: str, params: dict[str, Any]) -> Moved[Flow] | None:
    """The flow a transition statement moved (an ORM instance) and its ``webhook_queued`` flag."""
    stmt = (
        select(Flow, column("webhook_queued", Boolean))
        .from_statement(text(sql))
        .execution_options(populate_existing=True)
    )
    row = (await session.execute(stmt, params)).first()
    return None if row is None else Moved(row[0], bool(row[1]))


class FlowStatements:
    """Every statement on ``flows`` (and the events written with it), as typed methods.

    The hot path's methods each run one constant ``Statement`` on the statement pool (``direct``),
    outside any transaction: a read, a create's insert, a client's audit event, an ``external``
    flow's completion, a sweep's batch. The ORM path's take the caller's session, so they join its
    unit of work (which commits; nothing here does); they need no pool and are static, so the
    composition root's poller and tests call them without one.
    """

    __slots__ = ("_direct",)

    def __init__(self, direct: DirectStatements) -> None:
        self._direct = direct

    # ---- the hot path: one autocommit statement each ----------------------------------------------
    async def snapshot(self, flow_id: uuid.UUID) -> tuple[FlowSnapshot, bool] | None:
        """The flow as the hot path reads it, and whether it is pending past its expiry (by the
        database clock)."""
        return await self._direct.one(_SNAPSHOT, flow_id=flow_id)

    async def insert_alone(self, values: dict[str, Any]) -> FlowSnapshot | None:
        """``insert_pending`` as its own transaction (None when a pending twin holds the slot)."""
        return await self._direct.one(_INSERT_PENDING_ALONE, **_insert_params(values))

    async def note(
        self, flow_id: uuid.UUID, event_type: str, actor: Actor, detail: dict[str, Any] | None = None
    ) -> None:
        """``add_event`` as its own transaction: an audit event, no flow change."""
        await self._direct.run(
            _ADD_EVENT, flow_id=flow_id, type=event_type, actor=actor.value, detail=json.dumps(detail or {})
        )

    async def finish_external(
        self, flow_id: uuid.UUID, server_client_id: uuid.UUID, change: Transition
    ) -> Moved[FlowSnapshot] | None:
        """The transition of this client's pending, live ``external`` flow; None when it moved nothing."""
        return await self._direct.one(
            _FINISH_EXTERNAL, flow_id=flow_id, server_client_id=server_client_id, **change.params()
        )

    async def expire_due(self, batch_size: int) -> list[Moved[FlowSnapshot]]:
        """Expire at most ``batch_size`` overdue flows (none while another replica's batch runs)."""
        return await self._direct.all(_EXPIRE_DUE, batch=batch_size, **_EXPIRED_BY_SWEEPER.params())

    # ---- the ORM path: on the caller's session ---------------------------------------------------
    @staticmethod
    async def get(session: AsyncSession, flow_id: uuid.UUID) -> tuple[Flow, bool] | None:
        """The flow and whether it is pending past its expiry by the *database* clock."""
        row = (await session.execute(_GET, {"flow_id": flow_id})).first()
        if row is None:
            return None
        return row[0], bool(row[1])

    @staticmethod
    async def transition(
        session: AsyncSession,
        flow_id: uuid.UUID,
        change: Transition,
        *,
        require_live: bool = True,
        require_due: bool = False,
    ) -> Moved[Flow] | None:
        """Make the one terminal transition, or return None when the flow is not (or no longer) eligible.

        ``require_live`` refuses a completion once the flow is past its expiry (the expiry wins);
        ``require_due`` is for expiring: only a flow whose time is up.
        """
        sql = _TRANSITIONS[(require_live, require_due)]
        return await _moved(session, sql, {"flow_id": flow_id, **change.params()})

    @staticmethod
    async def expire_stale_reusable(
        session: AsyncSession,
        *,
        server_client_id: uuid.UUID,
        subject_iss: str,
        subject_sub: str,
        kind: str,
        reuse_key: str,
    ) -> Moved[Flow] | None:
        """Expire the reusable pending flow if its time is up, so a fresh one can take its slot."""
        params = {
            "server_client_id": server_client_id,
            "iss": subject_iss,
            "sub": subject_sub,
            "kind": kind,
            "reuse_key": reuse_key,
            **_EXPIRED_BY_API.params(),
        }
        return await _moved(session, _EXPIRE_STALE_REUSABLE, params)

    @staticmethod
    async def insert_pending(session: AsyncSession, values: dict[str, Any]) -> Flow | None:
        """Insert a pending flow unless an equivalent one is pending (the partial unique index).

        Returns None on conflict; the caller then reads the existing one. ``ON CONFLICT DO NOTHING``
        makes concurrent identical creates converge on one flow without a lock.
        """
        stmt = select(Flow).from_statement(text(_INSERT_PENDING_ROW)).execution_options(populate_existing=True)
        result = await session.execute(stmt, _insert_params(values))
        return result.scalars().first()

    @staticmethod
    async def find_reusable(
        session: AsyncSession,
        *,
        server_client_id: uuid.UUID,
        subject_iss: str,
        subject_sub: str,
        kind: str,
        reuse_key: str,
    ) -> Flow | None:
        stmt = (
            select(Flow)
            .where(
                Flow.server_client_id == server_client_id,
                Flow.subject_iss == subject_iss,
                Flow.subject_sub == subject_sub,
                Flow.kind == kind,
                Flow.reuse_key == reuse_key,
                Flow.status == "pending",
            )
            .execution_options(populate_existing=True)
        )
        return (await session.execute(stmt)).scalars().first()

    @staticmethod
    async def lock_subject(
        session: AsyncSession, *, server_client_id: uuid.UUID, subject_iss: str, subject_sub: str
    ) -> None:
        """A transaction-scoped advisory lock on (server client, subject), released at commit."""
        await session.execute(_LOCK_SUBJECT, {"c": str(server_client_id), "i": subject_iss, "s": subject_sub})

    @staticmethod
    async def count_pending_for_subject(
        session: AsyncSession, *, server_client_id: uuid.UUID, subject_iss: str, subject_sub: str
    ) -> int:
        row = await session.execute(
            _COUNT_PENDING_FOR_SUBJECT, {"c": server_client_id, "i": subject_iss, "s": subject_sub}
        )
        return int(row.scalar_one())

    @staticmethod
    async def add_event(
        session: AsyncSession, flow_id: uuid.UUID, event_type: str, actor: Actor, detail: dict[str, Any] | None = None
    ) -> None:
        """An audit event that is not a transition (a browser visit, a client's answer, a refusal)."""
        await session.execute(
            _ADD_EVENT_ORM, {"f": flow_id, "t": event_type, "a": actor.value, "d": json.dumps(detail or {})}
        )

    @staticmethod
    async def finished_among(session: AsyncSession, ids: list[uuid.UUID]) -> list[uuid.UUID]:
        """Of the given ids, those that are terminal or pending past expiry (for the waiter poller)."""
        rows = await session.execute(_FINISHED_AMONG, {"ids": ids})
        return [r[0] for r in rows]
