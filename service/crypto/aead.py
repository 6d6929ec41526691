"""AES-256-GCM under the key ring, with a sub-key per purpose.

Each sealed value names the key id that sealed it, so old values stay readable after rotation
while new ones use the current key. Sub-keys come from HKDF over the ring key and a purpose
label: a request state can never be opened as a vault secret and vice versa, even though one
ring configures both. Associated data binds a ciphertext to its owner (a row id, a subject):
moving a ciphertext to another row makes it fail to open.
"""

from __future__ import annotations

import base64
import os
from functools import lru_cache

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from service.settings import KeyRing

_NONCE = 12


class SealError(Exception):
    """The value was tampered with, sealed for another owner or purpose, or its key is gone."""


@lru_cache(maxsize=256)
def _subkey(key: bytes, purpose: str) -> AESGCM:
    derived = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=b"elicitd/" + purpose.encode()).derive(key)
    return AESGCM(derived)


class Sealer:
    """Seal and open bytes for one purpose."""

    def __init__(self, ring: KeyRing, purpose: str) -> None:
        self._ring = ring
        self._purpose = purpose

    @property
    def current_key_id(self) -> str:
        return self._ring.current[0]

    def seal(self, plaintext: bytes, associated: bytes) -> tuple[str, bytes]:
        """Return ``(key_id, nonce || ciphertext)``."""
        kid, key = self._ring.current
        nonce = os.urandom(_NONCE)
        return kid, nonce + _subkey(key, self._purpose).encrypt(nonce, plaintext, associated)

    def open(self, key_id: str, sealed: bytes, associated: bytes) -> bytes:
        key = self._ring.get(key_id)
        if key is None or len(sealed) <= _NONCE:
            raise SealError("unknown key or truncated value")
        try:
            return _subkey(key, self._purpose).decrypt(sealed[:_NONCE], sealed[_NONCE:], associated)
        except InvalidTag as exc:
            raise SealError("authentication failed") from exc

    def seal_token(self, plaintext: bytes, associated: bytes) -> str:
        """A compact, URL-safe text form: ``v1.<key id>.<base64url>``."""
        kid, sealed = self.seal(plaintext, associated)
        return f"v1.{kid}.{base64.urlsafe_b64encode(sealed).decode().rstrip('=')}"

    def open_token(self, token: str, associated: bytes) -> bytes:
        version, _, rest = token.partition(".")
        kid, _, body = rest.partition(".")
        if version != "v1" or not kid or not body or len(token) > 4096:
            raise SealError("malformed")
        try:
            sealed = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
        except ValueError as exc:
            raise SealError("malformed") from exc
        return self.open(kid, sealed, associated)
