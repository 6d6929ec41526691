"""The grant page (``oauth_connect`` / ``api_key`` flows for an account already connected) and the
user's own page, ``/me``.

The grant page is shown by the kind pages after their usual identity check (``page_for_offer``);
its POST runs every check of a flow page's POST (``BrowserGate.checked_post``). ``/me`` signs the
browser in at the issuer named in its query, exactly as a flow page does, and lists only the signed-in
subject's connections; each of its POSTs is CSRF-checked against that session and acts only on a
grant or connection of that subject (anything else answers as if it did not exist).

The texts people read live here and in ``grant.html`` / ``me.html``: who asks (a server client, or
a trust group with every member named), which account, what for, and that the provider is not
asked again.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any
from urllib.parse import urlsplit

from litestar import Request, Response, get, post
from litestar.params import Parameter

from service.branding.store import ShownBrand
from service.connections.catalog import describe_scope
from service.connections.reconnect import HealthView, NotReconnectable, health_of, start_reconnect
from service.connections.status_words import status_label, status_reason
from service.db.base import CONNECTION_ID, FLOW_ID
from service.db.unit import unit_of_work
from service.flows.models import Flow
from service.flows.pages import page, status_page
from service.grants.deps import GrantPageDeps
from service.grants.repository import AskingParty, OfferedConnection
from service.grants.service import (
    GRANTABLE_KINDS,
    SHARE,
    SHARE_WIDER,
    Allowed,
    ConnectionEntry,
    Gone,
    GrantOffer,
)
from service.i18n import _, format_when, isolate, ngettext
from service.identity import sessions as store
from service.signin.account_page import ME_PATH, me_path
from service.signin.csrf import csrf_token_for
from service.signin.gate import BrowserIdentity, redirect, session_cookie

Req = Request[Any, Any, Any]
MAX_ISSUER_LENGTH = 512


# ---- who asks, in words ---------------------------------------------------------------------------
def party_sentence(party: AskingParty) -> str:
    """ "Acme Files Assistant and 2 other services of Example Corp": every page that grants says it."""
    if party.group is None:
        return party.client
    client, group = isolate(party.client), isolate(party.group)
    if not party.others:
        return _("%(client)s (%(group)s)", client=client, group=group)
    return ngettext(
        "%(client)s and %(num)s other service of %(group)s",
        "%(client)s and %(num)s other services of %(group)s",
        len(party.others),
        client=client,
        group=group,
    )


def party_context(party: AskingParty) -> dict[str, Any]:
    """What a page needs to name the grantee: the sentence, and the full member list of a group."""
    members = [party.client, *party.others] if party.group is not None else []
    return {"party": party_sentence(party), "group": party.group, "members": members}


# ---- the grant page -------------------------------------------------------------------------------
def grant_action(flow: Flow) -> str:
    return f"/f/{FLOW_ID.format(flow.id)}/grant"


async def grant_page(
    request: Req, flow: Flow, services: GrantPageDeps, identity: BrowserIdentity
) -> Response[Any] | None:
    """The grant page when the flow's connection already covers what it asks, else None (the kind's
    own page follows): "<client> asks to use your <provider> account (<login>)", Allow / Decline."""
    offer = await services.grants.offer(flow)
    if offer is None:
        return None
    response = _grant_page(flow, identity, offer, await services.brands.for_client(flow.server_client_id))
    if offer.wider and offer.can_separate:
        # *Connect separately* POSTs to the connect route, which answers with a redirect to the
        # provider: allow exactly that origin as a form target, as the connect page does.
        endpoint = (await services.connections.provider(str(flow.provider))).authorization_endpoint
        parts = urlsplit(endpoint)
        headers = dict(response.headers)
        headers["Referrer-Policy"] = "same-origin"
        headers["Content-Security-Policy"] = (
            f"default-src 'self'; frame-ancestors 'none'; form-action 'self' {parts.scheme}://{parts.netloc}"
        )
        response.headers = headers
    return response


def _default_messages(conn: OfferedConnection) -> set[str]:
    """The kinds' own default texts ("Connect your Acme account to continue."), which would misread on
    a page that connects nothing: only a message the server client wrote itself is shown."""
    return {
        f"Connect your {conn.provider_display} account to continue.",
        f"Enter your {conn.provider_display} {conn.key_label} to continue.",
    }


def _grant_page(flow: Flow, identity: BrowserIdentity, offer: GrantOffer, brand: ShownBrand | None) -> Response[Any]:
    conn = offer.connection
    held = offer.authorization
    wider: dict[str, Any] = {"wider": False}
    if held is not None and offer.wider:
        # The only access elicitd holds for this account is wider than asked: say who holds what,
        # and offer a separate authorization with just the asked scopes first.
        wider = {
            "wider": True,
            "held_scopes": [
                {"name": s, "words": describe_scope(s, conn.scope_descriptions)} for s in sorted(held.scopes)
            ],
            "extra_scopes": [
                {"name": s, "words": describe_scope(s, conn.scope_descriptions)}
                for s in sorted(held.scopes - set(offer.scopes))
            ],
            "holders": list(held.holders),
            "can_separate": offer.can_separate,
            "separate_action": f"/connect/{FLOW_ID.format(flow.id)}/continue",
        }
    return page(
        "grant.html",
        flow_id=FLOW_ID.format(flow.id),
        client=offer.party.client,
        provider=conn.provider_display,
        account=conn.account_login or conn.account_id or None,
        key_label=conn.key_label if flow.kind == "api_key" else None,
        scopes=[{"name": s, "words": describe_scope(s, conn.scope_descriptions)} for s in offer.scopes],
        message=None if flow.message in _default_messages(conn) else flow.message,
        signed_in_as=identity.sub,
        csrf_token=identity.csrf_token,
        action=grant_action(flow),
        me_link=me_path(flow.subject_iss),
        **wider,
        **party_context(offer.party),
        # Shown beside the facts above, never in their place (base.html, docs/security.md).
        client_brand=brand,
    )


@post(
    "/f/{flow_ref:str}/grant",
    operation_id="answerGrantPage",
    tags=["browser"],
    status_code=200,
    summary="Allow or decline another service's use of an account already connected (form POST, CSRF-protected)",
)
async def answer_grant(request: Req, flow_ref: str, services: GrantPageDeps) -> Response[Any]:
    flow_id = FLOW_ID.parse(flow_ref)
    found = None if flow_id is None else await services.flows.read(flow_id)
    kind = found.kind if found is not None and found.kind in GRANTABLE_KINDS else GRANTABLE_KINDS[0]
    checked = await services.gate.checked_post(request, flow_ref, kind)
    if isinstance(checked, Response):
        return checked
    flow = checked.flow
    party = await services.grants.asking_party(flow.server_client_id)
    decision = checked.form.get("decision")
    if decision not in {"allow", "share_wider"}:
        moved = await services.grants.decline(flow)
        return _answered(moved or flow, party)
    outcome = await services.grants.allow(flow, SHARE_WIDER if decision == "share_wider" else SHARE)
    if isinstance(outcome, Gone):
        # The account was disconnected meanwhile: the flow's page now asks for it the usual way.
        return redirect(f"/f/{flow_ref}")
    if isinstance(outcome, Allowed):
        return _answered(outcome.flow, party)
    return status_page(await services.flows.read(flow.id), 200)


def _answered(flow: Flow, party: AskingParty) -> Response[Any]:
    allowed = flow.status == "completed"
    return page(
        "grant_done.html",
        heading=_("Allowed") if allowed else _("Not allowed"),
        outcome=flow.status,
        client=party.client,
        party=party_sentence(party),
        group=party.group,
        me_link=me_path(flow.subject_iss),
        flow_id=FLOW_ID.format(flow.id),
    )


# ---- /me ------------------------------------------------------------------------------------------
def _when(value: datetime | None) -> str | None:
    return None if value is None else format_when(value)


def _entry_view(entry: ConnectionEntry, health: HealthView | None) -> dict[str, Any]:
    def words(scopes: list[str]) -> list[dict[str, str]]:
        return [{"name": s, "words": describe_scope(s, entry.scope_descriptions)} for s in scopes]

    state = health.health if health is not None else "healthy"
    return {
        "id": entry.id,
        "provider": entry.provider,
        "account": entry.account,
        "scopes": words(entry.scopes),
        "status": entry.status,
        "health": state,
        "health_label": status_label(state),
        "health_reason": status_reason(state, health.reason if health else None, isolate(entry.provider)),
        # Offered where a person's action helps: a broken connection, or one about to stop.
        "reconnect": health is not None and health.reconnectable and state in {"expiring", "needs_reauthorization"},
        "is_api_key": entry.is_api_key,
        "connected": _when(entry.created_at),
        "last_used": _when(entry.last_used_at),
        "grants": [
            {
                "id": g.id,
                "grantee": g.grantee,
                "members": list(g.members),
                "is_group": g.is_group,
                "scopes": words(g.scopes),
                "since": _when(g.created_at),
                "last_used": _when(g.last_used_at),
            }
            for g in entry.grants
        ],
    }


async def _signed_in(request: Req, services: GrantPageDeps) -> store.SessionRow | None:
    token = session_cookie(services.settings, request)
    if token is None:
        return None
    async with unit_of_work(services.sessions) as session:
        return await store.touch_session(session, token)


def _identity(row: store.SessionRow) -> BrowserIdentity:
    return BrowserIdentity(session_id=row.id.hex(), iss=row.iss, sub=row.sub, csrf_token=csrf_token_for(row))


@get(
    ME_PATH,
    operation_id="ownPage",
    tags=["browser"],
    summary="The signed-in person's connected accounts, who may use each, and buttons to take access back",
    description="`iss` names the sign-in service; without a session for it the browser is sent to sign in "
    "there first, and comes back here.",
)
async def own_page(
    request: Req,
    services: GrantPageDeps,
    iss: Annotated[str | None, Parameter(query="iss", max_length=MAX_ISSUER_LENGTH)] = None,
) -> Response[Any]:
    row = await _signed_in(request, services)
    if iss is not None:
        issuer = await services.issuers.resolve(iss)
        if issuer is None:
            return page(
                "signin_problem.html",
                404,
                heading=_("Unknown sign-in service"),
                text=_("This elicitd does not know that sign-in service. Open this page from a link elicitd gave you."),
            )
        if row is None or row.iss != issuer.issuer:
            return await services.gate.start_login(request, issuer, me_path(issuer.issuer))
    if row is None:
        return await _choose_issuer(services)
    entries = await services.grants.overview(iss=row.iss, sub=row.sub)
    ids = {e.id: CONNECTION_ID.parse(e.id) for e in entries}
    async with services.connections.read_sessions() as session:
        health = await health_of(session, [cid for cid in ids.values() if cid is not None])
    identity = _identity(row)
    issuer = await services.issuers.resolve(row.iss)
    return page(
        "me.html",
        signed_in_as=row.sub,
        issuer=issuer.display_name if issuer is not None else row.iss,
        connections=[_entry_view(e, health.get(cid) if (cid := ids[e.id]) else None) for e in entries],
        csrf_token=identity.csrf_token,
        back=me_path(row.iss),
    )


async def _choose_issuer(services: GrantPageDeps) -> Response[Any]:
    issuers = await services.grants.sign_in_choices()
    return page(
        "me_signin.html",
        issuers=[{"name": name, "link": me_path(issuer)} for issuer, name in issuers],
    )


async def _checked_me_post(request: Req, services: GrantPageDeps) -> BrowserIdentity | Response[Any]:
    """A signed-in session and its own CSRF token, or the page to answer with."""
    row = await _signed_in(request, services)
    if row is None:
        return page(
            "signin_problem.html",
            401,
            heading=_("You are signed out"),
            text=_("Your session ended before the form was sent. Open your elicitd page again and sign in."),
        )
    identity = _identity(row)
    raw = await request.form()
    submitted = raw.get("csrf_token")
    services.gate.check_csrf(request, identity, submitted if isinstance(submitted, str) else None)
    return identity


@post(
    "/me/grants/{grant_ref:str}/revoke",
    operation_id="ownPageRevokeGrant",
    tags=["browser"],
    status_code=303,
    summary="Take back one service's access to one account (form POST from /me, CSRF-protected)",
)
async def revoke_grant(request: Req, grant_ref: str, services: GrantPageDeps) -> Response[Any]:
    identity = await _checked_me_post(request, services)
    if isinstance(identity, Response):
        return identity
    if not await services.grants.revoke_for_subject(grant_ref, iss=identity.iss, sub=identity.sub):
        return _not_yours()
    return redirect(me_path(identity.iss))


@post(
    "/me/connections/{connection_ref:str}/disconnect",
    operation_id="ownPageDisconnect",
    tags=["browser"],
    status_code=303,
    summary="Disconnect an account: revoked at the provider when it can be, and here; every service loses it",
)
async def disconnect(request: Req, connection_ref: str, services: GrantPageDeps) -> Response[Any]:
    identity = await _checked_me_post(request, services)
    if isinstance(identity, Response):
        return identity
    if not await services.grants.disconnect(connection_ref, iss=identity.iss, sub=identity.sub):
        return _not_yours()
    return redirect(me_path(identity.iss))


@post(
    "/me/connections/{connection_ref:str}/reconnect",
    operation_id="ownPageReconnect",
    tags=["browser"],
    status_code=303,
    summary="Reconnect an account in place: opens its connect page (same connection, same services' access)",
    description="Starts (or reuses) the reconnect flow of one of the signed-in person's connections, for a "
    "service that may use it, and sends the browser to that flow's page; the provider must answer for the "
    "same account there.",
)
async def reconnect(request: Req, connection_ref: str, services: GrantPageDeps) -> Response[Any]:
    identity = await _checked_me_post(request, services)
    if isinstance(identity, Response):
        return identity
    try:
        started = await start_reconnect(
            services.connections.read_sessions, services.flows, connection_ref, subject=(identity.iss, identity.sub)
        )
    except NotReconnectable:
        return page(
            "signin_problem.html",
            409,
            heading=_("This account cannot be reconnected here"),
            text=_(
                "No service may use this account now, so there is nothing to reconnect it for. "
                "The next service that needs it will ask you to connect it."
            ),
        )
    if started is None:
        return _not_yours()
    return redirect(started.url)


def _not_yours() -> Response[Any]:
    # The same answer for an unknown id, another person's, and one already revoked.
    return page(
        "signin_problem.html",
        404,
        heading=_("Nothing to change"),
        text=_("That access does not exist any more. Go back to your elicitd page to see what is connected."),
    )


ROUTES = [answer_grant, own_page, revoke_grant, disconnect, reconnect]
