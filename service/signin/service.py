"""The browser login as a service: start an OIDC attempt, complete it at the callback, sign out.

The routes parse a request and render what this returns; the order of the checks and every unit
of work live here. The callback consumes its attempt in a unit of its own *before* talking to the
issuer, so a replayed callback fails even while the first is still exchanging the code, and the
issuer calls (token exchange, keys) run with no database connection held: an issuer that takes
seconds to answer must not hold pooled connections while it does.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field

import httpx
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from service.crypto.vault import Vault
from service.db.base import FLOW_ID
from service.db.unit import unit_of_work
from service.flows.service import FlowService
from service.i18n import N_
from service.identity import sessions as store
from service.identity.issuers import IssuerDirectory, ResolvedIssuer
from service.identity.oidc import LoginFailed, authorization_url, exchange_code, verify_id_token
from service.settings import Settings
from service.signin.account_page import me_issuer
from service.signin.csrf import CsrfFailed, check_csrf, csrf_token_for
from service.signin.throttle import LoginThrottle

CALLBACK_PATH = "/auth/callback"
# The shape of every token elicitd puts in a cookie (``store.new_token``): anything else is ignored.
TOKEN = re.compile(r"^[A-Za-z0-9_-]{43}$")


class LoginStateInvalid(LoginFailed):
    code = "login_state_invalid"
    title = N_("This sign-in link is not valid")


class IssuerMismatch(LoginFailed):
    code = "issuer_mismatch"
    title = N_("Sign-in answered by the wrong service")


async def start_attempt(
    sessions: async_sessionmaker[AsyncSession],
    vault: Vault,
    issuer: ResolvedIssuer,
    *,
    binding: str,
    return_to: str,
    redirect_uri: str,
    prompt: str | None = None,
    max_age: int | None = None,
) -> str:
    """Store a new single-use login attempt for this browser (``binding``), in a unit of its own, and
    say where to send the browser; the end users' and the console's sign-ins both start here."""
    state, nonce, verifier = store.new_token(), store.new_token(), secrets.token_urlsafe(64)
    async with unit_of_work(sessions) as session:
        await store.create_login_attempt(
            session,
            vault,
            state=state,
            browser_binding=binding,
            issuer_id=issuer.id,
            code_verifier=verifier,
            nonce=nonce,
            return_to=return_to,
        )
    return authorization_url(
        issuer,
        redirect_uri=redirect_uri,
        state=state,
        nonce=nonce,
        code_verifier=verifier,
        prompt=prompt,
        max_age=max_age,
    )


def check_answer_issuer(issuer: ResolvedIssuer, answer: Mapping[str, str]) -> None:
    """RFC 9207: the response must come from the issuer the browser was sent to — checked before the
    code goes anywhere, so a mix-up attacker never sees it redeemed at the wrong token endpoint."""
    returned_iss = answer.get("iss")
    if returned_iss is not None and returned_iss != issuer.issuer:
        raise IssuerMismatch(N_("The sign-in answer did not come from the expected service."))
    if returned_iss is None and issuer.iss_parameter_supported:
        raise IssuerMismatch(N_("The sign-in answer did not say which service sent it."))


@dataclass(frozen=True, slots=True)
class LoginRedirect:
    """Where to send the browser, and the pre-login cookie that ties the attempt to it."""

    url: str
    binding: str = field(repr=False)


@dataclass(frozen=True, slots=True)
class SignedIn:
    return_to: str
    session_token: str = field(repr=False)
    lifetime: int


@dataclass(frozen=True, slots=True)
class NotSignedIn:
    """The person cancelled, or the issuer refused on its own page: nothing was shared."""

    return_to: str


class LoginService:
    def __init__(
        self,
        *,
        settings: Settings,
        sessions: async_sessionmaker[AsyncSession],
        vault: Vault,
        issuers: IssuerDirectory,
        flows: FlowService,
        http: httpx.AsyncClient,
        throttle: LoginThrottle | None = None,
    ) -> None:
        self.settings = settings
        self._sessions = sessions
        self._vault = vault
        self.issuers = issuers
        self.flows = flows
        self._http = http
        self.throttle = throttle or LoginThrottle()

    @property
    def redirect_uri(self) -> str:
        """Fixed and exact: the one URI registered at every issuer."""
        return self.settings.public_url + CALLBACK_PATH

    async def issuer_for_page(self, path: str) -> ResolvedIssuer | None:
        """The issuer to sign in at for a flow page (or the own page ``/me?iss=…``: that issuer);
        None when the flow is no longer pending or its issuer is not trusted (the page then explains)."""
        own = me_issuer(path)
        if own is not None:
            return await self.issuers.resolve(own)
        flow_id = FLOW_ID.parse(path.removeprefix("/f/"))
        flow = None if flow_id is None else await self.flows.read(flow_id)
        if flow is None or flow.status != "pending":
            return None
        return await self.issuers.resolve(flow.subject_iss)

    async def begin(
        self,
        issuer: ResolvedIssuer,
        return_to: str,
        *,
        binding: str | None,
        address: str,
        prompt: str | None = None,
    ) -> LoginRedirect:
        """Say where to send the browser: with the attempt this browser already has for the same
        issuer and page, or with a new one.

        The attempt is tied to a pre-login cookie (reused across tabs so parallel logins work), so a
        ``state`` sent to another browser — a login CSRF or a forwarded link — fails at the callback.
        A new attempt is a stored row: each client ``address`` may start only so many per minute
        (``LoginThrottle``; ``RateLimited`` past it), and a browser that comes back reuses its own.
        """
        if binding is None or not TOKEN.fullmatch(binding):
            binding = None
        else:
            async with self._sessions() as session:
                reused = await store.reusable_login_attempt(
                    session, self._vault, browser_binding=binding, issuer_id=issuer.id, return_to=return_to
                )
            if reused is not None:
                url = authorization_url(
                    issuer,
                    redirect_uri=self.redirect_uri,
                    state=reused.state,
                    nonce=reused.nonce,
                    code_verifier=reused.code_verifier,
                    prompt=prompt,
                )
                return LoginRedirect(url=url, binding=binding)
        self.throttle.admit(address)
        binding = binding or store.new_token()
        url = await start_attempt(
            self._sessions,
            self._vault,
            issuer,
            binding=binding,
            return_to=return_to,
            redirect_uri=self.redirect_uri,
            prompt=prompt,
        )
        return LoginRedirect(url=url, binding=binding)

    async def complete(
        self, *, state: str | None, binding: str | None, answer: Mapping[str, str], replacing: str | None
    ) -> SignedIn | NotSignedIn:
        """The callback: ``answer`` is the issuer's query (``code``, ``iss``, ``error``); ``replacing``
        the browser's current session, ended when the new one starts. Raises ``LoginFailed``."""
        if not state or not binding:
            raise LoginStateInvalid(
                N_(
                    "This sign-in was not started in this browser, or it took too long. "
                    "Open the link from your assistant again."
                )
            )
        async with unit_of_work(self._sessions) as session:
            attempt = await store.consume_login_attempt(session, self._vault, state=state, browser_binding=binding)
        if attempt is None:
            raise LoginStateInvalid(
                N_(
                    "This sign-in was already used, has expired, or was started in another "
                    "browser. Open the link from your assistant again."
                )
            )
        issuer = await self.issuers.resolve_id(attempt.issuer_id)
        if issuer is None:
            raise LoginFailed(N_("This sign-in service is no longer trusted here."))
        check_answer_issuer(issuer, answer)
        if answer.get("error") is not None:
            return NotSignedIn(return_to=attempt.return_to)
        code = answer.get("code")
        if not code:
            raise LoginFailed(N_("The sign-in service sent no authorization code."))
        tokens = await exchange_code(
            self._http, issuer, code=code, redirect_uri=self.redirect_uri, code_verifier=attempt.code_verifier
        )
        verified = await verify_id_token(self.issuers, issuer, tokens.get("id_token"), nonce=attempt.nonce)
        lifetime = self.settings.browser_session_seconds
        async with unit_of_work(self._sessions) as session:
            if replacing is not None:
                await store.delete_session(session, replacing)  # never keep two live sessions for one browser
            token = await store.create_browser_session(
                session, issuer_id=issuer.id, iss=verified.iss, sub=verified.sub, lifetime=lifetime
            )
            await store.purge_expired(session, batch=100)
        return SignedIn(return_to=attempt.return_to, session_token=token, lifetime=lifetime)

    async def sign_out(self, token: str | None, *, submitted_csrf: str | None, cross_site: bool) -> None:
        """End the session of this cookie, from its own form only: a live session, its CSRF token,
        and no other site's ``Origin``. Anything else raises ``CsrfFailed`` and changes nothing — a
        logout another site can trigger would also start the sign-in it chooses (``return_to``)."""
        if token is None or cross_site:
            raise CsrfFailed
        async with unit_of_work(self._sessions) as session:
            row = await store.touch_session(session, token)
            if row is None:
                raise CsrfFailed
            check_csrf(csrf_token_for(row), submitted_csrf, cross_site=cross_site)
            await store.delete_session(session, token)
