# size: every statement on grants and trust groups, each written against the one grantee rule below
"""SQL for grants and trust groups. Repositories never commit; services own the transaction.

The rule every statement here follows: a server client's *grantees* are the client itself and the
trust group it is in, decided by the ``trust_group_members`` row at the moment of the statement
(never a value cached in a process), so moving a client out of a group or revoking a grant holds on
every replica for the next request.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from service.crypto.vault import Vault
from service.db.base import uuid7
from service.grants import integrity

# How often the token endpoint writes ``last_used_at``: a read tells whether the stored value is
# older than this, and only then is it written, so a client calling every second costs one write a
# minute per grant, not one per call. ``/me`` shows last use to the minute.
TOUCH_SECONDS = 60

# The live grants of server client ``{client}`` on the connection ``{connection}`` (placeholders or
# column references, from code): its own, or its trust group's. Used inside larger statements.
FOR_CLIENT = (
    "g.connection_id = {connection} AND g.revoked_at IS NULL AND (g.server_client_id = {client} OR "
    "g.trust_group_id = (SELECT m.group_id FROM trust_group_members m WHERE m.server_client_id = {client}))"
)


def granted_lateral(*, connection: str, client: str) -> str:
    """A ``CROSS JOIN LATERAL … AS gr`` giving, for the connection ``connection`` (a column such as
    ``c.id``), what ``client`` (a placeholder such as ``$6`` or ``:client``) was granted:
    ``gr.granted`` (whether any live grant exists), ``gr.granted_scopes`` (the union of their
    scopes) and ``gr.touch_due`` (whether ``last_used_at`` is older than ``TOUCH_SECONDS``).

    An aggregate over no rows still yields one row, so the caller filters on ``gr.granted``.
    """
    where = FOR_CLIENT.format(connection=connection, client=client)
    return (
        "CROSS JOIN LATERAL (SELECT count(g.id) > 0 AS granted, "
        "COALESCE(array_agg(DISTINCT s ORDER BY s) FILTER (WHERE s IS NOT NULL), '{}') AS granted_scopes, "
        "COALESCE(bool_or(g.last_used_at IS NULL OR g.last_used_at < now() - "
        f"make_interval(secs => {TOUCH_SECONDS})), false) AS touch_due "
        f"FROM grants g LEFT JOIN LATERAL unnest(g.scopes) AS s ON true WHERE {where}) AS gr"
    )


@dataclass(frozen=True, slots=True)
class Grantee:
    """Who a grant made for a server client goes to: its trust group when it is in one."""

    server_client_id: uuid.UUID | None
    trust_group_id: uuid.UUID | None


async def grantee_of(session: AsyncSession, client_id: uuid.UUID) -> Grantee:
    group = (
        await session.execute(
            text("SELECT group_id FROM trust_group_members WHERE server_client_id = :c"), {"c": client_id}
        )
    ).scalar_one_or_none()
    return Grantee(server_client_id=None, trust_group_id=group) if group else Grantee(client_id, None)


async def granted_scopes(
    session: AsyncSession, client_id: uuid.UUID, connection_ids: Sequence[uuid.UUID]
) -> dict[uuid.UUID, set[str]]:
    """For each of ``connection_ids`` the client may use, the scopes it was granted (absent: none)."""
    if not connection_ids:
        return {}
    rows = await session.execute(
        text(
            "SELECT c.id, gr.granted_scopes FROM connections c "
            + granted_lateral(connection="c.id", client=":client")
            + " WHERE c.id = ANY(:ids) AND gr.granted"
        ),
        {"client": client_id, "ids": list(connection_ids)},
    )
    return {row[0]: set(row[1] or ()) for row in rows}


# The grant replaces the grantee's live grant on the connection if it has one (it now points at the
# given authorization, with that authorization's scopes); ``prev`` tells which authorization the
# replaced grant pointed at, so the caller can retire it when nobody else holds it.
_GIVE = """
WITH prev AS (SELECT g.authorization_id FROM grants g
              WHERE g.connection_id = :connection AND g.{column} = :grantee AND g.revoked_at IS NULL)
INSERT INTO grants (id, connection_id, authorization_id, server_client_id, trust_group_id, scopes, origin, flow_id,
                    mac, mac_key_id)
SELECT CAST(:id AS uuid), c.id, CAST(:authorization AS uuid), CAST(:client AS uuid), CAST(:grp AS uuid),
       CAST(:scopes AS text[]), CAST(:origin AS text), CAST(:flow AS uuid), :mac, :mac_kid
FROM connections c
WHERE c.id = :connection AND c.status <> 'revoked' {condition}
ON CONFLICT (connection_id, {column}) WHERE revoked_at IS NULL AND {column} IS NOT NULL
DO UPDATE SET authorization_id = EXCLUDED.authorization_id, scopes = EXCLUDED.scopes, origin = EXCLUDED.origin,
              flow_id = EXCLUDED.flow_id, mac = EXCLUDED.mac, mac_key_id = EXCLUDED.mac_key_id
RETURNING id, (SELECT authorization_id FROM prev)
"""

# The grant page's condition: the connection is still active and the subject's, and the
# authorization (for OAuth) still active, the connection's, and holding exactly the granted scopes.
_STILL_COVERS = (
    "AND c.status = 'active' AND c.subject_iss = :iss AND c.subject_sub = :sub "
    "AND (CAST(:authorization AS uuid) IS NULL OR EXISTS (SELECT 1 FROM authorizations a "
    "WHERE a.id = CAST(:authorization AS uuid) AND a.connection_id = c.id AND a.status = 'active' "
    "AND a.scopes @> CAST(:scopes AS text[]) AND CAST(:scopes AS text[]) @> a.scopes))"
)


@dataclass(frozen=True, slots=True)
class ClientGrant:
    """A server client's live grant on a connection, and the authorization it points at."""

    grant_id: uuid.UUID
    scopes: frozenset[str]
    authorization_id: uuid.UUID | None
    authorization_status: str | None
    authorization_scopes: frozenset[str]


async def client_grants(
    session: AsyncSession, client_id: uuid.UUID, connection_ids: Sequence[uuid.UUID]
) -> dict[uuid.UUID, ClientGrant]:
    """For each of ``connection_ids`` the client (or its trust group) holds a live grant on: that
    grant with its authorization (absent: no grant). The client's own grant wins over its group's."""
    if not connection_ids:
        return {}
    rows = await session.execute(
        text(
            "SELECT g.connection_id, g.id, g.scopes, g.authorization_id, a.status, a.scopes FROM grants g "
            "LEFT JOIN authorizations a ON a.id = g.authorization_id "
            "WHERE g.connection_id = ANY(:ids) AND "
            + FOR_CLIENT.format(connection="g.connection_id", client=":client")
            + " ORDER BY (g.server_client_id IS NULL), g.id"
        ),
        {"client": client_id, "ids": list(connection_ids)},
    )
    found: dict[uuid.UUID, ClientGrant] = {}
    for row in rows:
        found.setdefault(
            row[0],
            ClientGrant(
                grant_id=row[1],
                scopes=frozenset(row[2] or ()),
                authorization_id=row[3],
                authorization_status=row[4],
                authorization_scopes=frozenset(row[5] or ()),
            ),
        )
    return found


@dataclass(frozen=True, slots=True)
class HeldAuthorization:
    """An active authorization of a connection, with who holds it (for the grant page's words)."""

    id: uuid.UUID
    scopes: frozenset[str]
    holders: tuple[str, ...]  # display names of the server clients and groups granted it


async def active_authorizations(session: AsyncSession, connection_id: uuid.UUID) -> list[HeldAuthorization]:
    rows = await session.execute(
        text(
            "SELECT a.id, a.scopes, ARRAY(SELECT COALESCE(sc.display_name, tg.display_name) FROM grants g "
            "LEFT JOIN server_clients sc ON sc.id = g.server_client_id "
            "LEFT JOIN trust_groups tg ON tg.id = g.trust_group_id "
            "WHERE g.authorization_id = a.id AND g.revoked_at IS NULL ORDER BY 1) "
            "FROM authorizations a WHERE a.connection_id = :c AND a.status = 'active' "
            "ORDER BY cardinality(a.scopes), a.id"
        ),
        {"c": connection_id},
    )
    return [HeldAuthorization(id=r[0], scopes=frozenset(r[1] or ()), holders=tuple(r[2] or ())) for r in rows]


@dataclass(frozen=True, slots=True)
class Given:
    grant_id: uuid.UUID
    # The authorization the grantee's grant pointed at before, when it was replaced.
    replaced: uuid.UUID | None


async def give(
    session: AsyncSession,
    *,
    vault: Vault,
    connection_id: uuid.UUID,
    authorization_id: uuid.UUID | None,
    grantee: Grantee,
    scopes: Sequence[str],
    origin: str,
    flow_id: uuid.UUID | None = None,
    covering: tuple[str, str] | None = None,
) -> Given | None:
    """Grant ``scopes`` of one authorization of the connection (None: an API-key connection),
    replacing the grantee's live grant on it if it has one. The row carries its MAC.

    With ``covering`` = (iss, sub) the grant is made only while the connection is active and that
    subject's and the authorization active with exactly ``scopes`` (one statement: a disconnect in
    between wins). None when the connection no longer qualifies.
    """
    column = "server_client_id" if grantee.server_client_id is not None else "trust_group_id"
    sql = _GIVE.format(condition=_STILL_COVERS if covering else "", column=column)
    ordered = sorted(set(scopes))
    mac_kid, mac = integrity.seal(
        vault,
        connection_id=connection_id,
        authorization_id=authorization_id,
        server_client_id=grantee.server_client_id,
        trust_group_id=grantee.trust_group_id,
        scopes=ordered,
    )
    params: dict[str, Any] = {
        "id": uuid7(),
        "connection": connection_id,
        "authorization": authorization_id,
        "client": grantee.server_client_id,
        "grp": grantee.trust_group_id,
        "grantee": grantee.server_client_id or grantee.trust_group_id,
        "scopes": ordered,
        "origin": origin,
        "flow": flow_id,
        "mac": mac,
        "mac_kid": mac_kid,
    }
    if covering is not None:
        params["iss"], params["sub"] = covering
    row = (await session.execute(text(sql), params)).first()
    if row is None:
        return None
    return Given(grant_id=row[0], replaced=row[1] if row[1] != authorization_id else None)


async def revoke_for_subject(
    session: AsyncSession, grant_id: uuid.UUID, *, iss: str, sub: str, by: str
) -> uuid.UUID | None:
    """Revoke one live grant on one of the subject's connections; the connection's id, or None."""
    found: uuid.UUID | None = (
        await session.execute(
            text(
                "UPDATE grants g SET revoked_at = now(), revoked_by = :by FROM connections c "
                "WHERE g.id = :id AND g.revoked_at IS NULL AND c.id = g.connection_id "
                "AND c.subject_iss = :iss AND c.subject_sub = :sub RETURNING g.connection_id"
            ),
            {"id": grant_id, "iss": iss, "sub": sub, "by": by},
        )
    ).scalar_one_or_none()
    return found


async def revoke(session: AsyncSession, grant_id: uuid.UUID, *, by: str) -> bool:
    result = await session.execute(
        text(
            "UPDATE grants SET revoked_at = now(), revoked_by = :by WHERE id = :id AND revoked_at IS NULL RETURNING id"
        ),
        {"id": grant_id, "by": by},
    )
    return result.first() is not None


async def revoke_on_connections(session: AsyncSession, connection_ids: Sequence[uuid.UUID], *, by: str) -> int:
    """The connections went away (disconnected, revoked): their grants end with them."""
    if not connection_ids:
        return 0
    result = await session.execute(
        text(
            "UPDATE grants SET revoked_at = now(), revoked_by = :by "
            "WHERE connection_id = ANY(:ids) AND revoked_at IS NULL"
        ),
        {"ids": list(connection_ids), "by": by},
    )
    return int(result.rowcount or 0)  # type: ignore[attr-defined]


# ---- reading, for pages and operators ------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class AskingParty:
    """The server client that asks, and the trust group a grant to it would cover."""

    client: str
    group: str | None
    others: tuple[str, ...]  # the group's other members, by display name


async def asking_party(session: AsyncSession, client_id: uuid.UUID) -> AskingParty:
    row = (
        await session.execute(
            text(
                "SELECT sc.display_name, tg.display_name, ARRAY(SELECT o.display_name FROM trust_group_members om "
                "JOIN server_clients o ON o.id = om.server_client_id WHERE om.group_id = tg.id AND o.id <> sc.id "
                "ORDER BY o.display_name, o.id) FROM server_clients sc "
                "LEFT JOIN trust_group_members m ON m.server_client_id = sc.id "
                "LEFT JOIN trust_groups tg ON tg.id = m.group_id WHERE sc.id = :c"
            ),
            {"c": client_id},
        )
    ).first()
    if row is None:
        return AskingParty(client="An unknown service", group=None, others=())
    return AskingParty(client=row[0], group=row[1], others=tuple(row[2] or ()) if row[1] else ())


@dataclass(frozen=True, slots=True)
class ConnectionSummary:
    """A connection as the person's own pages name it: its provider (and that provider's name for a
    person), the account and the scopes it holds."""

    id: uuid.UUID
    provider: str
    provider_display: str
    account_id: str
    account_login: str | None
    scopes: list[str]


@dataclass(frozen=True, slots=True)
class OfferedConnection(ConnectionSummary):
    """An active connection of the flow's subject that could serve the flow without the provider."""

    fields: dict[str, Any]
    scope_descriptions: dict[str, Any]
    key_label: str


async def offered_connection(
    session: AsyncSession, connection_id: uuid.UUID, *, iss: str, sub: str, provider: str
) -> OfferedConnection | None:
    """The connection, when it is active, the subject's, for the provider, and holds a secret (an
    API key, or an active authorization) — the conditions under which a grant page may stand in
    for the provider step. Which authorization it offers is the grant service's choice."""
    row = (
        await session.execute(
            text(
                "SELECT c.id, c.provider, COALESCE(p.display_name, c.provider), c.account_id, c.account_login, "
                "c.scopes, c.fields, COALESCE(p.scope_descriptions, '{}'::jsonb), "
                "COALESCE(p.api_key_config->>'key_label', 'API key') "
                "FROM connections c LEFT JOIN providers p ON p.name = c.provider "
                "WHERE c.id = :id AND c.status = 'active' AND c.subject_iss = :iss AND c.subject_sub = :sub "
                "AND c.provider = :provider AND (c.access_token_enc IS NOT NULL OR EXISTS "
                "(SELECT 1 FROM authorizations a WHERE a.connection_id = c.id AND a.status = 'active'))"
            ),
            {"id": connection_id, "iss": iss, "sub": sub, "provider": provider},
        )
    ).first()
    if row is None:
        return None
    return OfferedConnection(
        id=row[0],
        provider=row[1],
        provider_display=row[2],
        account_id=row[3],
        account_login=row[4],
        scopes=list(row[5] or ()),
        fields=dict(row[6] or {}),
        scope_descriptions=dict(row[7] or {}),
        key_label=row[8],
    )


@dataclass(frozen=True, slots=True)
class GrantRow:
    id: uuid.UUID
    connection_id: uuid.UUID
    server_client_id: uuid.UUID | None
    trust_group_id: uuid.UUID | None
    grantee: str  # the client's or the group's display name
    members: tuple[str, ...]  # a group's members, by display name
    scopes: list[str]
    origin: str
    created_at: datetime
    last_used_at: datetime | None
    revoked_at: datetime | None
    revoked_by: str | None
    flow_id: uuid.UUID | None
    connection_status: str


_GRANT_COLUMNS = (
    "g.id, g.connection_id, g.server_client_id, g.trust_group_id, COALESCE(sc.display_name, tg.display_name), "
    "ARRAY(SELECT o.display_name FROM trust_group_members om JOIN server_clients o ON o.id = om.server_client_id "
    "WHERE om.group_id = g.trust_group_id ORDER BY o.display_name, o.id), "
    "g.scopes, g.origin, g.created_at, g.last_used_at, g.revoked_at, g.revoked_by, g.flow_id, c.status"
)
_GRANT_FROM = (
    "FROM grants g JOIN connections c ON c.id = g.connection_id "
    "LEFT JOIN server_clients sc ON sc.id = g.server_client_id "
    "LEFT JOIN trust_groups tg ON tg.id = g.trust_group_id"
)


def _grant_row(row: Any) -> GrantRow:
    return GrantRow(
        id=row[0],
        connection_id=row[1],
        server_client_id=row[2],
        trust_group_id=row[3],
        grantee=row[4] or "A removed service",
        members=tuple(row[5] or ()),
        scopes=list(row[6] or ()),
        origin=row[7],
        created_at=row[8],
        last_used_at=row[9],
        revoked_at=row[10],
        revoked_by=row[11],
        flow_id=row[12],
        connection_status=row[13],
    )


async def live_grants_of_subject(session: AsyncSession, *, iss: str, sub: str) -> list[GrantRow]:
    rows = await session.execute(
        text(
            f"SELECT {_GRANT_COLUMNS} {_GRANT_FROM} WHERE c.subject_iss = :iss AND c.subject_sub = :sub "
            "AND c.status <> 'revoked' AND g.revoked_at IS NULL ORDER BY g.created_at, g.id"
        ),
        {"iss": iss, "sub": sub},
    )
    return [_grant_row(r) for r in rows]


async def list_grants(
    session: AsyncSession,
    *,
    connection_id: uuid.UUID | None = None,
    server_client_id: uuid.UUID | None = None,
    trust_group_id: uuid.UUID | None = None,
    live_only: bool = False,
    after: uuid.UUID | None = None,
    limit: int = 50,
) -> list[GrantRow]:
    """For operators, oldest first by id (time-ordered), ``after`` being the last id of a page."""
    conditions = ["true"]
    params: dict[str, Any] = {"limit": limit}
    for name, value, column in (
        ("connection", connection_id, "g.connection_id"),
        ("client", server_client_id, "g.server_client_id"),
        ("grp", trust_group_id, "g.trust_group_id"),
        ("after", after, None),
    ):
        if value is None:
            continue
        conditions.append(f"{column} = :{name}" if column else "g.id > :after")
        params[name] = value
    if live_only:
        conditions.append("g.revoked_at IS NULL")
    rows = await session.execute(
        text(f"SELECT {_GRANT_COLUMNS} {_GRANT_FROM} WHERE {' AND '.join(conditions)} ORDER BY g.id LIMIT :limit"),
        params,
    )
    return [_grant_row(r) for r in rows]


async def get_grant(session: AsyncSession, grant_id: uuid.UUID) -> GrantRow | None:
    row = (
        await session.execute(text(f"SELECT {_GRANT_COLUMNS} {_GRANT_FROM} WHERE g.id = :id"), {"id": grant_id})
    ).first()
    return None if row is None else _grant_row(row)


@dataclass(frozen=True, slots=True)
class SubjectConnection(ConnectionSummary):
    status: str
    token_type: str
    created_at: datetime
    scope_descriptions: dict[str, Any]


_SUBJECT_CONNECTION = (
    "SELECT c.id, c.provider, COALESCE(p.display_name, c.provider), c.account_id, c.account_login, c.scopes, "
    "c.status, c.token_type, c.created_at, COALESCE(p.scope_descriptions, '{}'::jsonb) FROM connections c "
    "LEFT JOIN providers p ON p.name = c.provider WHERE c.subject_iss = :iss AND c.subject_sub = :sub "
    "AND c.status <> 'revoked'"
)


async def connections_of_subject(session: AsyncSession, *, iss: str, sub: str) -> list[SubjectConnection]:
    rows = await session.execute(
        text(f"{_SUBJECT_CONNECTION} ORDER BY COALESCE(p.display_name, c.provider), c.id"),
        {"iss": iss, "sub": sub},
    )
    return [SubjectConnection(*row) for row in rows]


async def connection_of_subject(
    session: AsyncSession, connection_id: uuid.UUID, *, iss: str, sub: str
) -> SubjectConnection | None:
    row = (
        await session.execute(
            text(f"{_SUBJECT_CONNECTION} AND c.id = :id"),
            {"id": connection_id, "iss": iss, "sub": sub},
        )
    ).first()
    return None if row is None else SubjectConnection(*row)
