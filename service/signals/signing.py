"""Signatures on what elicitd tells MCP servers: webhook deliveries and event-stream events.

Both follow the Standard Webhooks specification (standardwebhooks.com), so a receiver verifies
them with that specification's library in its own language:

* ``webhook-id``: the event id (``evt_…``), the same on every retry: de-duplicate on it;
* ``webhook-timestamp``: unix seconds when this copy was signed;
* ``webhook-signature``: ``v1,`` + base64(HMAC-SHA256(key, id + "." + timestamp + "." + body)),
  where the key is the base64 text after the secret's ``whsec_`` prefix, decoded.

Secrets are ``whsec_`` + base64 of 32 random bytes. Secrets made before this format (the base64url
alphabet) are decoded the way the reference Python library decodes them, so that library still
verifies them; rotating such a secret gives one that every language's library reads the same way.

Deliveries also carry the earlier header, ``Elicitd-Signature: t=<unix>,v1=<hex HMAC-SHA256(secret,
t + "." + body)>``, for one more release (deprecated: verify the Standard Webhooks headers).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets

SECRET_PREFIX = "whsec_"
ID_HEADER = "webhook-id"
TIMESTAMP_HEADER = "webhook-timestamp"
SIGNATURE_HEADER = "webhook-signature"
LEGACY_SIGNATURE_HEADER = "Elicitd-Signature"


def new_secret() -> str:
    """A fresh signing secret in the specification's format."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(32)).decode()


def signing_key(secret: str) -> bytes:
    """The HMAC key of a ``whsec_`` secret, decoded exactly as the reference library does
    (``base64.b64decode(body + "==")``, which skips characters outside the alphabet)."""
    body = secret.removeprefix(SECRET_PREFIX)
    try:
        key = base64.b64decode(body + "==")
    except binascii.Error:
        key = b""
    # A secret no base64 reading accepts still signs (with its own bytes): nothing is sent unsigned.
    return key or body.encode()


def standard_signature(secret: str, msg_id: str, timestamp: int, body: bytes) -> str:
    """The ``webhook-signature`` value: ``v1,<base64 HMAC-SHA256>``."""
    signed = msg_id.encode() + b"." + str(timestamp).encode() + b"." + body
    digest = hmac.new(signing_key(secret), signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def standard_headers(secret: str, msg_id: str, timestamp: int, body: bytes) -> dict[str, str]:
    """The three Standard Webhooks headers for ``body``, signed now (``timestamp``)."""
    return {
        ID_HEADER: msg_id,
        TIMESTAMP_HEADER: str(timestamp),
        SIGNATURE_HEADER: standard_signature(secret, msg_id, timestamp, body),
    }


def legacy_signature(secret: str, timestamp: int, body: bytes) -> str:
    """The deprecated ``Elicitd-Signature`` value (kept for one release)."""
    digest = hmac.new(secret.encode(), str(timestamp).encode() + b"." + body, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={digest}"
