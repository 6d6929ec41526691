"""Trust groups: an operator's statement that several server clients are one party.

Declared in the config file (``trust_groups``), with ``elicitd groups …`` or through the admin API
(``/admin/v1/trust-groups``). A group has a name (the natural key), a display name people read on
the pages that grant ("… and 2 other services of Example Corp"), and members, each a server client
in at most one group. By default — no group — every client is its own grantee.

What membership means, and why pages list every member: a grant made while a client is in a group
goes to the group, so every member may use it, including members added later; a member that
leaves loses the group's grants with its next request. Operators should group only services that
are truly one party.

Members are named by server-client name (``acme-files``) or id (``sc_…``).

A member whose ``subject_proof`` is ``none`` names any user with its API key alone, so in a group it
would read every grant the group holds with that key alone. Such a client joins a group only when
the group allows it (``allow_unproven``, an operator's explicit choice, flagged in the admin API's
group answers and in ``/readyz``), and a member's proof cannot be lowered to ``none`` while its
group does not allow it, nor can a group stop allowing it while such a member is in it. The three
changes take their row locks in one order (the client's row, then the group's) so two of them
racing cannot together leave an unproven member in a group that does not allow one.

Display names follow the one text rule (``service.text``), like server clients' names.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from service.crypto.vault import Vault
from service.db.base import CLIENT_ID, uuid7
from service.errors import ConfigurationError, Conflict, InvalidRequest, NotFound
from service.grants.models import GROUP_ID
from service.identity.models import SUBJECT_PROOF_NONE
from service.text import display_text_problem

_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
MAX_DISPLAY_NAME = 200
MAX_MEMBERS = 200


class TrustGroupNotFound(NotFound):
    code = "trust_group_not_found"
    title = "Trust group not found"


class ServerClientUnknown(InvalidRequest):
    code = "unknown_server_client"
    title = "Unknown server client"


class UnprovenMember(Conflict):
    """A client without subject proof would be (or stay) a member of a group that does not allow one."""

    code = "unproven_member"
    title = "Member without subject proof"


# What a group answer warns about: the operator allowed members without subject proof.
WARNING_UNPROVEN_ALLOWED = "unproven_members_allowed"


@dataclass(frozen=True, slots=True)
class Member:
    id: uuid.UUID
    name: str
    display_name: str
    subject_proof: str


@dataclass(frozen=True, slots=True)
class Group:
    id: uuid.UUID
    name: str
    display_name: str
    members: list[Member]
    created_at: datetime
    allow_unproven: bool


def check_name(name: str) -> str:
    if not _NAME.match(name):
        raise InvalidRequest("A trust group name is 1-64 characters: lowercase letters, digits, '-' or '_'.")
    return name


def check_display_name(value: str) -> str:
    """The pages that grant show it next to every member's name: the text rule keeps it from
    reordering or hiding them (a right-to-left override, a zero-width space, a line break)."""
    if (problem := display_text_problem(value, "display_name")) is not None:
        raise InvalidRequest(problem + ".")
    cleaned = value.strip()
    if not cleaned or len(cleaned) > MAX_DISPLAY_NAME:
        raise InvalidRequest(f"A display name is 1-{MAX_DISPLAY_NAME} printable characters.")
    return cleaned


async def resolve_clients(session: AsyncSession, refs: Sequence[str]) -> list[uuid.UUID]:
    """Server clients by name or ``sc_…`` id, in the order given; an unknown one is an error."""
    if len(refs) > MAX_MEMBERS:
        raise InvalidRequest(f"A trust group has at most {MAX_MEMBERS} members.")
    found: list[uuid.UUID] = []
    for ref in refs:
        parsed = CLIENT_ID.parse(ref)
        row = (
            await session.execute(
                text("SELECT id FROM server_clients WHERE id = :id")
                if parsed is not None
                else text("SELECT id FROM server_clients WHERE name = :name"),
                {"id": parsed} if parsed is not None else {"name": ref},
            )
        ).scalar_one_or_none()
        if row is None:
            raise ServerClientUnknown(f"No server client is named '{ref[:64]}'.")
        if row not in found:
            found.append(row)
    return found


async def _group_id(session: AsyncSession, ref: str) -> uuid.UUID:
    parsed = GROUP_ID.parse(ref)
    row = (
        await session.execute(
            text("SELECT id FROM trust_groups WHERE id = :id")
            if parsed is not None
            else text("SELECT id FROM trust_groups WHERE name = :name"),
            {"id": parsed} if parsed is not None else {"name": ref},
        )
    ).scalar_one_or_none()
    if row is None:
        raise TrustGroupNotFound("No trust group with this name or id.")
    return row  # type: ignore[no-any-return]


async def get_group(session: AsyncSession, ref: str) -> Group:
    return await _load(session, await _group_id(session, ref))


async def _load(session: AsyncSession, group_id: uuid.UUID) -> Group:
    row = (
        await session.execute(
            text("SELECT id, name, display_name, created_at, allow_unproven FROM trust_groups WHERE id = :id"),
            {"id": group_id},
        )
    ).first()
    if row is None:
        raise TrustGroupNotFound("No trust group with this name or id.")
    members = await session.execute(
        text(
            "SELECT sc.id, sc.name, sc.display_name, sc.subject_proof FROM trust_group_members m "
            "JOIN server_clients sc ON sc.id = m.server_client_id WHERE m.group_id = :id ORDER BY sc.name"
        ),
        {"id": group_id},
    )
    return Group(
        id=row[0],
        name=row[1],
        display_name=row[2],
        members=[Member(*m) for m in members],
        created_at=row[3],
        allow_unproven=row[4],
    )


async def list_groups(session: AsyncSession) -> list[Group]:
    ids = (await session.execute(text("SELECT id FROM trust_groups ORDER BY name"))).scalars().all()
    return [await _load(session, group_id) for group_id in ids]


async def create_group(
    session: AsyncSession,
    name: str,
    display_name: str,
    members: Sequence[str] = (),
    *,
    allow_unproven: bool = False,
) -> Group:
    check_name(name)
    shown = check_display_name(display_name)
    group_id = (
        await session.execute(
            text(
                "INSERT INTO trust_groups (id, name, display_name, allow_unproven) "
                "VALUES (:id, :name, :display, :allow) ON CONFLICT (name) DO NOTHING RETURNING id"
            ),
            {"id": uuid7(), "name": name, "display": shown, "allow": allow_unproven},
        )
    ).scalar_one_or_none()
    if group_id is None:
        raise Conflict(f"A trust group named '{name}' exists already.", extra={"code": "trust_group_exists"})
    await _set_members(session, group_id, await resolve_clients(session, members))
    return await _load(session, group_id)


async def update_group(
    session: AsyncSession,
    ref: str,
    *,
    display_name: str | None = None,
    members: Sequence[str] | None = None,
    allow_unproven: bool | None = None,
) -> Group:
    """Members are set after the flag, so one call may allow unproven members and add one, or
    replace the last unproven member and stop allowing them."""
    group_id = await _group_id(session, ref)
    if display_name is not None:
        await session.execute(
            text("UPDATE trust_groups SET display_name = :d WHERE id = :id"),
            {"d": check_display_name(display_name), "id": group_id},
        )
    if allow_unproven is not None:
        # The row lock this takes is what a concurrent join or lowering waits for (see the module).
        await session.execute(
            text("UPDATE trust_groups SET allow_unproven = :a WHERE id = :id"), {"a": allow_unproven, "id": group_id}
        )
    if members is not None:
        await _set_members(session, group_id, await resolve_clients(session, members))
    if allow_unproven is False:
        await _refuse_unproven_members(session, group_id)
    return await _load(session, group_id)


async def add_members(
    session: AsyncSession, ref: str, members: Sequence[str], *, allow_unproven: bool | None = None
) -> Group:
    group_id = await _group_id(session, ref)
    if allow_unproven:
        await session.execute(text("UPDATE trust_groups SET allow_unproven = true WHERE id = :id"), {"id": group_id})
    for client_id in await resolve_clients(session, members):
        await _join(session, group_id, client_id)
    return await _load(session, group_id)


async def remove_members(session: AsyncSession, ref: str, members: Sequence[str]) -> Group:
    group_id = await _group_id(session, ref)
    await session.execute(
        text("DELETE FROM trust_group_members WHERE group_id = :g AND server_client_id = ANY(:ids)"),
        {"g": group_id, "ids": await resolve_clients(session, members)},
    )
    return await _load(session, group_id)


async def delete_group(session: AsyncSession, ref: str) -> Group:
    """Delete the group; its grants go with it (its members lose them with their next request)."""
    group = await get_group(session, ref)
    await session.execute(text("DELETE FROM trust_groups WHERE id = :id"), {"id": group.id})
    return group


async def _join(session: AsyncSession, group_id: uuid.UUID, client_id: uuid.UUID) -> None:
    """A client is in one group at most: joining another is refused, not a silent move. A client
    without subject proof joins only a group that allows it; both rows are read under a share lock,
    so a concurrent lowering of the client's proof or a concurrent end of the group's allowance
    waits for this join (and then sees the member) or is seen by it."""
    allowed, proof, name = (
        await session.execute(
            text(
                "SELECT g.allow_unproven, sc.subject_proof, sc.name FROM trust_groups g, server_clients sc "
                "WHERE g.id = :g AND sc.id = :c FOR SHARE"
            ),
            {"c": client_id, "g": group_id},
        )
    ).one()
    if proof == SUBJECT_PROOF_NONE and not allowed:
        raise UnprovenMember(
            f"The server client '{name}' proves no subject (subject_proof none): its API key alone would read "
            "every grant of this group. Require subject proof for it, or allow unproven members in this group "
            '(--allow-unproven, or "allow_unproven": true).',
        )
    joined = (
        await session.execute(
            text(
                "INSERT INTO trust_group_members (server_client_id, group_id) VALUES (:c, :g) "
                "ON CONFLICT (server_client_id) DO UPDATE SET group_id = EXCLUDED.group_id "
                "WHERE trust_group_members.group_id = EXCLUDED.group_id RETURNING group_id"
            ),
            {"c": client_id, "g": group_id},
        )
    ).scalar_one_or_none()
    if joined is None:
        raise Conflict(
            f"The server client {CLIENT_ID.format(client_id)} is in another trust group; remove it there first.",
            extra={"code": "in_another_group"},
        )


async def _refuse_unproven_members(session: AsyncSession, group_id: uuid.UUID) -> None:
    """For a group that no longer allows members without subject proof: refuse while one is in it.
    Runs after the group's row is updated (locked), so a lowering racing with it has either
    committed (and is seen here) or waits for the group's row and then sees the group refuse."""
    unproven = (
        (
            await session.execute(
                text(
                    "SELECT sc.name FROM trust_group_members m JOIN server_clients sc ON sc.id = m.server_client_id "
                    "WHERE m.group_id = :g AND sc.subject_proof = 'none' ORDER BY sc.name"
                ),
                {"g": group_id},
            )
        )
        .scalars()
        .all()
    )
    if unproven:
        raise UnprovenMember(
            f"Members without subject proof are in this group ({', '.join(unproven[:10])}): require subject proof "
            "for them or remove them first.",
        )


async def check_may_drop_subject_proof(session: AsyncSession, client_id: uuid.UUID) -> None:
    """Before a server client's ``subject_proof`` becomes ``none``: refused while it is in a group
    that does not allow unproven members. Locks the client's row first (what a join's share lock
    waits for), then the group's (what a group's change of allowance waits for)."""
    await session.execute(text("SELECT 1 FROM server_clients WHERE id = :c FOR UPDATE"), {"c": client_id})
    row = (
        await session.execute(
            text(
                "SELECT g.name, g.allow_unproven FROM trust_group_members m JOIN trust_groups g ON g.id = m.group_id "
                "WHERE m.server_client_id = :c FOR SHARE OF g"
            ),
            {"c": client_id},
        )
    ).first()
    if row is not None and not row[1]:
        raise UnprovenMember(
            f"This server client is in the trust group '{row[0]}', which does not allow members without subject "
            "proof: its API key alone would read every grant of the group. Remove it from the group, or allow "
            "unproven members there first.",
        )


async def unproven_members_refused(session: AsyncSession) -> list[tuple[str, str]]:
    """(group, client) names of members without subject proof in groups that do not allow one."""
    rows = await session.execute(
        text(
            "SELECT g.name, sc.name FROM trust_group_members m JOIN trust_groups g ON g.id = m.group_id "
            "JOIN server_clients sc ON sc.id = m.server_client_id "
            "WHERE sc.subject_proof = 'none' AND NOT g.allow_unproven ORDER BY g.name, sc.name"
        )
    )
    return [(r[0], r[1]) for r in rows]


async def _set_members(session: AsyncSession, group_id: uuid.UUID, client_ids: list[uuid.UUID]) -> None:
    await session.execute(
        text("DELETE FROM trust_group_members WHERE group_id = :g AND NOT (server_client_id = ANY(:ids))"),
        {"g": group_id, "ids": client_ids},
    )
    for client_id in client_ids:
        await _join(session, group_id, client_id)


# ---- the config file -------------------------------------------------------------------------------
async def apply_config_section(session: AsyncSession, vault: Vault, entries: Any, env: Mapping[str, str]) -> int:
    """``[[trust_groups]]`` entries: ``name``, ``display_name``, ``members`` (server-client names)
    and ``allow_unproven`` (default false).

    Each named group is made to match its entry (members listed and no others, the allowance as
    written); groups the file does not name are left as the CLI or the admin API made them. Every
    member must exist when the file is applied: a typo must not silently leave a service out of
    its group.
    """
    if not isinstance(entries, list):
        raise ConfigurationError("trust_groups must be a list of tables")
    for index, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise ConfigurationError(f"trust_groups[{index}] must be a table")
        unknown = set(entry) - {"name", "display_name", "members", "allow_unproven"}
        if unknown:
            raise ConfigurationError(f"trust_groups[{index}]: unknown keys {sorted(unknown)}")
        name, shown, members = entry.get("name"), entry.get("display_name"), entry.get("members", [])
        if not isinstance(name, str) or not isinstance(shown, str):
            raise ConfigurationError(f"trust_groups[{index}] needs 'name' and 'display_name'")
        if not isinstance(members, list) or not all(isinstance(m, str) for m in members):
            raise ConfigurationError(f"trust_groups[{index}] ({name}): 'members' must be a list of server-client names")
        allow = entry.get("allow_unproven", False)
        if not isinstance(allow, bool):
            raise ConfigurationError(f"trust_groups[{index}] ({name}): 'allow_unproven' must be true or false")
        try:
            check_name(name)
            group_id = (
                await session.execute(
                    text(
                        "INSERT INTO trust_groups (id, name, display_name, allow_unproven) "
                        "VALUES (:id, :name, :display, :allow) ON CONFLICT (name) DO UPDATE "
                        "SET display_name = EXCLUDED.display_name, allow_unproven = EXCLUDED.allow_unproven "
                        "RETURNING id"
                    ),
                    {"id": uuid7(), "name": name, "display": check_display_name(shown), "allow": allow},
                )
            ).scalar_one()
            await _set_members(session, group_id, await resolve_clients(session, members))
        except (InvalidRequest, Conflict) as exc:
            raise ConfigurationError(f"trust_groups[{index}] ({name}): {exc.detail}") from None
    return len(entries)


async def check_config(session: AsyncSession) -> None:
    """After every section of the file: its ``server_clients`` may have set ``subject_proof = "none"``
    for a member of a group (one the file names or one made with the command) that does not allow it."""
    refused = await unproven_members_refused(session)
    if refused:
        group, client = refused[0]
        raise ConfigurationError(
            f"server client '{client}' has subject_proof none but is in trust group '{group}', which does not "
            "allow members without subject proof (set allow_unproven = true on the group, or require the proof)"
        )
