"""Rows → admin views. Each view names its fields explicitly so a new secret column cannot leak
into a response by default."""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec

from service.admin.schemas import AdminFlow, AdminFlowEvent, ApiKeyView, ServerClientView, WebhookDeliveryView
from service.db.base import CLIENT_ID, CONNECTION_ID, FLOW_ID, PrefixedId
from service.flows.models import Flow, FlowEvent
from service.flows.schemas import Subject
from service.identity.models import ServerClient, ServerClientKey
from service.signals.webhooks import EVENT_ID

DELIVERY_ID = EVENT_ID
KEY_ID = PrefixedId("key")
V = TypeVar("V", bound=msgspec.Struct)


def columns(view: type[V], row: Any, **given: Any) -> V:
    """``view`` of ``row``: each field the view declares, from ``given`` or else the row's column of
    that name. The view's fields are the list of what may be shown, so a column the view does not
    name never leaves; a sealed column (``…_enc``) is refused even when one is named."""
    values = dict(given)
    for name in view.__struct_fields__:
        if name in values:
            continue
        if name.endswith("_enc"):
            raise TypeError(f"{view.__name__}.{name}: a sealed column is never shown")
        values[name] = getattr(row, name)
    return view(**values)


def flow_view(flow: Flow) -> AdminFlow:
    return AdminFlow(
        id=FLOW_ID.format(flow.id),
        kind=flow.kind,
        status=flow.status,
        server_client=CLIENT_ID.format(flow.server_client_id),
        subject=Subject(iss=flow.subject_iss, sub=flow.subject_sub),
        provider=flow.provider,
        scopes=list(flow.scopes or []),
        message=flow.message,
        created_at=flow.created_at,
        expires_at=flow.expires_at,
        completed_at=flow.completed_at,
        error_code=flow.error_code,
        error_message=flow.error_message,
        connection_id=None if flow.connection_id is None else CONNECTION_ID.format(flow.connection_id),
        context=dict(flow.context or {}),
        has_result=flow.result is not None,
    )


def event_view(event: FlowEvent) -> AdminFlowEvent:
    return AdminFlowEvent(
        id=event.id,
        at=event.at,
        type=event.type,
        actor=event.actor,
        from_status=event.from_status,
        to_status=event.to_status,
        detail=dict(event.detail or {}),
    )


def delivery_view(row: Any) -> WebhookDeliveryView:
    """From a ``webhook_outbox`` row (ORM object or mapping) plus its lease state."""
    if row.delivered_at is not None:
        state = "delivered"
    elif row.abandoned_at is not None:
        state = "abandoned"
    elif getattr(row, "in_flight", False):
        state = "in_flight"
    else:
        state = "pending"
    return WebhookDeliveryView(
        id=DELIVERY_ID.format(row.id),
        server_client=CLIENT_ID.format(row.server_client_id),
        flow_id=None if row.flow_id is None else FLOW_ID.format(row.flow_id),
        event_type=row.event_type,
        state=state,  # type: ignore[arg-type]
        attempts=row.attempts,
        next_attempt_at=row.next_attempt_at,
        last_attempt_at=row.last_attempt_at,
        last_status=row.last_status,
        last_error=row.last_error,
        delivered_at=row.delivered_at,
        abandoned_at=row.abandoned_at,
        created_at=row.created_at,
    )


def key_view(key: ServerClientKey, now: Any) -> ApiKeyView:
    active = key.revoked_at is None and (key.expires_at is None or key.expires_at > now)
    return ApiKeyView(
        id=KEY_ID.format(key.id),
        prefix=key.prefix,
        created_at=key.created_at,
        expires_at=key.expires_at,
        revoked_at=key.revoked_at,
        active=active,
    )


def client_view(client: ServerClient, keys: list[ServerClientKey], now: Any) -> ServerClientView:
    return ServerClientView(
        id=CLIENT_ID.format(client.id),
        name=client.name,
        display_name=client.display_name,
        allowed_providers=list(client.allowed_providers or []),
        trusted_issuers=list(client.trusted_issuers or []),
        webhook_url=client.webhook_url,
        webhook_events=None if client.webhook_events is None else list(client.webhook_events),
        webhook_secret_set=client.webhook_secret_enc is not None,
        disabled=client.disabled,
        flows_per_minute=client.flows_per_minute,
        pending_per_subject=client.pending_per_subject,
        subject_proof="none" if client.subject_proof == "none" else "required",
        resource_uris=list(client.resource_uris or []),
        created_at=client.created_at,
        keys=[key_view(k, now) for k in keys],
        warnings=client_warnings(client),
    )


def client_warnings(client: ServerClient) -> list[str]:
    """What an operator should fix: without subject proof the API key alone names any user; with it
    but no resource URI, no subject token can match and every call naming a subject is refused."""
    if client.subject_proof == "none":
        return ["subject_proof_not_required"]
    if not client.resource_uris:
        return ["no_resource_uris"]
    return []
