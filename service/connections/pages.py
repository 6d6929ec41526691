"""Browser side of ``oauth_connect``: the connect page, Continue / Decline, the provider callback
and the final page.

Order of checks at the callback matters and is the point of this module: the ``state`` must be
known, the browser must be the flow's subject, and the state is then used up — once, by the
browser session that started it, before it expires — *before* anything the provider sent is
looked at; the RFC 9207 ``iss`` is checked before the code is exchanged. Every refusal leaves the
flow pending and stores nothing, and no refusal reaches the provider's token endpoint.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from litestar import Request, Response, get, post
from litestar.response import Template
from sqlalchemy import select

from service.connections import oauth
from service.connections import repository as repo
from service.connections.catalog import describe_scope
from service.connections.providers import ResolvedProvider
from service.db.base import FLOW_ID, uuid7
from service.flows.models import Flow
from service.flows.pages import PAGE_HEADERS, page, status_page
from service.flows.repository import Transition
from service.flows.states import Actor, FlowStatus
from service.identity.models import ServerClient
from service.signin.gate import redirect

if TYPE_CHECKING:
    from service.services import Services

logger = logging.getLogger("elicitd.connections.pages")

Req = Request[Any, Any, Any]
KIND = "oauth_connect"
CALLBACK_PATH = "/connect/callback"
STATE_SECONDS = 600


def redirect_uri(services: Services) -> str:
    """Fixed and exact: the one redirect URI registered at every provider."""
    return services.settings.public_url + CALLBACK_PATH


async def client_name(services: Services, flow: Flow) -> str:
    async with services.read_sessions() as session:
        name = (
            await session.execute(select(ServerClient.display_name).where(ServerClient.id == flow.server_client_id))
        ).scalar_one_or_none()
    return name or "An unknown service"


def problem_page(status: int, heading: str, text: str, flow: Flow | None = None) -> Response[Any]:
    return page(
        "connect_problem.html",
        status,
        heading=heading,
        text=text,
        flow_id=FLOW_ID.format(flow.id) if flow is not None else "-",
    )


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


# ---- the connect page ------------------------------------------------------------------------------
async def connect_page(request: Req, flow: Flow, services: Services) -> Response[Any]:
    """``GET /f/{flow}`` for ``oauth_connect``: who asks, for which provider, for what, on which domain."""
    identity = await services.gate.require_subject(request, flow)
    if isinstance(identity, Response):
        return identity
    async with services.sessions() as session:
        provider = await services.connections.provider(session, str(flow.provider))
    flow_ref = FLOW_ID.format(flow.id)
    scopes = [{"name": s, "words": describe_scope(s, provider.scope_descriptions)} for s in flow.scopes or []]
    headers = dict(PAGE_HEADERS)
    # ``no-referrer`` would make Chromium send ``Origin: null`` with the form POST, which the CSRF
    # check rightly refuses; same-origin still sends nothing to the provider or anyone else.
    headers["Referrer-Policy"] = "same-origin"
    # The Continue POST answers with a redirect to the provider; allow exactly that origin.
    headers["Content-Security-Policy"] = "default-src 'self'; frame-ancestors 'none'; form-action 'self' " + _origin(
        provider.authorization_endpoint
    )
    context = {
        "flow_id": flow_ref,
        "client": await client_name(services, flow),
        "provider": provider.display_name,
        "provider_host": urlsplit(provider.authorization_endpoint).hostname or "",
        "scopes": scopes,
        "message": flow.message,
        "signed_in_as": identity.sub,
        "reconnect": flow.connection_id is not None,
        "csrf_token": identity.csrf_token,
        "continue_action": f"/connect/{flow_ref}/continue",
        "decline_action": f"/connect/{flow_ref}/decline",
    }
    return Template(template_name="connect.html", context=context, headers=headers)


@post(
    "/connect/{flow_ref:str}/continue",
    operation_id="connectContinue",
    tags=["browser"],
    status_code=303,
    summary="Start the provider authorization (form POST from the connect page, CSRF-protected)",
)
async def connect_continue(request: Req, flow_ref: str, services: Services) -> Response[Any]:
    checked = await services.gate.checked_post(request, flow_ref, KIND)
    if isinstance(checked, Response):
        return checked
    flow, identity = checked.flow, checked.identity
    service = services.connections
    state, verifier, state_id = oauth.new_state(), oauth.new_verifier(), uuid7()
    async with services.flows.unit_of_work() as uow:
        provider = await service.provider(uow.session, str(flow.provider))
        key_id, sealed = service.seal_verifier(state_id, verifier)
        await repo.insert_state(
            uow.session,
            {
                "id": state_id,
                "state_hash": repo.state_digest(state),
                "flow_id": flow.id,
                "browser_session_id": bytes.fromhex(identity.session_id),
                "provider": provider.name,
                "verifier_enc": sealed,
                "verifier_key_id": key_id,
                "redirect_uri": redirect_uri(services),
                "scopes": list(flow.scopes or []),
            },
            STATE_SECONDS,
        )
        await uow.event(flow.id, "provider_redirect", Actor.BROWSER, {"provider": provider.name})
    url = oauth.authorization_url(
        provider, redirect_uri=redirect_uri(services), scopes=list(flow.scopes or []), state=state, verifier=verifier
    )
    return redirect(url)


@post(
    "/connect/{flow_ref:str}/decline",
    operation_id="connectDecline",
    tags=["browser"],
    status_code=200,
    summary="Decline the connection (form POST from the connect page, CSRF-protected)",
)
async def connect_decline(request: Req, flow_ref: str, services: Services) -> Response[Any]:
    checked = await services.gate.checked_post(request, flow_ref, KIND)
    if isinstance(checked, Response):
        return checked
    flow = checked.flow
    moved = await services.flows.finish(flow.id, Transition(FlowStatus.DECLINED, Actor.BROWSER, error_code="declined"))
    return await _final_page(services, moved or flow)


# ---- the provider's redirect back -----------------------------------------------------------------
def _iss_problem(provider: ResolvedProvider, iss: str | None) -> str | None:
    """RFC 9207: a provider that sends ``iss`` must send its own; one that promises it must send it."""
    if iss is None:
        return "iss_missing" if provider.iss_parameter_supported else None
    if provider.issuer is None:
        return None  # nothing to compare with (a provider configured by endpoints only)
    return None if iss.rstrip("/") == provider.issuer.rstrip("/") else "iss_mismatch"


async def _reject(services: Services, flow: Flow, reason: str, status: int, heading: str, text: str) -> Response[Any]:
    async with services.flows.unit_of_work() as uow:
        await uow.event(flow.id, "callback_rejected", Actor.BROWSER, {"reason": reason})
    logger.warning("connect callback rejected", extra={"flow_id": FLOW_ID.format(flow.id), "code": reason})
    return problem_page(status, heading, text, flow)


_RESTART = "Go back to your assistant and open its link again to start over."


@get(
    CALLBACK_PATH,
    operation_id="connectCallback",
    tags=["browser"],
    cache=False,
    summary="The provider's redirect back (the one fixed redirect URI)",
)
async def connect_callback(request: Req, services: Services) -> Response[Any]:  # noqa: PLR0911 - one early answer per check, in order
    query = request.query_params
    state = query.get("state")
    if not state or len(state) > 512:
        return problem_page(400, "This sign-in response is not valid", _RESTART)
    async with services.sessions() as session:
        pending = await repo.peek_state(session, state)
    flow = None if pending is None else await services.flows.read(pending.flow_id)
    if pending is None or flow is None:
        return problem_page(400, "This sign-in response is not valid", _RESTART)
    identity = await services.gate.require_subject(request, flow)
    if isinstance(identity, Response):
        return identity
    async with services.flows.unit_of_work() as uow:
        used = await repo.consume_state(uow.session, state, bytes.fromhex(identity.session_id))
    if used is None:
        return await _reject(
            services,
            flow,
            "state_unusable",
            400,
            "This sign-in response was already used",
            "It was used before, has expired, or was started in another browser. " + _RESTART,
        )
    if flow.status != "pending":
        return await _final_page(services, flow)
    service = services.connections
    async with services.sessions() as session:
        provider = await service.provider(session, used.provider)
    problem = _iss_problem(provider, query.get("iss"))
    if problem is not None:
        return await _reject(
            services,
            flow,
            problem,
            400,
            "The response did not come from the expected provider",
            f"elicitd expected an answer from {provider.display_name} and got something else, "
            "so it did not continue. " + _RESTART,
        )
    error = query.get("error")
    if error is not None:
        code = oauth.safe_code(error)
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
        moved = await services.flows.finish(flow.id, change)
        return await _final_page(services, moved or flow)
    code_value = query.get("code")
    if not code_value or len(code_value) > 2048:
        return await _reject(services, flow, "code_missing", 400, "This sign-in response is not valid", _RESTART)
    return await _exchange(services, flow, provider, used, code_value)


class _FlowGone(Exception):
    """The flow finished (or expired) while the code was being exchanged: keep nothing."""


async def _exchange(services: Services, flow: Flow, provider: ResolvedProvider, used: Any, code: str) -> Response[Any]:
    service = services.connections
    flows = services.flows
    try:
        tokens = await oauth.exchange_code(
            provider, redirect_uri=used.redirect_uri, code=code, verifier=service.open_verifier(used)
        )
        account_id, account_login = await oauth.fetch_account(provider, tokens)
    except oauth.ProviderError as exc:
        failed_code = "account_lookup_failed" if exc.error == "account_lookup_failed" else "token_exchange_failed"
        moved = await flows.finish(
            flow.id,
            Transition(
                FlowStatus.FAILED,
                Actor.PROVIDER,
                error_code=failed_code,
                error_message=f"{provider.display_name} did not complete the connection ({exc.error}).",
                detail={"provider_error": exc.error},
            ),
        )
        return await _final_page(services, moved or flow)
    try:
        async with flows.unit_of_work() as uow:
            done = await service.store_authorization(
                uow.session,
                iss=flow.subject_iss,
                sub=flow.subject_sub,
                provider=provider,
                tokens=tokens,
                account_id=account_id,
                account_login=account_login,
                requested=list(used.scopes or []),
                reconnect=flow.connection_id,
            )
            moved = await uow.transition(
                flow.id,
                Transition(FlowStatus.COMPLETED, Actor.PROVIDER, result=done.result, connection_id=done.connection.id),
            )
            if moved is None:
                raise _FlowGone
    except _FlowGone:
        # Too late: the grant is useless to anyone, so hand it back rather than leave it live.
        await oauth.revoke(
            provider,
            tokens.refresh_token or tokens.access_token,
            "refresh_token" if tokens.refresh_token else "access_token",
        )
        return await _final_page(services, await flows.read(flow.id) or flow)
    logger.info(
        "connection stored",
        extra={
            "flow_id": FLOW_ID.format(flow.id),
            "provider": provider.name,
            "connection_id": done.result["connection_id"],
        },
    )
    # A redirect, so the code never stays in the address bar or history of the final page.
    return redirect(f"/connect/done/{FLOW_ID.format(flow.id)}")


# ---- the final page --------------------------------------------------------------------------------
async def _final_page(services: Services, flow: Flow) -> Response[Any]:
    provider_name = str(flow.provider)
    async with services.sessions() as session:
        from service.connections.providers import get_provider

        row = await get_provider(session, provider_name)
    headings = {
        "completed": "Connected",
        "declined": "Not connected",
        "failed": "The connection failed",
        "expired": "This link has expired",
        "cancelled": "Cancelled",
    }
    return page(
        "connect_done.html",
        200,
        heading=headings.get(flow.status, "Unavailable"),
        outcome=flow.status,
        client=await client_name(services, flow),
        provider=row.display_name if row is not None else provider_name,
        account_login=(flow.result or {}).get("account_login") if flow.status == "completed" else None,
        flow_id=FLOW_ID.format(flow.id),
    )


@get(
    "/connect/done/{flow_ref:str}",
    operation_id="connectDone",
    tags=["browser"],
    cache=False,
    summary="The final page of a connection: no JavaScript, says where to go back to",
)
async def connect_done(request: Req, flow_ref: str, services: Services) -> Response[Any]:
    flow_id = FLOW_ID.parse(flow_ref)
    flow = None if flow_id is None else await services.flows.read(flow_id)
    if flow is None or flow.kind != KIND:
        return status_page(None, 404)
    if flow.status == "pending":
        return redirect(f"/f/{flow_ref}")
    identity = await services.gate.require_subject(request, flow)
    if isinstance(identity, Response):
        return identity
    return await _final_page(services, flow)


ROUTES = [connect_continue, connect_decline, connect_callback, connect_done]
