"""The vault: secrets at rest (tokens, refresh tokens, API keys, client secrets, webhook secrets).

AES-256-GCM under the key ring (DESIGN §7). The key id is stored beside every value; the owner
(for example a connection id) and the purpose (``access_token``, ``refresh_token`` …) are the
associated data, so a ciphertext copied to another row or column fails to decrypt instead of
silently serving another user's token.
"""

from __future__ import annotations

from service.crypto.aead import Sealer
from service.settings import KeyRing


class Vault:
    def __init__(self, ring: KeyRing) -> None:
        self._sealer = Sealer(ring, "vault")

    @property
    def current_key_id(self) -> str:
        return self._sealer.current_key_id

    @staticmethod
    def _associated(owner: str, purpose: str) -> bytes:
        return f"{owner}\x00{purpose}".encode()

    def encrypt(self, plaintext: str | bytes, *, owner: str, purpose: str) -> tuple[str, bytes]:
        """Return ``(key_id, nonce || ciphertext)`` to store in two columns."""
        data = plaintext.encode() if isinstance(plaintext, str) else plaintext
        return self._sealer.seal(data, self._associated(owner, purpose))

    def decrypt(self, key_id: str, blob: bytes, *, owner: str, purpose: str) -> bytes:
        """Raises ``service.crypto.aead.SealError`` on tampering, a wrong owner/purpose or a lost key."""
        return self._sealer.open(key_id, blob, self._associated(owner, purpose))

    def decrypt_text(self, key_id: str, blob: bytes, *, owner: str, purpose: str) -> str:
        return self.decrypt(key_id, blob, owner=owner, purpose=purpose).decode()
