"""What refreshing and revoking share of the connection service, handed to each once."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import httpx
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from service.connections.providers import ResolvedProvider
from service.connections.sealing import TokenSeal


@dataclass(frozen=True, slots=True)
class ConnectionParts:
    sessions: async_sessionmaker[AsyncSession]
    # Autocommit sessions for reads that take no lock (a read pays no BEGIN/ROLLBACK).
    read_sessions: async_sessionmaker[AsyncSession]
    seal: TokenSeal
    # The process's shared client: providers' token and revocation endpoints.
    http: httpx.AsyncClient
    # The provider ready to talk to (discovery may fetch: called with no session open).
    provider: Callable[[str], Awaitable[ResolvedProvider]]
    # After a commit that appended stream events: wake those server clients' streams.
    announce: Callable[[list[uuid.UUID]], Awaitable[None]]
