"""Webhook endpoints of a server client, and their delivery attempts (admin API and CLI).

A new endpoint, and one whose URL changes, is ``pending_verification``: the webhook worker sends it
a challenge (``service.signals.endpoints``) and queues nothing for it until it answers. Enabling a
suspended or disabled endpoint asks for the challenge again. Rotating a secret keeps the previous
one signing for a grace period (both signatures on each delivery); the new secret is shown once.

Every change is one conditional statement on the endpoint's row, naming its state where the change
depends on it, so two admins' racing changes cannot both apply. The legacy endpoint (the one
``server_clients.webhook_url`` mirrors, migration 0018) takes the same changes; its URL, filter and
current secret are written to the old columns too, in the same statement, so a replica of the
previous release during a rollout signs with the same secret.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Any

import msgspec
from msgspec import Meta
from sqlalchemy import select, text
from sqlalchemy.ext.asyncio import AsyncSession

from service.admin.clients import ServerClientNotFound, validate_webhook_events, validate_webhook_url
from service.admin.views import columns
from service.crypto.vault import Vault
from service.db.base import CLIENT_ID
from service.errors import Conflict, InvalidRequest, NotFound
from service.signals.models import ENDPOINT_ID, WebhookAttempt, WebhookEndpoint
from service.signals.signing import new_secret
from service.signals.webhooks import EVENT_ID, WEBHOOK_SECRET_PURPOSE

EventTypes = list[Annotated[str, Meta(min_length=1, max_length=48)]]
Url = Annotated[str, Meta(min_length=8, max_length=2000)]
MAX_GRACE_SECONDS = 30 * 86400


class EndpointNotFound(NotFound):
    code = "webhook_endpoint_not_found"
    title = "Webhook endpoint not found"


class CreateEndpoint(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    url: Url
    # The event types it receives; omitted or null: every type.
    events: EventTypes | None = None


class UpdateEndpoint(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    url: Url | msgspec.UnsetType = msgspec.UNSET
    events: EventTypes | msgspec.UnsetType | None = msgspec.UNSET


class RotateEndpointSecret(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    # How long the previous secret still signs; omitted: ``ELICITD_WEBHOOK_ROTATION_GRACE_SECONDS``.
    grace_seconds: Annotated[int, Meta(ge=0, le=MAX_GRACE_SECONDS)] | None = None


class EndpointView(msgspec.Struct):
    id: str
    server_client: str
    url: str
    events: list[str] | None
    state: str
    legacy: bool
    verified_at: datetime | None
    failing_since: datetime | None
    suspended_at: datetime | None
    previous_secret_until: datetime | None
    created_at: datetime


class EndpointSecret(msgspec.Struct):
    """The endpoint and its signing secret, shown once (on creation and on rotation)."""

    endpoint: EndpointView
    secret: str


class EndpointPage(msgspec.Struct):
    items: list[EndpointView]


class AttemptView(msgspec.Struct):
    """One POST and how it ended; the error is a class (``http 500``, ``ConnectTimeout``, ``no echo``)."""

    id: int
    at: datetime
    event_type: str
    delivery_id: str | None
    attempt: int
    status: int | None
    duration_ms: float
    error: str | None


class AttemptPage(msgspec.Struct):
    items: list[AttemptView]
    next_cursor: str | None


def view(e: Any) -> EndpointView:
    return columns(
        EndpointView,
        e,
        id=ENDPOINT_ID.format(e.id),
        server_client=CLIENT_ID.format(e.server_client_id),
        events=None if e.events is None else list(e.events),
        legacy=bool(e.legacy),
    )


def _endpoint_ref(ref: str) -> uuid.UUID:
    endpoint_id = ENDPOINT_ID.parse(ref)
    if endpoint_id is None:
        raise EndpointNotFound("No webhook endpoint with this id.")
    return endpoint_id


async def _load(session: AsyncSession, endpoint_id: uuid.UUID) -> WebhookEndpoint:
    found = (
        (
            await session.execute(
                select(WebhookEndpoint)
                .where(WebhookEndpoint.id == endpoint_id)
                .execution_options(populate_existing=True)
            )
        )
        .scalars()
        .first()
    )
    if found is None:
        raise EndpointNotFound("No webhook endpoint with this id.")
    return found


def _seal(vault: Vault, client_id: uuid.UUID) -> tuple[str, str, bytes]:
    secret = new_secret()
    key_id, blob = vault.encrypt(secret, owner=CLIENT_ID.format(client_id), purpose=WEBHOOK_SECRET_PURPOSE)
    return secret, key_id, blob


async def list_endpoints(session: AsyncSession, client_ref: str) -> EndpointPage:
    client_id = CLIENT_ID.parse(client_ref)
    if client_id is None:
        raise ServerClientNotFound("No server client with this id.")
    rows = (
        (
            await session.execute(
                select(WebhookEndpoint)
                .where(WebhookEndpoint.server_client_id == client_id)
                .order_by(WebhookEndpoint.created_at, WebhookEndpoint.id)
                .execution_options(populate_existing=True)
            )
        )
        .scalars()
        .all()
    )
    return EndpointPage(items=[view(r) for r in rows])


async def show(session: AsyncSession, ref: str) -> EndpointView:
    return view(await _load(session, _endpoint_ref(ref)))


_CREATE = text(
    "INSERT INTO webhook_endpoints (id, server_client_id, url, events, state, secret_key_id, secret_enc) "
    "SELECT :id, sc.id, :url, :events, 'pending_verification', :key_id, :blob FROM server_clients sc "
    "WHERE sc.id = :client RETURNING *"
)


async def create(session: AsyncSession, vault: Vault, client_ref: str, data: CreateEndpoint) -> EndpointSecret:
    client_id = CLIENT_ID.parse(client_ref)
    if client_id is None:
        raise ServerClientNotFound("No server client with this id.")
    url = validate_webhook_url(data.url)
    events = validate_webhook_events(data.events)
    secret, key_id, blob = _seal(vault, client_id)
    row = (
        await session.execute(
            _CREATE,
            {"id": uuid.uuid4(), "client": client_id, "url": url, "events": events, "key_id": key_id, "blob": blob},
        )
    ).first()
    if row is None:
        raise ServerClientNotFound("No server client with this id.")
    return EndpointSecret(endpoint=view(row), secret=secret)


# The legacy endpoint's URL, filter and secret are the old columns' too (the 0018 trigger then
# writes the same values back to the endpoint: a no-op).
_MIRROR = """
, mirror AS (
    UPDATE server_clients sc
       SET webhook_url = u.url, webhook_events = u.events,
           webhook_secret_key_id = u.secret_key_id, webhook_secret_enc = u.secret_enc
      FROM u WHERE u.legacy AND sc.id = u.server_client_id
)
SELECT * FROM u
"""


async def update(session: AsyncSession, ref: str, data: UpdateEndpoint) -> EndpointView:
    """A changed URL must be verified again; a filter change applies to events queued from now on."""
    endpoint_id = _endpoint_ref(ref)
    current = await _load(session, endpoint_id)
    url = current.url if isinstance(data.url, msgspec.UnsetType) else validate_webhook_url(data.url)
    events = current.events if isinstance(data.events, msgspec.UnsetType) else validate_webhook_events(data.events)
    statement = (
        """
WITH u AS (
    UPDATE webhook_endpoints
       SET events = :events, updated_at = now(),
           url = :url,
           state = CASE WHEN url <> :url AND state IN ('active', 'suspended', 'pending_verification')
                        THEN 'pending_verification' ELSE state END,
           challenge_next_at = CASE WHEN url <> :url THEN now() ELSE challenge_next_at END,
           challenge_attempts = CASE WHEN url <> :url THEN 0 ELSE challenge_attempts END,
           verified_at = CASE WHEN url <> :url THEN NULL ELSE verified_at END
     WHERE id = :id AND url = :was
    RETURNING *
)"""
        + _MIRROR
    )
    row = (
        await session.execute(text(statement), {"id": endpoint_id, "url": url, "events": events, "was": current.url})
    ).first()
    if row is None:
        raise Conflict("The endpoint changed meanwhile; read it again.", extra={"code": "endpoint_changed"})
    return view(row)


async def rotate_secret(
    session: AsyncSession, vault: Vault, ref: str, data: RotateEndpointSecret, default_grace: float
) -> EndpointSecret:
    """A new secret signs from now on; the current one keeps signing beside it for the grace
    period (a grace of 0 retires it at once). An older previous secret is dropped."""
    endpoint_id = _endpoint_ref(ref)
    current = await _load(session, endpoint_id)
    grace = default_grace if data.grace_seconds is None else float(data.grace_seconds)
    secret, key_id, blob = _seal(vault, current.server_client_id)
    statement = (
        """
WITH u AS (
    UPDATE webhook_endpoints
       SET previous_secret_key_id = CASE WHEN :grace > 0 THEN secret_key_id END,
           previous_secret_enc = CASE WHEN :grace > 0 THEN secret_enc END,
           previous_secret_until = CASE WHEN :grace > 0 THEN now() + make_interval(secs => :grace) END,
           secret_key_id = :key_id, secret_enc = :blob, updated_at = now()
     WHERE id = :id AND secret_key_id IS NOT DISTINCT FROM CAST(:was_key AS text)
       AND secret_enc IS NOT DISTINCT FROM CAST(:was_blob AS bytea)
    RETURNING *
)"""
        + _MIRROR
    )
    row = (
        await session.execute(
            text(statement),
            {
                "id": endpoint_id,
                "grace": grace,
                "key_id": key_id,
                "blob": blob,
                "was_key": current.secret_key_id,
                "was_blob": current.secret_enc,
            },
        )
    ).first()
    if row is None:
        raise Conflict("The secret was rotated meanwhile; read it again.", extra={"code": "endpoint_changed"})
    return EndpointSecret(endpoint=view(row), secret=secret)


_SET_STATE = text(
    "UPDATE webhook_endpoints SET state = CAST(:to AS text), updated_at = now(), "
    "challenge_next_at = CASE WHEN CAST(:to AS text) = 'pending_verification' THEN now() ELSE challenge_next_at END, "
    "challenge_attempts = CASE WHEN CAST(:to AS text) = 'pending_verification' THEN 0 ELSE challenge_attempts END, "
    "failing_since = CASE WHEN CAST(:to AS text) = 'pending_verification' THEN NULL ELSE failing_since END "
    "WHERE id = :id AND state = ANY(:from_states) RETURNING *"
)


async def enable(session: AsyncSession, ref: str) -> EndpointView:
    """A suspended or disabled endpoint is asked the challenge again before it receives anything."""
    return await _set_state(session, ref, "pending_verification", ["suspended", "disabled"])


async def disable(session: AsyncSession, ref: str) -> EndpointView:
    return await _set_state(session, ref, "disabled", ["pending_verification", "active", "suspended"])


async def _set_state(session: AsyncSession, ref: str, to: str, from_states: list[str]) -> EndpointView:
    endpoint_id = _endpoint_ref(ref)
    row = (await session.execute(_SET_STATE, {"id": endpoint_id, "to": to, "from_states": from_states})).first()
    if row is None:
        current = await _load(session, endpoint_id)  # 404 when it does not exist
        raise Conflict(f"The endpoint is {current.state}.", extra={"code": "endpoint_state", "state": current.state})
    return view(row)


_DELETE = text(
    "WITH d AS (DELETE FROM webhook_endpoints WHERE id = :id RETURNING id, server_client_id, legacy), "
    "clear AS (UPDATE server_clients sc SET webhook_url = NULL, webhook_events = NULL, webhook_secret_enc = NULL, "
    "webhook_secret_key_id = NULL FROM d WHERE d.legacy AND sc.id = d.server_client_id) "
    "SELECT id FROM d"
)


async def delete(session: AsyncSession, ref: str) -> None:
    """Its queued deliveries and its attempt log go with it."""
    endpoint_id = _endpoint_ref(ref)
    if (await session.execute(_DELETE, {"id": endpoint_id})).first() is None:
        raise EndpointNotFound("No webhook endpoint with this id.")


async def list_attempts(session: AsyncSession, ref: str, *, cursor: str | None, limit: int) -> AttemptPage:
    """Newest first; ``cursor`` is the ``next_cursor`` of the previous page."""
    endpoint_id = _endpoint_ref(ref)
    await _load(session, endpoint_id)
    if not 1 <= limit <= 500:
        raise InvalidRequest("limit must be between 1 and 500.")
    stmt = select(WebhookAttempt).where(WebhookAttempt.endpoint_id == endpoint_id)
    if cursor:
        if not cursor.isdigit():
            raise InvalidRequest("cursor is not one this API returned.", extra={"code": "invalid_cursor"})
        stmt = stmt.where(WebhookAttempt.id < int(cursor))
    rows = (await session.execute(stmt.order_by(WebhookAttempt.id.desc()).limit(limit + 1))).scalars().all()
    items = [
        AttemptView(
            id=r.id,
            at=r.at,
            event_type=r.event_type,
            delivery_id=None if r.delivery_id is None else EVENT_ID.format(r.delivery_id),
            attempt=r.attempt,
            status=r.status,
            duration_ms=r.duration_ms,
            error=r.error,
        )
        for r in rows[:limit]
    ]
    return AttemptPage(items=items, next_cursor=str(items[-1].id) if len(rows) > limit and items else None)
