"""Creating and finding server clients (used by the CLI, `make run`, the admin API and the config file)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession

from service.crypto.vault import Vault
from service.db.base import uuid7
from service.errors import ConfigurationError, Conflict, InvalidRequest
from service.identity.keys import add_key
from service.identity.models import SUBJECT_PROOF_REQUIRED, ServerClient
from service.identity.subject_proof import check_policy, check_resource_uris
from service.text import display_text_problem

_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")


@dataclass(frozen=True, slots=True)
class CreatedClient:
    client: ServerClient
    api_key: str


async def create_server_client(
    session: AsyncSession,
    name: str,
    *,
    display_name: str | None = None,
    allowed_providers: list[str] | None = None,
    trusted_issuers: list[str] | None = None,
    subject_proof: str = SUBJECT_PROOF_REQUIRED,
    resource_uris: list[str] | None = None,
) -> CreatedClient:
    """Create a client with one API key; the key is returned here and never stored in clear.

    A new client must prove its users' identity (``subject_proof='required'``) unless the caller
    says otherwise: with ``none``, its API key alone names any user (service/identity/subject_proof)."""
    if not _NAME.match(name):
        raise InvalidRequest("A server client name is 1-64 characters: lowercase letters, digits, '-' or '_'.")
    if (problem := display_text_problem(display_name, "display_name")) is not None:
        raise InvalidRequest(problem + ".")
    if (await session.execute(select(ServerClient.id).where(ServerClient.name == name))).first():
        raise Conflict(f"A server client named '{name}' already exists.")
    client = ServerClient(
        name=name,
        display_name=display_name or name,
        allowed_providers=allowed_providers or [],
        trusted_issuers=trusted_issuers or [],
        subject_proof=check_policy(subject_proof),
        resource_uris=check_resource_uris(resource_uris or []),
    )
    session.add(client)
    await session.flush()
    key = await add_key(session, client.id)
    return CreatedClient(client=client, api_key=key)


async def find_by_name(session: AsyncSession, name: str) -> ServerClient | None:
    return (await session.execute(select(ServerClient).where(ServerClient.name == name))).scalars().first()


async def apply_config_section(session: AsyncSession, vault: Vault, entries: Any, env: Mapping[str, str]) -> int:
    """The ``server_clients:`` section of the config file: each MCP server's subject-proof policy.

    Each entry: ``name``, and optionally ``display_name``, ``subject_proof`` (``required`` or
    ``none``; default ``required``) and ``resource_uris``. A client the file names but that does not
    exist yet is registered without an API key (``elicitd admin clients rotate-key`` makes one), so
    a fresh deployment starts with the file alone; API keys never come from the file.
    """
    if not isinstance(entries, list):
        raise ConfigurationError("config file: 'server_clients' must be a list of tables")
    allowed = {"name", "display_name", "subject_proof", "resource_uris"}
    for index, entry in enumerate(entries):
        where = f"config file: server_clients[{index}]"
        if not isinstance(entry, dict):
            raise ConfigurationError(f"{where} must be a table")
        unknown = set(entry) - allowed
        if unknown:
            raise ConfigurationError(f"{where}: unknown keys {sorted(unknown)}")
        try:
            name = str(entry["name"])
            if not _NAME.match(name):
                raise InvalidRequest("name: 1-64 characters, lowercase letters, digits, '-' or '_'")
            uris = entry.get("resource_uris", [])
            if not isinstance(uris, list) or not all(isinstance(uri, str) for uri in uris):
                raise InvalidRequest("resource_uris must be a list of URIs")
            values = {
                "subject_proof": check_policy(str(entry.get("subject_proof", SUBJECT_PROOF_REQUIRED))),
                "resource_uris": check_resource_uris(uris),
            }
        except KeyError as exc:
            raise ConfigurationError(f"{where}: '{exc.args[0]}' is required") from None
        except InvalidRequest as exc:
            raise ConfigurationError(f"{where}: {exc.detail}") from None
        display_name = entry.get("display_name")
        statement = insert(ServerClient).values(id=uuid7(), name=name, display_name=str(display_name or name), **values)
        changes: dict[str, Any] = dict(values)
        if display_name is not None:
            changes["display_name"] = str(display_name)
        await session.execute(statement.on_conflict_do_update(index_elements=["name"], set_=changes))
    return len(entries)
