"""Typed handlers for what elicitd tells an MCP server about connections and its webhook endpoints.

    hooks = WebhookHandlers(secret)  # or [new_secret, old_secret] while a rotation's grace lasts

    @hooks.on_connection_needs_reauthorization
    async def broken(event: ConnectionNeedsReauthorization) -> None:
        ...  # event.connection_id, event.provider, event.reason; ask the user to reconnect

    reply = await hooks.handle(body, headers)  # in your web framework's POST route
    # -> reply.status, reply.body, reply.content_type

``handle`` verifies the Standard Webhooks signature, answers elicitd's verification challenge
(``webhook.verification``: a new endpoint receives nothing until it has echoed the challenge) and
calls the handler registered for the event's type with a typed event. ``asgi_app()`` is the same as
a small ASGI application to mount at the endpoint's path. Events from the stream (``GET
/v1/events``) go through ``dispatch`` with the same handlers.

Events never carry a token. Handlers should be quick and idempotent: elicitd retries a delivery
that was not answered 2xx, with the same ``webhook-id`` (``event.id``).
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from elicitd_client.webhooks import InvalidWebhook, verify_event

VERIFICATION = "webhook.verification"
CONNECTION_EXPIRING = "connection.expiring"
CONNECTION_NEEDS_REAUTHORIZATION = "connection.needs_reauthorization"
CONNECTION_RECOVERED = "connection.recovered"
CONNECTION_REFRESHED = "connection.refreshed"
ENDPOINT_SUSPENDED = "webhook.endpoint_suspended"


@dataclass(frozen=True, slots=True)
class ConnectionEvent:
    """A connection's health changed (``docs/connections.md`` says what to do with each)."""

    id: str  # evt_…, the same on every retry: de-duplicate on it
    type: str
    connection_id: str  # cn_…
    provider: str
    account_id: str | None
    subject_iss: str
    subject_sub: str
    status: str  # healthy | expiring | needs_reauthorization | revoked
    reason: str | None
    http_status: int | None
    expires_at: str | None
    refresh_expires_at: str | None
    occurred_at: str | None
    data: Mapping[str, Any]


class ConnectionExpiring(ConnectionEvent):
    """Its refresh token (or the grant) ends soon: ask the person to reconnect before it does."""

    __slots__ = ()


class ConnectionNeedsReauthorization(ConnectionEvent):
    """Its tokens no longer work: the person must reconnect (a reconnect flow keeps the id)."""

    __slots__ = ()


class ConnectionRecovered(ConnectionEvent):
    """It works again (reconnected in place, or a refresh succeeded)."""

    __slots__ = ()


class ConnectionRefreshed(ConnectionEvent):
    """Its access token was refreshed (sent only where the operator turned this event on)."""

    __slots__ = ()


@dataclass(frozen=True, slots=True)
class EndpointSuspended:
    """One of this server client's webhook endpoints failed for too long and receives nothing more
    until an operator enables it again (and it answers a new challenge)."""

    id: str
    type: str
    endpoint_id: str  # we_…
    url: str
    failing_since: str | None
    last_status: int | None
    last_error: str | None
    occurred_at: str | None
    data: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class WebhookReply:
    """What to answer elicitd with."""

    status: int
    body: bytes = b""
    content_type: str = "application/json"


TypedEvent = ConnectionEvent | EndpointSuspended
_CONNECTION_TYPES: dict[str, type[ConnectionEvent]] = {
    CONNECTION_EXPIRING: ConnectionExpiring,
    CONNECTION_NEEDS_REAUTHORIZATION: ConnectionNeedsReauthorization,
    CONNECTION_RECOVERED: ConnectionRecovered,
    CONNECTION_REFRESHED: ConnectionRefreshed,
}
H = TypeVar("H", bound=Callable[..., Any])


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _str(value: Any) -> str | None:
    return None if value is None else str(value)


def parse_event(event: Mapping[str, Any]) -> TypedEvent | None:
    """The typed form of an event document (``{"id", "type", "data"}``), or None for another type."""
    kind = str(event.get("type", ""))
    data: Mapping[str, Any] = event.get("data") or {}
    event_id = str(event.get("id", ""))
    if kind in _CONNECTION_TYPES:
        subject = data.get("subject") or {}
        return _CONNECTION_TYPES[kind](
            id=event_id,
            type=kind,
            connection_id=str(data.get("connection_id", "")),
            provider=str(data.get("provider", "")),
            account_id=_str(data.get("account_id")),
            subject_iss=str(subject.get("iss", "")),
            subject_sub=str(subject.get("sub", "")),
            status=str(data.get("status", "")),
            reason=_str(data.get("reason")),
            http_status=_int(data.get("http_status")),
            expires_at=_str(data.get("expires_at")),
            refresh_expires_at=_str(data.get("refresh_expires_at")),
            occurred_at=_str(data.get("occurred_at")),
            data=data,
        )
    if kind == ENDPOINT_SUSPENDED:
        return EndpointSuspended(
            id=event_id,
            type=kind,
            endpoint_id=str(data.get("endpoint_id", "")),
            url=str(data.get("url", "")),
            failing_since=_str(data.get("failing_since")),
            last_status=_int(data.get("last_status")),
            last_error=_str(data.get("last_error")),
            occurred_at=_str(data.get("occurred_at")),
            data=data,
        )
    return None


class WebhookHandlers:
    """Handlers by event type, behind one signature check and the challenge answer."""

    def __init__(self, secret: str | Sequence[str], *, tolerance_seconds: float = 300) -> None:
        # Several secrets: during a rotation's grace the endpoint holds the new and the old one.
        self.secrets = [secret] if isinstance(secret, str) else list(secret)
        if not self.secrets:
            raise ValueError("at least one webhook secret is needed")
        self.tolerance_seconds = tolerance_seconds
        self._handlers: dict[str, Callable[[Any], Any]] = {}

    # ---- registration ---------------------------------------------------------------------------
    def on(self, event_type: str) -> Callable[[H], H]:
        """Register a handler for any event type; it gets the typed event where there is one, else
        the event document (``{"id", "type", "created_at", "data"}``)."""

        def register(handler: H) -> H:
            self._handlers[event_type] = handler
            return handler

        return register

    def on_connection_expiring(self, handler: Callable[[ConnectionExpiring], Any]) -> Callable[..., Any]:
        return self.on(CONNECTION_EXPIRING)(handler)

    def on_connection_needs_reauthorization(
        self, handler: Callable[[ConnectionNeedsReauthorization], Any]
    ) -> Callable[..., Any]:
        return self.on(CONNECTION_NEEDS_REAUTHORIZATION)(handler)

    def on_connection_recovered(self, handler: Callable[[ConnectionRecovered], Any]) -> Callable[..., Any]:
        return self.on(CONNECTION_RECOVERED)(handler)

    def on_connection_refreshed(self, handler: Callable[[ConnectionRefreshed], Any]) -> Callable[..., Any]:
        return self.on(CONNECTION_REFRESHED)(handler)

    def on_endpoint_suspended(self, handler: Callable[[EndpointSuspended], Any]) -> Callable[..., Any]:
        return self.on(ENDPOINT_SUSPENDED)(handler)

    # ---- receiving ------------------------------------------------------------------------------
    def verify(self, body: bytes | str, headers: Mapping[str, str]) -> dict[str, Any]:
        """The event, when one of the secrets signed it; ``InvalidWebhook`` otherwise."""
        for secret in self.secrets:
            try:
                return verify_event(secret, body, headers, tolerance_seconds=self.tolerance_seconds)
            except InvalidWebhook as exc:
                if str(exc) != "signature mismatch":
                    raise
        raise InvalidWebhook("signature mismatch")

    async def dispatch(self, event: Mapping[str, Any]) -> bool:
        """Call the handler of the event's type (a verified webhook body, or a stream event's
        ``{"id", "type", "data"}``); returns whether one was registered."""
        handler = self._handlers.get(str(event.get("type", "")))
        if handler is None:
            return False
        typed = parse_event(event)
        result = handler(typed if typed is not None else dict(event))
        if inspect.isawaitable(result):
            await result
        return True

    async def handle(self, body: bytes | str, headers: Mapping[str, str]) -> WebhookReply:
        """Verify, answer a challenge, or dispatch. A bad signature is 401 (elicitd retries, and an
        endpoint failing for long is suspended: check the secret); a handler's exception propagates
        (your framework answers 500, and elicitd retries)."""
        try:
            event = self.verify(body, headers)
        except InvalidWebhook as exc:
            return WebhookReply(401, json.dumps({"error": str(exc)}).encode())
        if event.get("type") == VERIFICATION:
            challenge = (event.get("data") or {}).get("challenge")
            return WebhookReply(200, json.dumps({"challenge": challenge}).encode())
        await self.dispatch(event)
        return WebhookReply(204)

    def asgi_app(self) -> Callable[[dict[str, Any], Any, Any], Awaitable[None]]:
        """An ASGI application answering POSTs with ``handle`` (anything else: 405)."""

        async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
            if scope["type"] != "http":
                return
            body = b""
            while True:
                message = await receive()
                body += message.get("body", b"")
                if not message.get("more_body"):
                    break
            if scope.get("method") != "POST":
                reply = WebhookReply(405)
            else:
                headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
                reply = await self.handle(body, headers)
            await send(
                {
                    "type": "http.response.start",
                    "status": reply.status,
                    "headers": [(b"content-type", reply.content_type.encode())],
                }
            )
            await send({"type": "http.response.body", "body": reply.body})

        return app


__all__ = [
    "ConnectionEvent",
    "ConnectionExpiring",
    "ConnectionNeedsReauthorization",
    "ConnectionRecovered",
    "ConnectionRefreshed",
    "EndpointSuspended",
    "WebhookHandlers",
    "WebhookReply",
    "parse_event",
]
