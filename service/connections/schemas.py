"""What the connection API answers, and the result a finished connect gives an MCP server.

``result_of`` is the one shape of that result, whoever builds it (an OAuth connect, an
API-key form, a grant of an existing connection): it names the connection and never holds a token,
which only the token endpoint hands out.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, Protocol

import msgspec

from service.db.base import CONNECTION_ID


class TokenResponse(msgspec.Struct, omit_defaults=True):
    access_token: str
    token_type: str
    connection_id: str
    provider: str
    account_id: str
    scopes: list[str]
    expires_at: datetime | None = None
    account_login: str | None = None
    # Non-secret values the provider named beside the tokens, as its catalog entry declares them
    # (Salesforce's ``instance_url``, Zoho's ``api_domain``, Xero's ``tenant_id``, Atlassian's
    # ``cloud_id``); absent when there are none.
    metadata: dict[str, str] | None = None


class RevokeResponse(msgspec.Struct):
    # Connections disconnected for everyone (the server that connected them asked, or an operator).
    revoked: list[str]
    revoked_at_provider: bool
    # This server client's own grants ended (it was granted the account, another server connected it).
    grants_revoked: list[str] = msgspec.field(default_factory=list)


class NamedConnection(Protocol):
    """What a result names of a connection: a ``Connection`` row, a grant's offered connection."""

    @property
    def id(self) -> uuid.UUID: ...
    @property
    def provider(self) -> str: ...
    @property
    def account_id(self) -> str: ...
    @property
    def account_login(self) -> str | None: ...
    @property
    def scopes(self) -> Sequence[str] | None: ...


def connection_result(
    conn: NamedConnection, *, scopes: Iterable[str] | None = None, fields: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """``result_of`` for a connection read from the database; its own scopes unless told others."""
    return result_of(
        conn.id,
        conn.provider,
        conn.account_id,
        account_login=conn.account_login,
        scopes=(conn.scopes or ()) if scopes is None else scopes,
        fields=fields,
    )


def result_of(
    connection_id: uuid.UUID,
    provider: str,
    account_id: str,
    *,
    account_login: str | None = None,
    scopes: Iterable[str] = (),
    fields: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """What a completed flow tells the MCP server. An API-key connection (``fields`` given) names
    its non-secret fields; an OAuth one its login and the scopes this server may use."""
    result: dict[str, Any] = {
        "connection_id": CONNECTION_ID.format(connection_id),
        "provider": provider,
        "account_id": account_id,
    }
    if fields is not None:
        result["fields"] = dict(fields)
    else:
        result["account_login"] = account_login
        result["scopes"] = list(scopes)
    return result
