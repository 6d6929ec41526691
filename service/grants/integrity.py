"""Grant rows carry a MAC, so a row written by someone without the keys hands out nothing.

A grant decides who is handed a token; it holds no secret of its own, so a database writer could
otherwise add one row (``INSERT INTO grants …``) and have any server read any token. Every grant
the service writes carries an HMAC (``Vault.mac``, a sub-key of the key ring for this purpose) over
what it gives — the connection, the authorization, the grantee and the scopes — and the token
endpoint honours only rows whose MAC checks (``ConnectionService.token``).

What a MAC cannot do: tell an old row from a current one. A database writer who restores a row
as it was before a revocation revives that grant; a MAC stops forging a grant, not replaying one
(docs/security.md, the threat-model table). Rows written before migration 0012 have no MAC until
``elicitd keys rotate`` writes one; until then they are honoured only while the operator accepts
unbound secrets (``ELICITD_ACCEPT_UNBOUND_SECRETS``).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from service.crypto.vault import Vault

PURPOSE = "grant"


def _id(value: uuid.UUID | None) -> str:
    return "" if value is None else str(value)


def fields(
    *,
    connection_id: uuid.UUID,
    authorization_id: uuid.UUID | None,
    server_client_id: uuid.UUID | None,
    trust_group_id: uuid.UUID | None,
    scopes: Sequence[str],
) -> list[str]:
    return [
        _id(connection_id),
        _id(authorization_id),
        _id(server_client_id),
        _id(trust_group_id),
        " ".join(sorted(set(scopes))),
    ]


def seal(
    vault: Vault,
    *,
    connection_id: uuid.UUID,
    authorization_id: uuid.UUID | None,
    server_client_id: uuid.UUID | None,
    trust_group_id: uuid.UUID | None,
    scopes: Sequence[str],
) -> tuple[str, bytes]:
    return vault.mac(
        fields(
            connection_id=connection_id,
            authorization_id=authorization_id,
            server_client_id=server_client_id,
            trust_group_id=trust_group_id,
            scopes=scopes,
        ),
        purpose=PURPOSE,
    )


def intact(
    vault: Vault,
    *,
    mac_key_id: str | None,
    mac: bytes | None,
    connection_id: uuid.UUID,
    authorization_id: uuid.UUID | None,
    server_client_id: uuid.UUID | None,
    trust_group_id: uuid.UUID | None,
    scopes: Sequence[str],
) -> bool:
    """Whether the row is as the service wrote it (a row without a MAC only while unbound values
    are accepted, for an upgrade)."""
    if mac is None:
        return vault.accept_unbound
    return vault.verify_mac(
        mac_key_id,
        mac,
        fields(
            connection_id=connection_id,
            authorization_id=authorization_id,
            server_client_id=server_client_id,
            trust_group_id=trust_group_id,
            scopes=scopes,
        ),
        purpose=PURPOSE,
    )
