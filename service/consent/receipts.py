"""Signed consent receipts: compact JWS (ES256) that anyone can verify with ``/.well-known/jwks.json``.

A receipt proves, without asking elicitd, that a named subject approved an exact text for a named
server client at a given time. The text itself is not in the receipt, only its SHA-256: the MCP
server already holds the text it sent, and a receipt must not spread its contents further.
Keys: ``ELICITD_SIGNING_KEY`` holds one or more PEM EC P-256 private keys. The first signs; all are
published, so receipts signed before a rotation stay verifiable while the old key is listed.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from service.errors import ConfigurationError

# joserfc is imported where keys are parsed or used: a process with no signing key never loads it.
if TYPE_CHECKING:
    from joserfc.jwk import ECKey

RECEIPT_TYPE = "consent-receipt+jwt"
ALGORITHM = "ES256"
_PEM_BLOCK = re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.+?-----END [A-Z ]*PRIVATE KEY-----", re.DOTALL)


def consent_text(title: str, description: str, details: Sequence[tuple[str, str]]) -> str:
    """The exact text the consent page shows, in one canonical string (what the digest covers).

    The page renders these same three parts; changing one without the other would make a receipt
    attest to something the user did not see, so both go through this function's inputs.
    """
    text = f"{title}\n\n{description}"
    if details:
        text += "\n\n" + "\n".join(f"{key}: {value}" for key, value in details)
    return text


def text_digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class ReceiptSigner:
    """Signs receipts with the current key and publishes every configured public key."""

    def __init__(self, keys: Sequence[ECKey]) -> None:
        if not keys:
            raise ConfigurationError("ELICITD_SIGNING_KEY: at least one key is required")
        self._keys = list(keys)

    @classmethod
    def from_pem(cls, text: str) -> ReceiptSigner:
        """Parse one or more PEM private keys (EC P-256 only: receipts are ES256)."""
        from joserfc.errors import JoseError
        from joserfc.jwk import ECKey

        blocks = _PEM_BLOCK.findall(text)
        if not blocks:
            raise ConfigurationError("ELICITD_SIGNING_KEY must hold PEM private keys (EC P-256)")
        keys: list[ECKey] = []
        for number, block in enumerate(blocks, start=1):
            try:
                key = ECKey.import_key(block)
            except (JoseError, ValueError, TypeError) as exc:
                raise ConfigurationError(f"ELICITD_SIGNING_KEY: key {number} is not an EC private key") from exc
            if key.as_dict(private=False).get("crv") != "P-256" or not key.is_private:
                raise ConfigurationError(f"ELICITD_SIGNING_KEY: key {number} must be a P-256 private key")
            keys.append(key)
        return cls(keys)

    @staticmethod
    def generate_pem() -> str:
        """A fresh P-256 private key in PEM (``elicitd dev`` and ``elicitd keys signing``)."""
        from joserfc.jwk import ECKey

        return ECKey.generate_key("P-256").as_pem(private=True).decode("ascii")

    @property
    def key_id(self) -> str:
        return self._keys[0].thumbprint()

    def sign(self, claims: dict[str, Any]) -> str:
        from joserfc import jws

        header = {"alg": ALGORITHM, "typ": RECEIPT_TYPE, "kid": self.key_id}
        payload = json.dumps(claims, separators=(",", ":"), sort_keys=True).encode()
        return jws.serialize_compact(header, payload, self._keys[0], algorithms=[ALGORITHM])

    def jwks(self) -> dict[str, Any]:
        """Public keys only, each with its RFC 7638 thumbprint as ``kid``."""
        published = []
        for key in self._keys:
            public = dict(key.as_dict(private=False))
            public.update({"kid": key.thumbprint(), "use": "sig", "alg": ALGORITHM})
            published.append(public)
        return {"keys": published}
