"""A connection's secrets in and out of the vault: tokens, the PKCE verifier, an entered API key.

Every secret is sealed with its owner and purpose as associated data, and a token also with whose
it is (``token_binding``): a value copied to another row, person, provider or account no longer
opens. A value that does not open is never handed out: the connection needs a person again
(``ReauthorizationRequired``).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import uuid
from dataclasses import dataclass
from typing import Any

from service.connections import oauth
from service.connections.models import Authorization, Connection, OAuthState
from service.connections.schemas import TokenResponse
from service.connections.tokens import TokenRow
from service.crypto.aead import SealError
from service.crypto.vault import Vault
from service.db.base import CONNECTION_ID
from service.errors import ReauthorizationRequired

logger = logging.getLogger("elicitd.connections")

ACCESS_TOKEN = "access_token"
REFRESH_TOKEN = "refresh_token"
PKCE_VERIFIER = "pkce_verifier"


def binding(iss: str, sub: str, provider: str, account_id: str) -> tuple[str, str, str, str]:
    """Whose a connection's secrets are, bound into their associated data beside the owner (the
    connection's id for an API key, the authorization's for OAuth tokens) and the purpose: the
    subject (issuer and ``sub``), the provider and the provider account. The same four columns, in
    this order, are ``bound_sql`` of the token columns in ``crypto.columns``."""
    return (iss, sub, provider, account_id)


def token_binding(conn: Connection | Authorization | TokenRow) -> tuple[str, str, str, str]:
    """``binding`` of a stored connection or authorization."""
    return binding(conn.subject_iss, conn.subject_sub, conn.provider, conn.account_id)


@dataclass(frozen=True, slots=True)
class SealedTokens:
    """A token set as the provider gave it, its secrets sealed (``TokenSeal.seal_tokens``): what the
    repository writes into an authorization."""

    access_enc: bytes
    access_kid: str
    refresh_enc: bytes | None
    refresh_kid: str | None
    token_type: str
    expires_in: int | None
    refresh_expires_in: int | None
    # Not secret (``oauth.metadata_of``): stored as it is, beside the sealed tokens.
    metadata: dict[str, str] = dataclasses.field(default_factory=dict)

    def params(self) -> dict[str, Any]:
        return {
            "metadata": json.dumps(self.metadata, sort_keys=True),
            "access_enc": self.access_enc,
            "access_kid": self.access_kid,
            "refresh_enc": self.refresh_enc,
            "refresh_kid": self.refresh_kid,
            "token_type": self.token_type,
            "expires_in": self.expires_in,
            "refresh_expires_in": self.refresh_expires_in,
        }


class TokenSeal:
    """Seals and opens the secrets of connections and their authorizations with the vault."""

    def __init__(self, vault: Vault) -> None:
        self.vault = vault

    def seal_verifier(self, state_id: uuid.UUID, verifier: str) -> tuple[str, bytes]:
        return self.vault.encrypt(verifier, owner=str(state_id), purpose=PKCE_VERIFIER)

    def open_verifier(self, state: OAuthState) -> str:
        return self.vault.decrypt_text(
            state.verifier_key_id, state.verifier_enc, owner=str(state.id), purpose=PKCE_VERIFIER
        )

    def seal_tokens(self, owner_id: uuid.UUID, bound: tuple[str, ...], tokens: oauth.TokenSet) -> SealedTokens:
        """A token set sealed for the authorization ``owner_id`` (the refresh token only when given)."""
        owner = CONNECTION_ID.format(owner_id)
        access_kid, access = self.vault.encrypt(tokens.access_token, owner=owner, purpose=ACCESS_TOKEN, bound=bound)
        refresh_kid, refresh = (None, None)
        if tokens.refresh_token is not None:
            refresh_kid, refresh = self.vault.encrypt(
                tokens.refresh_token, owner=owner, purpose=REFRESH_TOKEN, bound=bound
            )
        return SealedTokens(
            access_enc=access,
            access_kid=access_kid,
            refresh_enc=refresh,
            refresh_kid=refresh_kid,
            token_type=tokens.token_type,
            expires_in=tokens.expires_in,
            refresh_expires_in=tokens.refresh_expires_in,
            metadata=dict(tokens.metadata),
        )

    def seal_api_key(
        self, connection_id: uuid.UUID, key: str, *, iss: str, sub: str, provider: str, account_id: str
    ) -> tuple[str, bytes]:
        """An entered API key, sealed as the connection's own access token (its owner is the
        connection: an API-key connection has no authorization)."""
        bound = binding(iss, sub, provider, account_id)
        return self.vault.encrypt(key, owner=CONNECTION_ID.format(connection_id), purpose=ACCESS_TOKEN, bound=bound)

    def access_token(self, auth: Authorization | TokenRow) -> str | None:
        return self._open(auth, auth.access_token_key_id, auth.access_token_enc, ACCESS_TOKEN)

    def refresh_token(self, auth: Authorization) -> str | None:
        return self._open(auth, auth.refresh_token_key_id, auth.refresh_token_enc, REFRESH_TOKEN)

    def api_key(self, conn: Connection) -> str | None:
        """An API-key connection's key (its own row's access token), for a check elicitd makes
        itself (a health probe)."""
        return self._open(conn, conn.access_token_key_id, conn.access_token_enc, ACCESS_TOKEN)

    def _open(
        self, auth: Authorization | TokenRow | Connection, key_id: str | None, sealed: bytes | None, purpose: str
    ) -> str | None:
        # The owner is the authorization's id in the connection-id form: an authorization made by
        # migration 0012 has its connection's id, so tokens sealed before it still open.
        owner = CONNECTION_ID.format(auth.id)
        try:
            # Values stored before the owner's fields were bound open the old way only while the
            # operator accepts them for an upgrade (``service.crypto.vault``).
            return self.vault.open_stored(
                key_id,
                sealed,
                owner=owner,
                purpose=purpose,
                bound=token_binding(auth),
                unbound_ok=self.vault.accept_unbound,
            )
        except SealError as exc:
            # Its key left the ring, or the value was altered or moved (to another row, person,
            # provider or account): nothing usable is stored, and the way out is to connect again.
            ref = CONNECTION_ID.format(auth.id if isinstance(auth, Connection) else auth.connection_id)
            logger.error("stored token cannot be decrypted", extra={"connection_id": ref})
            raise ReauthorizationRequired(
                "The stored credentials for this connection cannot be read; connect the account again.",
                extra={"connection_id": ref},
            ) from exc

    def answer(self, auth: Authorization | TokenRow, account_login: str | None) -> TokenResponse:
        """The token endpoint's answer from an authorization (or an API-key connection's row)."""
        token = self.access_token(auth)
        if token is None:
            raise ReauthorizationRequired(
                "The connection must be authorized again.",
                extra={"connection_id": CONNECTION_ID.format(auth.connection_id)},
            )
        return TokenResponse(
            access_token=token,
            token_type=auth.token_type,
            connection_id=CONNECTION_ID.format(auth.connection_id),
            provider=auth.provider,
            account_id=auth.account_id,
            account_login=account_login,
            # The authorization's own scopes: what this token really carries, and never more than
            # the grant (``token``), nor what other servers hold on the same account.
            scopes=sorted(auth.scopes or []),
            expires_at=auth.expires_at,
            metadata=dict(auth.metadata_) if getattr(auth, "metadata_", None) else None,
        )
