"""SQL for flows. Repositories never commit; the service owns the unit of work.

Every state change is one statement: a data-modifying CTE that updates the flow only while it is
still ``pending`` and, in the same statement, appends the audit event, (for server clients
with a webhook) the outbox row and the event-stream row (``service.events``). Two racing completers
cannot both win, and a transition can never exist without its events.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, NamedTuple, Protocol, TypeVar

from sqlalchemy import Boolean, bindparam, column, select, text
from sqlalchemy.ext.asyncio import AsyncSession

from service.db.base import FLOW_ID
from service.db.direct import Statement
from service.events.repository import stream_tail
from service.flows.models import Flow
from service.flows.states import Actor, FlowStatus, can_transition

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
    INSERT INTO webhook_outbox (id, server_client_id, flow_id, event_type, payload)
    SELECT pl.event_id, pl.server_client_id, pl.flow_id, pl.type, pl.payload
    FROM pl JOIN server_clients sc ON sc.id = pl.server_client_id
    WHERE sc.webhook_url IS NOT NULL AND (sc.webhook_events IS NULL OR pl.type = ANY(sc.webhook_events))
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


def _flows(session: AsyncSession, sql: str, params: dict[str, Any]) -> Any:
    stmt = select(Flow).from_statement(text(sql)).execution_options(populate_existing=True)
    return session.execute(stmt, params)


async def _moved(session: AsyncSession, sql: str, params: dict[str, Any]) -> tuple[Flow, bool] | None:
    """The flow a transition statement moved (an ORM instance) and its ``webhook_queued`` flag."""
    stmt = (
        select(Flow, column("webhook_queued", Boolean))
        .from_statement(text(sql))
        .execution_options(populate_existing=True)
    )
    row = (await session.execute(stmt, params)).first()
    return None if row is None else (row[0], bool(row[1]))


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
# Positional ($1) SQL for ``service.db.direct``: the columns of ``FlowSnapshot`` in order, then
# whether the flow is pending past its expiry by the *database* clock.
SNAPSHOT = f"SELECT {_SNAPSHOT_COLUMNS}, status = 'pending' AND expires_at <= now() AS due FROM flows WHERE id = $1"


def snapshot(row: Any) -> tuple[FlowSnapshot, bool]:
    """A ``SNAPSHOT`` row as the snapshot and its ``due`` flag."""
    return FlowSnapshot(*row[:16]), bool(row[16])


F = TypeVar("F", Flow, FlowSnapshot)


class Moved(NamedTuple, Generic[F]):
    """A flow a transition moved (an ORM ``Flow`` or a ``FlowSnapshot``), and whether the same
    statement queued a completion webhook for it."""

    flow: F
    webhook_queued: bool


def moved_snapshot(row: Any) -> Moved[FlowSnapshot]:
    """A row of ``EXPIRE_DUE`` or ``FINISH_EXTERNAL``: the snapshot and its ``webhook_queued`` flag."""
    return Moved(FlowSnapshot(*row[:16]), bool(row[16]))


# An audit event that is not a transition, as one autocommit statement (``add_event``'s SQL).
ADD_EVENT = "INSERT INTO flow_events (flow_id, type, actor, detail) VALUES ($1, $2, $3, $4::jsonb)"


async def get(session: AsyncSession, flow_id: uuid.UUID) -> tuple[Flow, bool] | None:
    """The flow and whether it is pending past its expiry by the *database* clock."""
    row = (await session.execute(_GET, {"flow_id": flow_id})).first()
    if row is None:
        return None
    return row[0], bool(row[1])


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
    conditions = ["id = :flow_id", "status = 'pending'"]
    if require_live:
        conditions.append("expires_at > now()")
    if require_due:
        conditions.append("expires_at <= now()")
    sql = (
        f"WITH t AS (UPDATE flows SET {_SET_TERMINAL} WHERE {' AND '.join(conditions)} RETURNING flows.*)"
        + _TRANSITION_TAIL
    )
    params = {"flow_id": flow_id, **change.params()}
    moved = await _moved(session, sql, params)
    return None if moved is None else Moved(*moved)


# ``pg_try_advisory_xact_lock`` key of the sweep's gate (``EXPIRE_DUE``): fixed, so every replica and
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
    + _TRANSITION_TAIL.replace("SELECT t.*,", f"SELECT {_SNAPSHOT_COLUMNS},")
)
EXPIRE_DUE = _EXPIRE_DUE.sql
_EXPIRED_BY_SWEEPER = Transition(FlowStatus.EXPIRED, Actor.SWEEPER, error_code="expired")


def expire_due_args(batch_size: int) -> list[Any]:
    """``EXPIRE_DUE``'s positional parameters for a batch of at most ``batch_size`` flows."""
    return _EXPIRE_DUE.args({"batch": batch_size, **_EXPIRED_BY_SWEEPER.params()})


# Completing or failing an ``external`` flow through the API (``transition`` with the caller's
# server client and a live flow, plus its kind), as one autocommit statement on the driver: the
# moved flow comes back as a snapshot. Through a session the same change took BEGIN, the
# statement, an ORM row and COMMIT: three round trips where one does (`bench/README.md`).
_FINISH_EXTERNAL = Statement.named(
    f"WITH t AS (UPDATE flows SET {_SET_TERMINAL} WHERE id = :flow_id AND status = 'pending' "
    "AND server_client_id = :server_client_id AND kind = 'external' AND expires_at > now() RETURNING flows.*)"
    + _TRANSITION_TAIL.replace("SELECT t.*,", f"SELECT {_SNAPSHOT_COLUMNS},")
)
FINISH_EXTERNAL = _FINISH_EXTERNAL.sql


def finish_external_args(flow_id: uuid.UUID, server_client_id: uuid.UUID, change: Transition) -> list[Any]:
    """``FINISH_EXTERNAL``'s positional parameters."""
    return _FINISH_EXTERNAL.args({"flow_id": flow_id, "server_client_id": server_client_id, **change.params()})


async def expire_stale_reusable(
    session: AsyncSession, *, server_client_id: uuid.UUID, subject_iss: str, subject_sub: str, kind: str, reuse_key: str
) -> Moved[Flow] | None:
    """Expire the reusable pending flow if its time is up, so a fresh one can take its slot."""
    change = Transition(FlowStatus.EXPIRED, Actor.API, error_code="expired")
    sql = (
        f"WITH t AS (UPDATE flows SET {_SET_TERMINAL} WHERE status = 'pending' AND expires_at <= now() "
        "AND server_client_id = :server_client_id AND subject_iss = :iss AND subject_sub = :sub "
        "AND kind = :kind AND reuse_key = :reuse_key RETURNING flows.*)" + _TRANSITION_TAIL
    )
    params = {
        "server_client_id": server_client_id,
        "iss": subject_iss,
        "sub": subject_sub,
        "kind": kind,
        "reuse_key": reuse_key,
        **change.params(),
    }
    moved = await _moved(session, sql, params)
    return None if moved is None else Moved(*moved)


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


async def insert_pending(session: AsyncSession, values: dict[str, Any]) -> Flow | None:
    """Insert a pending flow unless an equivalent one is pending (the partial unique index).

    Returns None on conflict; the caller then reads the existing one. ``ON CONFLICT DO NOTHING``
    makes concurrent identical creates converge on one flow without a lock.
    """
    result = await _flows(session, _INSERT_PENDING_ROW, _insert_params(values))
    return result.scalars().first()  # type: ignore[no-any-return]


def _insert_params(values: dict[str, Any]) -> dict[str, Any]:
    params = dict(values)
    params["params"] = json.dumps(params["params"])
    params["context"] = json.dumps(params["context"])
    return params


# ``insert_pending``'s statement on its own, returning the snapshot: ``FlowService.create`` runs it
# first, in autocommit, when the client has no quota to count (most creates make a new flow).
INSERT_PENDING = Statement.named(_INSERT_PENDING.format(returning=_SNAPSHOT_COLUMNS))


def insert_params(values: dict[str, Any]) -> list[Any]:
    return INSERT_PENDING.args(_insert_params(values))


async def find_reusable(
    session: AsyncSession, *, server_client_id: uuid.UUID, subject_iss: str, subject_sub: str, kind: str, reuse_key: str
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


async def lock_subject(
    session: AsyncSession, *, server_client_id: uuid.UUID, subject_iss: str, subject_sub: str
) -> None:
    """A transaction-scoped advisory lock on (server client, subject), released at commit."""
    await session.execute(
        text("SELECT pg_advisory_xact_lock(hashtextextended(:c || chr(31) || :i || chr(31) || :s, 0))"),
        {"c": str(server_client_id), "i": subject_iss, "s": subject_sub},
    )


async def count_pending_for_subject(
    session: AsyncSession, *, server_client_id: uuid.UUID, subject_iss: str, subject_sub: str
) -> int:
    row = await session.execute(
        text(
            "SELECT count(*) FROM flows WHERE server_client_id = :c AND subject_iss = :i AND subject_sub = :s "
            "AND status = 'pending' AND expires_at > now()"
        ),
        {"c": server_client_id, "i": subject_iss, "s": subject_sub},
    )
    return int(row.scalar_one())


async def add_event(
    session: AsyncSession, flow_id: uuid.UUID, event_type: str, actor: Actor, detail: dict[str, Any] | None = None
) -> None:
    """An audit event that is not a transition (a browser visit, a client's answer, a refusal)."""
    await session.execute(
        text("INSERT INTO flow_events (flow_id, type, actor, detail) VALUES (:f, :t, :a, CAST(:d AS jsonb))"),
        {"f": flow_id, "t": event_type, "a": actor.value, "d": json.dumps(detail or {})},
    )


async def finished_among(session: AsyncSession, ids: list[uuid.UUID]) -> list[uuid.UUID]:
    """Of the given ids, those that are terminal or pending past expiry (for the waiter poller)."""
    rows = await session.execute(
        text("SELECT id FROM flows WHERE id = ANY(:ids) AND (status <> 'pending' OR expires_at <= now())"),
        {"ids": ids},
    )
    return [r[0] for r in rows]
