"""The token endpoint's statements: what a server client was granted, read in one statement.

Every tool calls the token endpoint on every use, so its read is one constant statement on the
driver, outside any transaction (``service.db.direct``), and the grant's last use is noted by
another at most once a minute. A token is read *through the grant*: a server client is given only
its grant's authorization, never another one the same account holds for another server.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from service.connections.models import REVOKED
from service.db.direct import DirectStatements, Statement
from service.grants.repository import FOR_CLIENT, TOUCH_SECONDS


@dataclass(frozen=True, slots=True)
class TokenRow:
    """What the token endpoint reads of one grant and its authorization (``TokenStatements.for_client``)."""

    id: uuid.UUID  # the authorization's
    connection_id: uuid.UUID
    status: str
    scopes: list[str]
    token_type: str
    provider: str
    account_id: str
    account_login: str | None
    expires_at: datetime | None
    access_token_enc: bytes | None
    access_token_key_id: str | None
    subject_iss: str
    subject_sub: str
    grant_id: uuid.UUID
    grant_scopes: list[str]
    grant_client: uuid.UUID | None
    grant_group: uuid.UUID | None
    grant_authorization: uuid.UUID | None  # None for an API-key connection's grant
    grant_mac: bytes | None
    grant_mac_key_id: str | None
    # Whether the grant's ``last_used_at`` is due for a write (``service.grants``).
    touch_due: bool
    # The authorization's non-secret metadata (migration 0022); empty for an API-key connection.
    metadata_: dict[str, str]


def _either(column: str) -> str:
    """The authorization's column, or — for an API-key connection's grant, which points at no
    authorization — the connection's own (its key lives on the connection row)."""
    return f"CASE WHEN a.id IS NULL THEN c.{column} ELSE a.{column} END"


def _token_row(row: Any) -> tuple[TokenRow, bool]:
    return (
        TokenRow(
            id=row[0],
            connection_id=row[1],
            status=row[2],
            scopes=list(row[3] or ()),
            token_type=row[4],
            provider=row[5],
            account_id=row[6],
            account_login=row[7],
            expires_at=row[8],
            access_token_enc=row[9],
            access_token_key_id=row[10],
            subject_iss=row[11],
            subject_sub=row[12],
            grant_id=row[13],
            grant_scopes=list(row[14] or ()),
            grant_client=row[15],
            grant_group=row[16],
            grant_authorization=row[17],
            grant_mac=row[18],
            grant_mac_key_id=row[19],
            touch_due=bool(row[20]),
            metadata_=dict(row[22] or {}),
        ),
        bool(row[21]),
    )


# Every tool calls it on every use: the columns of ``TokenRow``, then whether the token is due for
# a refresh by the database clock. Only the grants the asking server client (or its trust group)
# holds are read, each with the one authorization it points at: a connection it was not granted is
# exactly as absent as one that does not exist, and an authorization it was not granted is never
# read. The authorization must name the connection's own subject, provider and account (the fields
# its tokens are bound to), so a row re-pointed at another connection is not read. An API-key
# connection's grant points at no authorization and reads the key on the connection row (whose id
# is then the tokens' owner, as for a connection's first authorization).
def _for_token(join: str = "") -> Statement[tuple[TokenRow, bool]]:
    """The token read, with ``join`` (one more inner join, which can only narrow it) before its
    ``WHERE``."""
    return Statement.named(
        f"SELECT COALESCE(a.id, c.id), c.id, {_either('status')}, {_either('scopes')}, {_either('token_type')}, "
        f"c.provider, c.account_id, c.account_login, {_either('expires_at')}, {_either('access_token_enc')}, "
        f"{_either('access_token_key_id')}, c.subject_iss, c.subject_sub, "
        "g.id, g.scopes, g.server_client_id, g.trust_group_id, g.authorization_id, g.mac, g.mac_key_id, "
        f"(g.last_used_at IS NULL OR g.last_used_at < now() - make_interval(secs => {TOUCH_SECONDS})), "
        f"COALESCE({_either('expires_at')} <= now() + make_interval(secs => :margin), false) AS due, "
        "a.metadata FROM connections c JOIN grants g ON "
        + FOR_CLIENT.format(connection="c.id", client=":client")
        + " LEFT JOIN authorizations a ON a.id = g.authorization_id AND a.connection_id = c.id "
        "AND a.subject_iss = c.subject_iss AND a.subject_sub = c.subject_sub AND a.provider = c.provider "
        f"AND a.account_id = c.account_id {join}"
        f"WHERE c.subject_iss = :iss AND c.subject_sub = :sub AND c.provider = :provider AND c.status <> '{REVOKED}' "
        f"AND ((a.id IS NOT NULL AND a.status <> '{REVOKED}') "
        "OR (g.authorization_id IS NULL AND c.token_type = 'api_key')) "
        "AND (CAST(:account AS text) IS NULL OR c.account_id = :account) "
        "ORDER BY c.updated_at DESC, c.id DESC, a.updated_at DESC",
        _token_row,
    )


_FOR_TOKEN = _for_token()
# The same for the RFC 8693 exchange, which answers only for a provider that is configured and
# enabled: the provider's switch read in the same statement, not in a second one.
_FOR_TOKEN_OF_ENABLED = _for_token("JOIN providers p ON p.name = c.provider AND p.enabled ")

# Whether a provider is configured and enabled, for the RFC 8693 exchange's ``invalid_target``
# (the token statement above reads connections whatever their provider's switch says). On the
# statement pool: through an ORM session this one read was a quarter of an exchange's CPU.
_PROVIDER_ENABLED = Statement.named("SELECT enabled FROM providers WHERE name = :name", lambda row: bool(row[0]))

# At most once a minute per grant.
_TOUCH = Statement.command(
    "UPDATE grants SET last_used_at = now() WHERE id = :grant_id AND revoked_at IS NULL "
    f"AND (last_used_at IS NULL OR last_used_at < now() - make_interval(secs => {TOUCH_SECONDS}))"
)


class TokenStatements:
    """The token endpoint's statements: each one constant ``Statement`` on the statement pool,
    outside any transaction (``service.db.direct``)."""

    __slots__ = ("_direct",)

    def __init__(self, direct: DirectStatements) -> None:
        self._direct = direct

    async def for_client(
        self,
        *,
        iss: str,
        sub: str,
        provider: str,
        account: str | None,
        margin_seconds: float,
        client_id: uuid.UUID,
        enabled_provider: bool = False,
    ) -> list[tuple[TokenRow, bool]]:
        """What ``client_id`` was granted of the subject's live connections to ``provider`` (one
        account's, when named), each with whether its token expires within ``margin_seconds``;
        with ``enabled_provider``, nothing unless the provider is configured and enabled."""
        return await self._direct.all(
            _FOR_TOKEN_OF_ENABLED if enabled_provider else _FOR_TOKEN,
            iss=iss,
            sub=sub,
            provider=provider,
            account=account,
            margin=margin_seconds,
            client=client_id,
        )

    async def provider_enabled(self, name: str) -> bool:
        """Whether ``name`` is a configured provider that is enabled."""
        return await self._direct.one(_PROVIDER_ENABLED, name=name) is True

    async def touch(self, grant_id: uuid.UUID) -> None:
        """Note the grant's last use, at most once a minute (``service.grants``)."""
        await self._direct.run(_TOUCH, grant_id=grant_id)
