"""The ``oauth_connect`` authorization, from the Continue button to the provider's redirect back.

The pages (``pages.py``) parse the request, make sure the browser is the flow's subject, call one
method here and render what it answers; everything between lives here.

Order of checks at the callback matters and is the point of this module: the ``state`` must be
known, the browser must be the flow's subject (the page checks it between ``callback_flow`` and
``callback``), and the state is then used up — once, by the browser session that started it,
before it expires — *before* anything the provider sent is looked at; the RFC 9207 ``iss`` is
checked before the code is exchanged. Every refusal leaves the flow pending and stores nothing,
and no refusal reaches the provider's token endpoint.

No provider call runs inside a transaction: the provider is resolved (discovery may fetch) before
the state is stored, and the code is exchanged after the state was used up and before the tokens
are written, each in a short unit of work of its own.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Mapping
from dataclasses import dataclass

import httpx
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from service.connections import oauth
from service.connections import repository as repo
from service.connections.errors import AccountMismatch
from service.connections.models import REAUTHORIZATION_REQUIRED, REVOKED, Connection, OAuthState
from service.connections.per_connection import at_token_server, token_server, with_parameters
from service.connections.providers import ResolvedProvider, get_provider
from service.connections.service import ConnectionService, granted_scopes
from service.crypto.vault import Vault
from service.db.base import FLOW_ID, uuid7
from service.flows.models import Flow
from service.flows.repository import Transition
from service.flows.service import FlowService, UnitOfWork
from service.flows.states import Actor, FlowStatus
from service.grants import repository as grant_repo
from service.grants.service import grant_for_flow
from service.identity.models import ServerClient

logger = logging.getLogger("elicitd.connections.pages")

CALLBACK_PATH = "/connect/callback"
STATE_SECONDS = 600
MAX_STATE_LENGTH = 512
MAX_CODE_LENGTH = 2048


@dataclass(frozen=True, slots=True)
class ConnectPage:
    """What the connect page shows: who asks, for which provider."""

    provider: ResolvedProvider
    client: str


@dataclass(frozen=True, slots=True)
class FinalPage:
    """The last page of a flow: how it ended, for whom, at which provider."""

    flow: Flow
    client: str
    provider: str


@dataclass(frozen=True, slots=True)
class Refused:
    """A callback refused before anything was stored. ``reason`` is one of ``state_invalid``,
    ``state_unusable``, ``iss_missing``, ``iss_mismatch``, ``code_missing``,
    ``callback_signature_invalid`` (a signed callback whose signature is not the provider's),
    ``callback_server_invalid`` (the token server a callback names is not one of the entry's
    hosts), ``account_mismatch`` (the provider answered for another account than the one the flow
    names); ``provider`` is the display name of the provider the state was for, when known."""

    reason: str
    flow: Flow | None = None
    provider: str | None = None


@dataclass(frozen=True, slots=True)
class Connected:
    """The connection is stored and the flow completed."""

    flow: Flow


CallbackOutcome = Refused | FinalPage | Connected


def connection_values(flow: Flow, entered: Mapping[str, str] | None = None) -> dict[str, str]:
    """The connection parameters for ``flow``: what the MCP server put in the flow's ``params``
    (checked when the flow was made), then what the person entered for the others: a value the
    server gave is never the person's to change."""
    given = {k: v for k, v in (flow.params or {}).items() if isinstance(v, str)}
    return {**dict(entered or {}), **given}


def callback_problem(
    provider: ResolvedProvider, code: str | None, callback: Mapping[str, str]
) -> str | ResolvedProvider:
    """What refuses a callback's code before it goes anywhere (a ``Refused`` reason), or the
    provider to exchange it at: a signed callback (Shopify's) must carry the provider's signature,
    and a callback naming the token server (Zoho's ``accounts-server``) one of the entry's hosts."""
    if not code or len(code) > MAX_CODE_LENGTH:
        return "code_missing"
    if not oauth.callback_signed(provider, callback):
        return "callback_signature_invalid"
    server = provider.quirks.token_server
    if server is None:
        return provider
    origin = token_server(provider, callback.get(server.callback_param))
    return "callback_server_invalid" if origin is None else at_token_server(provider, origin)


def iss_problem(provider: ResolvedProvider, iss: str | None) -> str | None:
    """RFC 9207: a provider that sends ``iss`` must send its own; one that promises it must send it."""
    if iss is None:
        return "iss_missing" if provider.iss_parameter_supported else None
    if provider.issuer is None:
        return None  # nothing to compare with (a provider configured by endpoints only)
    # Exactly, character for character (RFC 9207 §2.4): a lenient comparison is a second issuer.
    return None if iss == provider.issuer else "iss_mismatch"


class _FlowGone(Exception):
    """The flow finished (or expired) while the code was being exchanged: keep nothing."""


class ConnectService:
    def __init__(
        self,
        *,
        connections: ConnectionService,
        flows: FlowService,
        read_sessions: async_sessionmaker[AsyncSession],
        http: httpx.AsyncClient,
        public_url: str,
        vault: Vault,
    ) -> None:
        self.vault = vault
        self.connections = connections
        self.flows = flows
        self.read_sessions = read_sessions
        self.http = http
        # Fixed and exact: the one redirect URI registered at every provider.
        self.redirect_uri = public_url + CALLBACK_PATH

    # ---- the connect page and its buttons ---------------------------------------------------------
    async def connect_page(self, flow: Flow) -> ConnectPage:
        provider = await self.connections.provider(str(flow.provider))
        return ConnectPage(provider=provider, client=await self._client_name(flow))

    async def start(self, flow: Flow, browser_session_id: str, entered: Mapping[str, str] | None = None) -> str:
        """Continue: store the state and the sealed PKCE verifier; the provider's authorization URL.
        The provider's open connection parameters come from the flow (the MCP server gave them)
        or, for those it did not, from what the person ``entered``; each is checked by its
        pattern and the URL held to the provider's host (``with_parameters``) before anything is
        stored, and the state keeps them for the callback."""
        provider = with_parameters(
            await self.connections.provider(str(flow.provider)), connection_values(flow, entered)
        )
        state, verifier, state_id = oauth.new_state(), oauth.new_verifier(), uuid7()
        key_id, sealed = self.connections.seal_verifier(state_id, verifier)
        scopes = sorted(set(flow.scopes or []) | set(await self.kept_scopes(flow)))
        async with self.flows.unit_of_work() as uow:
            await repo.insert_state(
                uow.session,
                {
                    "id": state_id,
                    "state_hash": repo.state_digest(state),
                    "flow_id": flow.id,
                    "browser_session_id": bytes.fromhex(browser_session_id),
                    "provider": provider.name,
                    "verifier_enc": sealed,
                    "verifier_key_id": key_id,
                    "redirect_uri": self.redirect_uri,
                    "scopes": scopes,
                    "parameters": json.dumps(provider.parameters, sort_keys=True),
                },
                STATE_SECONDS,
            )
            await uow.event(flow.id, "provider_redirect", Actor.BROWSER, {"provider": provider.name})
        return oauth.authorization_url(
            provider, redirect_uri=self.redirect_uri, scopes=scopes, state=state, verifier=verifier
        )

    async def kept_scopes(self, flow: Flow) -> list[str]:
        """Scopes the asking server client already holds on the flow's connection that the flow does
        not name: the provider is asked for them again, so its new authorization keeps them. Read
        from the live grant when the user goes to the provider (not when the flow was made), and
        only the asking client's own — never what other servers hold on the account."""
        if flow.connection_id is None:
            return []
        async with self.read_sessions() as session:
            connection = await session.get(Connection, flow.connection_id)
            if (
                connection is None
                or connection.status == REVOKED
                or (connection.subject_iss, connection.subject_sub) != (flow.subject_iss, flow.subject_sub)
            ):
                return []
            mine = (await grant_repo.client_grants(session, flow.server_client_id, [flow.connection_id])).get(
                flow.connection_id
            )
        return sorted(set(mine.scopes if mine else ()) - set(flow.scopes or []))

    async def _in_place(self, session: AsyncSession, flow: Flow, scopes: list[str]) -> uuid.UUID | None:
        """The authorization a reconnect may write into: the asking client's own, when the provider
        stopped accepting it and the new tokens carry exactly its scopes (so every grant on it gets
        back what it had, no more)."""
        if flow.connection_id is None:
            return None
        mine = (await grant_repo.client_grants(session, flow.server_client_id, [flow.connection_id])).get(
            flow.connection_id
        )
        if (
            mine is None
            or mine.authorization_id is None
            or mine.authorization_status != REAUTHORIZATION_REQUIRED
            or mine.authorization_scopes != frozenset(scopes)
        ):
            return None
        return mine.authorization_id

    async def decline(self, flow: Flow) -> FinalPage:
        moved = await self.flows.finish(flow.id, Transition(FlowStatus.DECLINED, Actor.BROWSER, error_code="declined"))
        return await self.final_page(moved or flow)

    # ---- the provider's redirect back -------------------------------------------------------------
    async def callback_flow(self, state: str | None) -> Flow | None:
        """The flow a ``state`` names, without using the state up (to know whose browser to check)."""
        if not state or len(state) > MAX_STATE_LENGTH:
            return None
        async with self.read_sessions() as session:
            pending = await repo.peek_state(session, state)
        return None if pending is None else await self.flows.read(pending.flow_id)

    async def callback(
        self,
        flow: Flow,
        state: str,
        *,
        browser_session_id: str,
        iss: str | None,
        error: str | None,
        code: str | None,
        callback: Mapping[str, str] | None = None,
    ) -> CallbackOutcome:
        """Everything after the browser was shown to be the flow's subject, in the order above.
        ``callback`` is the callback's whole query: the provider's own parameters the catalog
        entry names (QuickBooks' ``realmId``) are kept from it, nothing else."""
        async with self.flows.unit_of_work() as uow:
            used = await repo.consume_state(uow.session, state, bytes.fromhex(browser_session_id))
            if used is None:
                await self._refused_event(uow, flow, "state_unusable")
        if used is None:
            return Refused("state_unusable", flow)
        if flow.status != "pending":
            return await self.final_page(flow)
        provider = with_parameters(await self.connections.provider(used.provider), used.parameters or {})
        problem = iss_problem(provider, iss)
        if problem is not None:
            return await self._refuse(flow, problem, provider)
        if error is not None:
            return await self._provider_error(flow, provider, oauth.safe_code(error))
        checked = callback_problem(provider, code, callback or {})
        if isinstance(checked, str) or code is None:
            return await self._refuse(flow, checked if isinstance(checked, str) else "code_missing", provider)
        return await self._exchange(flow, checked, used, code, callback)

    async def _refused_event(self, uow: UnitOfWork, flow: Flow, reason: str) -> None:
        await uow.event(flow.id, "callback_rejected", Actor.BROWSER, {"reason": reason})
        logger.warning("connect callback rejected", extra={"flow_id": FLOW_ID.format(flow.id), "code": reason})

    async def _refuse(self, flow: Flow, reason: str, provider: ResolvedProvider) -> Refused:
        async with self.flows.unit_of_work() as uow:
            await self._refused_event(uow, flow, reason)
        return Refused(reason, flow, provider.display_name)

    async def _provider_error(self, flow: Flow, provider: ResolvedProvider, code: str) -> FinalPage:
        change = (
            Transition(FlowStatus.DECLINED, Actor.PROVIDER, error_code="access_denied")
            if code == "access_denied"
            else Transition(
                FlowStatus.FAILED,
                Actor.PROVIDER,
                error_code=f"provider_{code}"[:64],
                error_message=f"{provider.display_name} answered with the error '{code}'.",
            )
        )
        moved = await self.flows.finish(flow.id, change)
        return await self.final_page(moved or flow, provider.display_name)

    async def _exchange(
        self,
        flow: Flow,
        provider: ResolvedProvider,
        used: OAuthState,
        code: str,
        callback: Mapping[str, str] | None = None,
    ) -> CallbackOutcome:
        service = self.connections
        try:
            tokens = await oauth.exchange_code(
                self.http,
                provider,
                redirect_uri=used.redirect_uri,
                code=code,
                verifier=service.open_verifier(used),
                callback=callback,
            )
            account_id, account_login = await oauth.fetch_account(self.http, provider, tokens)
            tokens = await oauth.look_up(self.http, provider, tokens)
        except oauth.ProviderError as exc:
            failed_code = "account_lookup_failed" if exc.error == "account_lookup_failed" else "token_exchange_failed"
            moved = await self.flows.finish(
                flow.id,
                Transition(
                    FlowStatus.FAILED,
                    Actor.PROVIDER,
                    error_code=failed_code,
                    error_message=f"{provider.display_name} did not complete the connection ({exc.error}).",
                    detail={"provider_error": exc.error},
                ),
            )
            return await self.final_page(moved or flow, provider.display_name)
        requested = list(used.scopes or [])
        try:
            async with self.flows.unit_of_work() as uow:
                scopes = granted_scopes(tokens, requested, provider.scope_separator)
                done = await service.store_authorization(
                    uow.session,
                    iss=flow.subject_iss,
                    sub=flow.subject_sub,
                    provider=provider,
                    tokens=tokens,
                    account_id=account_id,
                    account_login=account_login,
                    requested=requested,
                    reconnect=flow.connection_id,
                    in_place=await self._in_place(uow.session, flow, scopes),
                    connected_by=flow.server_client_id,
                )
                given = await grant_for_flow(
                    uow.session,
                    flow,
                    vault=self.vault,
                    connection_id=done.connection.id,
                    authorization_id=done.authorization.id,
                    scopes=done.authorization.scopes,
                )
                # The client is told its own authorization's scopes, not those others hold on the account.
                moved = await uow.transition(
                    flow.id,
                    Transition(
                        FlowStatus.COMPLETED, Actor.PROVIDER, result=done.result, connection_id=done.connection.id
                    ),
                )
                if moved is None:
                    raise _FlowGone
        except AccountMismatch:
            # Another account than the one the flow names: nothing is stored, the flow stays
            # pending, and the tokens just issued are handed back.
            await self._hand_back(provider, tokens)
            async with self.flows.unit_of_work() as uow:
                await self._refused_event(uow, flow, "account_mismatch")
            return Refused("account_mismatch", flow, provider.display_name)
        except _FlowGone:
            # Too late: the grant is useless to anyone, so hand it back rather than leave it live.
            await self._hand_back(provider, tokens)
            return await self.final_page(await self.flows.read(flow.id) or flow, provider.display_name)
        # A reconnect in place recovered the authorization: its other grantees hear it now.
        await service.announce(done.told)
        if given is not None and given.replaced is not None:
            # The client's grant moved to the new authorization: the one it replaced is handed back
            # at the provider (RFC 7009) once nobody else holds it.
            await service.retire([given.replaced])
        logger.info(
            "connection stored",
            extra={
                "flow_id": FLOW_ID.format(flow.id),
                "provider": provider.name,
                "connection_id": done.result["connection_id"],
            },
        )
        return Connected(flow=moved)

    async def _hand_back(self, provider: ResolvedProvider, tokens: oauth.TokenSet) -> None:
        await oauth.revoke(
            self.http,
            provider,
            tokens.refresh_token or tokens.access_token,
            "refresh_token" if tokens.refresh_token else "access_token",
        )

    # ---- the final page ---------------------------------------------------------------------------
    async def final_page(self, flow: Flow, provider_display: str | None = None) -> FinalPage:
        """How the flow ended; one read session for the names it shows."""
        provider_name = str(flow.provider)
        async with self.read_sessions() as session:
            if provider_display is None:
                row = await get_provider(session, provider_name)
                provider_display = row.display_name if row is not None else provider_name
            client = await _client_name(session, flow.server_client_id)
        return FinalPage(flow=flow, client=client, provider=provider_display)

    async def _client_name(self, flow: Flow) -> str:
        async with self.read_sessions() as session:
            return await _client_name(session, flow.server_client_id)


async def _client_name(session: AsyncSession, server_client_id: uuid.UUID) -> str:
    name = (
        await session.execute(select(ServerClient.display_name).where(ServerClient.id == server_client_id))
    ).scalar_one_or_none()
    return name or "An unknown service"
