"""Creating and finding server clients (used by the CLI, `make run` and the admin API)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from service.errors import Conflict, InvalidRequest
from service.identity.keys import add_key
from service.identity.models import ServerClient

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
) -> CreatedClient:
    """Create a client with one API key; the key is returned here and never stored in clear."""
    if not _NAME.match(name):
        raise InvalidRequest("A server client name is 1-64 characters: lowercase letters, digits, '-' or '_'.")
    if (await session.execute(select(ServerClient.id).where(ServerClient.name == name))).first():
        raise Conflict(f"A server client named '{name}' already exists.")
    client = ServerClient(
        name=name,
        display_name=display_name or name,
        allowed_providers=allowed_providers or [],
        trusted_issuers=trusted_issuers or [],
    )
    session.add(client)
    await session.flush()
    key = await add_key(session, client.id)
    return CreatedClient(client=client, api_key=key)


async def find_by_name(session: AsyncSession, name: str) -> ServerClient | None:
    return (await session.execute(select(ServerClient).where(ServerClient.name == name))).scalars().first()
