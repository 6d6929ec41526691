"""Verify what elicitd signs: completion webhooks and event-stream events.

elicitd signs per the Standard Webhooks specification: ``webhook-id``, ``webhook-timestamp`` and
``webhook-signature`` (``v1,`` + base64 HMAC-SHA256 over ``id + "." + timestamp + "." + raw body``,
keyed with the base64 text after the secret's ``whsec_`` prefix). ``verify_event`` checks them
here without extra dependencies; the specification's own libraries (``standardwebhooks`` on PyPI
and npm, and others) accept the same headers and secret.

Verify the raw bytes as received (never re-serialized JSON), compare in constant time, and refuse
timestamps outside a tolerance so a captured delivery cannot be replayed later.

``verify_webhook`` checks the earlier ``Elicitd-Signature: t=<unix>,v1=<hex>`` header, which
deliveries still carry for one release; it is deprecated.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import time
from collections.abc import Mapping
from typing import Any


class InvalidWebhook(Exception):
    """The delivery is not from elicitd, was altered, or is too old/new."""


def _key(secret: str) -> bytes:
    body = secret.removeprefix("whsec_")
    try:
        key = base64.b64decode(body + "==")
    except binascii.Error:
        key = b""
    return key or body.encode()


def verify_event(
    secret: str,
    body: bytes | str,
    headers: Mapping[str, str],
    *,
    tolerance_seconds: float = 300,
    now: float | None = None,
) -> dict[str, Any]:
    """Check the Standard Webhooks headers and return the event (``{"id", "type", "created_at",
    "data": {...}}``). ``headers`` may be a request's headers or a stream event's ``headers``."""
    raw = body.encode() if isinstance(body, str) else body
    lowered = {name.lower(): value for name, value in headers.items()}
    msg_id = lowered.get("webhook-id")
    stamp = lowered.get("webhook-timestamp")
    signatures = lowered.get("webhook-signature")
    if not msg_id or not stamp or not signatures:
        raise InvalidWebhook("missing signature headers")
    if not stamp.isdigit():
        raise InvalidWebhook("malformed timestamp")
    if abs((time.time() if now is None else now) - int(stamp)) > tolerance_seconds:
        raise InvalidWebhook("timestamp outside tolerance")
    signed = msg_id.encode() + b"." + stamp.encode() + b"." + raw
    expected = hmac.new(_key(secret), signed, hashlib.sha256).digest()
    for candidate in signatures.split():
        version, _, value = candidate.partition(",")
        if version != "v1":
            continue
        try:
            given = base64.b64decode(value, validate=True)
        except binascii.Error:
            continue
        if hmac.compare_digest(expected, given):
            return _event(raw)
    raise InvalidWebhook("signature mismatch")


def verify_webhook(
    secret: str, body: bytes, signature: str | None, *, tolerance_seconds: float = 300, now: float | None = None
) -> dict[str, Any]:
    """Deprecated: check ``Elicitd-Signature``; use ``verify_event`` with the request's headers."""
    if not signature:
        raise InvalidWebhook("missing signature")
    parts: dict[str, list[str]] = {}
    for item in signature.split(","):
        name, _, value = item.strip().partition("=")
        parts.setdefault(name, []).append(value)
    stamps = parts.get("t") or []
    if len(stamps) != 1 or not stamps[0].isdigit():
        raise InvalidWebhook("malformed signature")
    timestamp = int(stamps[0])
    if abs((time.time() if now is None else now) - timestamp) > tolerance_seconds:
        raise InvalidWebhook("timestamp outside tolerance")
    expected = hmac.new(secret.encode(), str(timestamp).encode() + b"." + body, hashlib.sha256).hexdigest()
    if not any(hmac.compare_digest(expected, candidate) for candidate in parts.get("v1", [])):
        raise InvalidWebhook("signature mismatch")
    return _event(body)


def _event(body: bytes) -> dict[str, Any]:
    try:
        event = json.loads(body)
    except ValueError:
        raise InvalidWebhook("not JSON") from None
    if not isinstance(event, dict):
        raise InvalidWebhook("not an event object")
    return event
