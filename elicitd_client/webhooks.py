"""Verify elicitd's completion webhooks (``Elicitd-Signature: t=<unix>,v1=<hex>``).

The signature is HMAC-SHA256 with the server client's webhook secret over ``t + "." + raw body``.
Verify over the raw bytes as received (never re-serialized JSON), compare in constant time, and
refuse timestamps outside a tolerance so a captured delivery cannot be replayed later.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from typing import Any


class InvalidWebhook(Exception):
    """The delivery is not from elicitd, was altered, or is too old/new."""


def verify_webhook(
    secret: str, body: bytes, signature: str | None, *, tolerance_seconds: float = 300, now: float | None = None
) -> dict[str, Any]:
    """Return the event (``{"id", "type", "created_at", "data": {"flow_id", "status", ...}}``)."""
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
    event = json.loads(body)
    if not isinstance(event, dict):
        raise InvalidWebhook("not an event object")
    return event
