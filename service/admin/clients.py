"""Admin operations on server clients: create, list, show, update (providers, issuers, rate limits),
disable/enable, rotate API keys with a grace period, set the completion webhook and rotate its
signing secret.

Secrets (API keys, the webhook signing secret) are returned once, by the operation that makes
them; afterwards a client view says only whether a webhook secret is set.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta

import msgspec
from sqlalchemy import func, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from service.admin.flows import db_now, parse_client
from service.admin.schemas import (
    CreatedServerClient,
    CreateServerClient,
    RotatedKey,
    ServerClientPage,
    ServerClientView,
    UpdateServerClient,
    WebhookSecret,
)
from service.admin.views import client_view
from service.crypto.vault import Vault
from service.db.base import CLIENT_ID
from service.db.pagination import keyset, page
from service.errors import InvalidRequest, NotFound
from service.grants import groups
from service.identity.clients import create_server_client
from service.identity.keys import add_key
from service.identity.models import SUBJECT_PROOF_NONE, ServerClient, ServerClientKey
from service.identity.subject_proof import check_resource_uris
from service.signals.signing import SECRET_PREFIX, new_secret
from service.signals.webhooks import WEBHOOK_EVENT_TYPES, WEBHOOK_SECRET_PURPOSE
from service.text import display_text_problem
from service.urls import url_problem

WEBHOOK_SECRET_PREFIX = SECRET_PREFIX


class ServerClientNotFound(NotFound):
    code = "server_client_not_found"
    title = "Server client not found"


async def _load(session: AsyncSession, client_id: uuid.UUID) -> ServerClient:
    row = (
        (
            await session.execute(
                select(ServerClient).where(ServerClient.id == client_id).execution_options(populate_existing=True)
            )
        )
        .scalars()
        .first()
    )
    if row is None:
        raise ServerClientNotFound("No server client with this id.")
    return row


async def view(session: AsyncSession, client_id: uuid.UUID) -> ServerClientView:
    client = await _load(session, client_id)
    keys = (
        (
            await session.execute(
                select(ServerClientKey)
                .where(ServerClientKey.server_client_id == client_id)
                .order_by(ServerClientKey.id)
                .execution_options(populate_existing=True)
            )
        )
        .scalars()
        .all()
    )
    return client_view(client, list(keys), await db_now(session))


async def show(session: AsyncSession, ref: str) -> ServerClientView:
    return await view(session, _ref(ref))


async def public_id_of(session: AsyncSession, ref: str) -> str:
    """The ``sc_…`` id of the client ``ref`` names: its id, or its name (what ``servers create``
    took), so every command finds a client the way it was made."""
    if CLIENT_ID.parse(ref) is not None:
        return ref
    found = (await session.execute(select(ServerClient.id).where(ServerClient.name == ref))).scalar_one_or_none()
    if found is None:
        raise ServerClientNotFound(
            f"No server client named or numbered {ref!r} (`elicitd admin clients list` shows them)."
        )
    return CLIENT_ID.format(found)


def _ref(ref: str) -> uuid.UUID:
    client_id = CLIENT_ID.parse(ref)
    if client_id is None:
        raise ServerClientNotFound("No server client with this id.")
    return client_id


async def list_clients(
    session: AsyncSession, *, cursor: str | None, limit: int, include_disabled: bool = True
) -> ServerClientPage:
    stmt = select(ServerClient)
    if not include_disabled:
        stmt = stmt.where(ServerClient.disabled.is_(False))
    rows = (await session.execute(keyset(stmt, ServerClient.id, cursor, limit))).scalars().all()
    items, next_cursor = page(rows, limit, lambda c: c.id)
    ids = [c.id for c in items]
    keys = (
        (
            await session.execute(
                select(ServerClientKey).where(ServerClientKey.server_client_id.in_(ids)).order_by(ServerClientKey.id)
            )
        )
        .scalars()
        .all()
    )
    now = await db_now(session)
    by_client: dict[uuid.UUID, list[ServerClientKey]] = {}
    for key in keys:
        by_client.setdefault(key.server_client_id, []).append(key)
    return ServerClientPage(
        items=[client_view(c, by_client.get(c.id, []), now) for c in items], next_cursor=next_cursor
    )


async def create(session: AsyncSession, data: CreateServerClient) -> CreatedServerClient:
    created = await create_server_client(
        session,
        data.name,
        display_name=data.display_name,
        allowed_providers=list(data.allowed_providers),
        trusted_issuers=list(data.trusted_issuers),
        subject_proof=data.subject_proof,
        resource_uris=list(data.resource_uris),
    )
    if data.flows_per_minute is not None or data.pending_per_subject is not None:
        await session.execute(
            update(ServerClient)
            .where(ServerClient.id == created.client.id)
            .values(flows_per_minute=data.flows_per_minute, pending_per_subject=data.pending_per_subject)
        )
    return CreatedServerClient(client=await view(session, created.client.id), api_key=created.api_key)


async def update_client(session: AsyncSession, ref: str, data: UpdateServerClient) -> ServerClientView:
    client_id = _ref(ref)
    values = {k: v for k, v in msgspec.structs.asdict(data).items() if v is not msgspec.UNSET}
    if not values:
        raise InvalidRequest("Nothing to change.")
    if (problem := display_text_problem(values.get("display_name"), "display_name")) is not None:
        raise InvalidRequest(problem + ".")
    for name in ("allowed_providers", "trusted_issuers"):
        if name in values:
            values[name] = sorted(set(values[name]))
    if "resource_uris" in values:
        values["resource_uris"] = check_resource_uris(values["resource_uris"])
    if values.get("subject_proof") == SUBJECT_PROOF_NONE:
        # A member of a group that does not allow it would read the group's grants on its key alone.
        await groups.check_may_drop_subject_proof(session, client_id)
    await _update(session, client_id, **values)
    return await view(session, client_id)


async def _update(session: AsyncSession, client_id: uuid.UUID, **values: object) -> None:
    done = (
        await session.execute(
            update(ServerClient).where(ServerClient.id == client_id).values(**values).returning(ServerClient.id)
        )
    ).first()
    if done is None:
        raise ServerClientNotFound("No server client with this id.")


async def set_disabled(session: AsyncSession, ref: str, disabled: bool) -> ServerClientView:
    """A disabled client's keys stop authenticating (within the API-key cache time on each replica)."""
    client_id = _ref(ref)
    await _update(session, client_id, disabled=disabled)
    return await view(session, client_id)


async def rotate_key(session: AsyncSession, ref: str, grace: timedelta) -> RotatedKey:
    """Issue a new key; every older live key now expires after ``grace`` (never later than it
    already would), so MCP servers can roll the new key out without an outage."""
    client_id = _ref(ref)
    await _load(session, client_id)
    until: datetime = (await session.execute(select(func.now() + grace))).scalar_one()
    await session.execute(
        update(ServerClientKey)
        .where(
            ServerClientKey.server_client_id == client_id,
            ServerClientKey.revoked_at.is_(None),
            (ServerClientKey.expires_at.is_(None)) | (ServerClientKey.expires_at > until),
        )
        .values(expires_at=until)
    )
    key = await add_key(session, client_id)
    return RotatedKey(client=await view(session, client_id), api_key=key, old_keys_expire_at=until)


def validate_webhook_url(url: str) -> str:
    """The URL rule (``service.urls``): https, http only on loopback, a well-formed host and port,
    no credentials, no fragment. Every condition is checked; none returns early."""
    problem = url_problem(url)
    if problem is not None:
        raise InvalidRequest(f"The webhook URL is not usable: {problem}.", extra={"code": "invalid_webhook_url"})
    return url


def _new_secret(vault: Vault, client_id: uuid.UUID) -> tuple[str, str, bytes]:
    secret = new_secret()  # whsec_ + base64 of 32 bytes, as Standard Webhooks libraries read it
    key_id, blob = vault.encrypt(secret, owner=CLIENT_ID.format(client_id), purpose=WEBHOOK_SECRET_PURPOSE)
    return secret, key_id, blob


def validate_webhook_events(events: list[str] | None) -> list[str] | None:
    if events is None:
        return None
    unknown = sorted(set(events) - set(WEBHOOK_EVENT_TYPES))
    if unknown or not events:
        raise InvalidRequest(
            f"'events' lists types from: {', '.join(WEBHOOK_EVENT_TYPES)}.",
            extra={"code": "invalid_webhook_events", "unknown": unknown},
        )
    return sorted(set(events))


async def set_webhook(
    session: AsyncSession, vault: Vault, ref: str, url: str | None, events: list[str] | None = None
) -> WebhookSecret:
    """Set (or clear, with None) the completion webhook, for every event type or only ``events``.
    A signing secret is made the first time and returned once; changing the URL keeps the
    existing secret. The client's legacy endpoint follows (migration 0023's trigger): a URL it did
    not have is ``pending_verification`` until it answers the challenge, as every new endpoint is."""
    client_id = _ref(ref)
    client = await _load(session, client_id)
    if url is None:
        await _update(
            session,
            client_id,
            webhook_url=None,
            webhook_secret_enc=None,
            webhook_secret_key_id=None,
            webhook_events=None,
        )
        return WebhookSecret(client=await view(session, client_id), webhook_secret=None)
    url = validate_webhook_url(url)
    chosen = validate_webhook_events(events)
    shown: str | None = None
    if client.webhook_secret_enc is None:
        shown, key_id, blob = _new_secret(vault, client_id)
        await _update(
            session,
            client_id,
            webhook_url=url,
            webhook_secret_enc=blob,
            webhook_secret_key_id=key_id,
            webhook_events=chosen,
        )
    else:
        await _update(session, client_id, webhook_url=url, webhook_events=chosen)
    return WebhookSecret(client=await view(session, client_id), webhook_secret=shown)


async def rotate_webhook_secret(session: AsyncSession, vault: Vault, ref: str) -> WebhookSecret:
    client_id = _ref(ref)
    client = await _load(session, client_id)
    if client.webhook_url is None:
        raise InvalidRequest("Set a webhook URL first.", extra={"code": "no_webhook"})
    shown, key_id, blob = _new_secret(vault, client_id)
    await _update(session, client_id, webhook_secret_enc=blob, webhook_secret_key_id=key_id)
    return WebhookSecret(client=await view(session, client_id), webhook_secret=shown)


def webhook_secret(vault: Vault, client: ServerClient) -> str | None:
    if client.webhook_secret_enc is None or client.webhook_secret_key_id is None:
        return None
    return vault.decrypt_text(
        client.webhook_secret_key_id,
        client.webhook_secret_enc,
        owner=CLIENT_ID.format(client.id),
        purpose=WEBHOOK_SECRET_PURPOSE,
    )


__all__ = ["ServerClientNotFound", "parse_client"]
