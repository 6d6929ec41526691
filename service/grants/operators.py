"""Grants and trust groups for operators: the functions behind ``/admin/v1`` and ``elicitd grants|groups``.

An operator may grant a connection to a server client or a trust group — the way back for a
connection the migration could not trace to a creator — and revoke any grant. Both are audited
(the admin API's audit row names the connection and the grantee; the CLI writes its own row).
Views hold no secret: a grant is ids, names, scopes and times.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated

import msgspec
from sqlalchemy.ext.asyncio import AsyncSession

from service.crypto.vault import Vault
from service.db.base import CLIENT_ID, CONNECTION_ID, FLOW_ID
from service.db.pagination import MAX_LIMIT, decode_cursor, page
from service.errors import Conflict, ConnectionNotFound, InvalidRequest, NotFound
from service.events import repository as events_repo
from service.grants import groups
from service.grants import repository as repo
from service.grants.models import GRANT_ID, GROUP_ID, ORIGIN_ADMIN

Scope = Annotated[str, msgspec.Meta(min_length=1, max_length=200, pattern=r"^\S+$")]


class GrantNotFound(NotFound):
    code = "grant_not_found"
    title = "Grant not found"


class Grantee(msgspec.Struct):
    type: str  # "server_client" or "trust_group"
    id: str
    display_name: str
    members: list[str]


class GrantView(msgspec.Struct):
    id: str
    connection_id: str
    connection_status: str
    grantee: Grantee
    scopes: list[str]
    origin: str
    flow_id: str | None
    created_at: datetime
    last_used_at: datetime | None
    revoked_at: datetime | None
    revoked_by: str | None


class GrantPage(msgspec.Struct):
    items: list[GrantView]
    next_cursor: str | None


class GiveGrant(msgspec.Struct, forbid_unknown_fields=True):
    scopes: Annotated[list[Scope], msgspec.Meta(max_length=50)] = []


class TrustGroupMemberView(msgspec.Struct):
    id: str
    name: str
    display_name: str
    # "none": its API key alone names any user, so it reads the group's grants on that key alone.
    subject_proof: str


class TrustGroupView(msgspec.Struct):
    id: str
    name: str
    display_name: str
    members: list[TrustGroupMemberView]
    created_at: datetime
    # Whether members without subject proof may join (an operator's explicit choice).
    allow_unproven: bool
    # Stable codes an operator should act on: ``unproven_members_allowed`` while ``allow_unproven``.
    warnings: list[str]


MemberRef = Annotated[str, msgspec.Meta(min_length=1, max_length=64)]


class CreateTrustGroup(msgspec.Struct, forbid_unknown_fields=True):
    name: Annotated[str, msgspec.Meta(min_length=1, max_length=64)]
    display_name: Annotated[str, msgspec.Meta(min_length=1, max_length=200)]
    members: Annotated[list[MemberRef], msgspec.Meta(max_length=groups.MAX_MEMBERS)] = []
    # A member without subject proof is refused (409 unproven_member) unless this is true.
    allow_unproven: bool = False


class UpdateTrustGroup(msgspec.Struct, forbid_unknown_fields=True):
    display_name: Annotated[str, msgspec.Meta(min_length=1, max_length=200)] | None = None
    members: Annotated[list[MemberRef], msgspec.Meta(max_length=groups.MAX_MEMBERS)] | None = None
    # false is refused (409 unproven_member) while a member without subject proof remains.
    allow_unproven: bool | None = None


def grant_view(row: repo.GrantRow) -> GrantView:
    if row.trust_group_id is not None:
        grantee = Grantee(
            type="trust_group",
            id=GROUP_ID.format(row.trust_group_id),
            display_name=row.grantee,
            members=list(row.members),
        )
    else:
        assert row.server_client_id is not None
        grantee = Grantee(
            type="server_client", id=CLIENT_ID.format(row.server_client_id), display_name=row.grantee, members=[]
        )
    return GrantView(
        id=GRANT_ID.format(row.id),
        connection_id=CONNECTION_ID.format(row.connection_id),
        connection_status=row.connection_status,
        grantee=grantee,
        scopes=row.scopes,
        origin=row.origin,
        flow_id=None if row.flow_id is None else FLOW_ID.format(row.flow_id),
        created_at=row.created_at,
        last_used_at=row.last_used_at,
        revoked_at=row.revoked_at,
        revoked_by=row.revoked_by,
    )


def group_view(group: groups.Group) -> TrustGroupView:
    return TrustGroupView(
        id=GROUP_ID.format(group.id),
        name=group.name,
        display_name=group.display_name,
        members=[
            TrustGroupMemberView(
                id=CLIENT_ID.format(m.id), name=m.name, display_name=m.display_name, subject_proof=m.subject_proof
            )
            for m in group.members
        ],
        created_at=group.created_at,
        allow_unproven=group.allow_unproven,
        warnings=[groups.WARNING_UNPROVEN_ALLOWED] if group.allow_unproven else [],
    )


def _connection(ref: str) -> uuid.UUID:
    parsed = CONNECTION_ID.parse(ref)
    if parsed is None:
        raise ConnectionNotFound("No connection with this id.")
    return parsed


def _grant(ref: str) -> uuid.UUID:
    parsed = GRANT_ID.parse(ref)
    if parsed is None:
        raise GrantNotFound("No grant with this id.")
    return parsed


async def _grantee(session: AsyncSession, ref: str) -> repo.Grantee:
    """``sc_…`` or a server-client name: that client itself (not its group); ``tg_…``: the group."""
    if GROUP_ID.parse(ref) is not None:
        return repo.Grantee(server_client_id=None, trust_group_id=(await groups.get_group(session, ref)).id)
    (client_id,) = await groups.resolve_clients(session, [ref])
    return repo.Grantee(server_client_id=client_id, trust_group_id=None)


async def list_grants(
    session: AsyncSession,
    *,
    connection: str | None = None,
    server_client: str | None = None,
    trust_group: str | None = None,
    live: bool = False,
    cursor: str | None = None,
    limit: int = 50,
) -> GrantPage:
    if not 1 <= limit <= MAX_LIMIT:
        raise InvalidRequest(f"limit must be between 1 and {MAX_LIMIT}.")
    client_id = None
    if server_client is not None:
        (client_id,) = await groups.resolve_clients(session, [server_client])
    group_id = None if trust_group is None else (await groups.get_group(session, trust_group)).id
    rows = await repo.list_grants(
        session,
        connection_id=None if connection is None else _connection(connection),
        server_client_id=client_id,
        trust_group_id=group_id,
        live_only=live,
        after=decode_cursor(cursor),
        limit=limit + 1,
    )
    items, next_cursor = page(rows, limit, lambda r: r.id)
    return GrantPage(items=[grant_view(r) for r in items], next_cursor=next_cursor)


class NoMatchingAuthorization(Conflict):
    code = "no_matching_authorization"
    title = "No authorization of the connection holds exactly these scopes"


async def give_grant(
    session: AsyncSession, vault: Vault, connection: str, grantee: str, scopes: list[str]
) -> GrantView:
    """An operator's grant: the connection must be live, and (for OAuth) hold an active
    authorization with exactly ``scopes`` (none named: its only authorization, all of whose scopes
    the grant then records) — the grant points at it, so the grantee is never handed a token with
    more than the grant names. Replaces a live grant the grantee holds."""
    connection_id = _connection(connection)
    who = await _grantee(session, grantee)
    held = await repo.active_authorizations(session, connection_id)
    authorization_id = None
    if held:
        # No scopes named: the connection's one authorization, with all of its scopes recorded.
        exact = [a for a in held if a.scopes == frozenset(scopes)] if scopes or len(held) > 1 else held
        if not exact:
            raise NoMatchingAuthorization(
                "Grant exactly the scopes of one of the connection's authorizations.",
                extra={"authorizations": [sorted(a.scopes) for a in held]},
            )
        authorization_id = exact[0].id
        scopes = sorted(exact[0].scopes)
    granted = await repo.give(
        session,
        vault=vault,
        connection_id=connection_id,
        authorization_id=authorization_id,
        grantee=who,
        scopes=scopes,
        origin=ORIGIN_ADMIN,
    )
    if granted is None:
        raise ConnectionNotFound("No live connection with this id.")
    row = await repo.get_grant(session, granted.grant_id)
    assert row is not None
    return grant_view(row)


async def revoke_grant(session: AsyncSession, grant: str) -> GrantView:
    grant_id = _grant(grant)
    if await repo.revoke(session, grant_id, by="admin"):
        # In the same transaction; streams learn of it at their next read (their poll interval).
        await events_repo.grants_revoked(session, [grant_id])
    row = await repo.get_grant(session, grant_id)
    if row is None:
        raise GrantNotFound("No grant with this id.")
    return grant_view(row)


async def show_grant(session: AsyncSession, grant: str) -> GrantView:
    row = await repo.get_grant(session, _grant(grant))
    if row is None:
        raise GrantNotFound("No grant with this id.")
    return grant_view(row)


# ---- trust groups, as views (the admin API's and the console's) ------------------------------------
async def list_trust_groups(session: AsyncSession) -> list[TrustGroupView]:
    return [group_view(g) for g in await groups.list_groups(session)]


async def show_trust_group(session: AsyncSession, group: str) -> TrustGroupView:
    return group_view(await groups.get_group(session, group))


async def create_trust_group(session: AsyncSession, data: CreateTrustGroup) -> TrustGroupView:
    made = await groups.create_group(
        session, data.name, data.display_name, data.members, allow_unproven=data.allow_unproven
    )
    return group_view(made)


async def update_trust_group(session: AsyncSession, group: str, data: UpdateTrustGroup) -> TrustGroupView:
    updated = await groups.update_group(
        session, group, display_name=data.display_name, members=data.members, allow_unproven=data.allow_unproven
    )
    return group_view(updated)


async def delete_trust_group(session: AsyncSession, group: str) -> TrustGroupView:
    return group_view(await groups.delete_group(session, group))
